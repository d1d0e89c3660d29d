// Element types of checkpointed tensors and how each maps to a name, a size and an HDF5
// storage type. bfloat16 is stored as 16-bit unsigned integers (the raw bits) with a
// "dtype" attribute saying bfloat16: every HDF5 reader can load it (see the format doc).
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace ftrain::ckpt {

enum class DType { kBFloat16, kFloat16, kFloat32, kFloat64, kInt32, kInt64, kUInt8 };

const char* DTypeName(DType d);  // "bfloat16", "float32", ...
StatusOr<DType> DTypeFromName(const std::string& name);
size_t DTypeSize(DType d);
// Converts element i of a buffer of type d to double (for diffs and reports).
double ElementAsDouble(DType d, const void* data, size_t i);

}  // namespace ftrain::ckpt
