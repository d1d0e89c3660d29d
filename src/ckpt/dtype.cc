// DType names, sizes and element access.
#include "ckpt/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ftrain::ckpt {

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
  }
  return "?";
}

StatusOr<DType> DTypeFromName(const std::string& name) {
  for (DType d : {DType::kBFloat16, DType::kFloat16, DType::kFloat32, DType::kFloat64,
                  DType::kInt32, DType::kInt64, DType::kUInt8}) {
    if (name == DTypeName(d)) return d;
  }
  return Status::Corruption("unknown dtype '" + name + "'");
}

size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  return 1;
}

namespace {

double HalfToDouble(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = mant * (1.0 / (1 << 24));
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = (1.0 + mant / 1024.0) * std::ldexp(1.0, exp - 15);
  return sign ? -v : v;
}

}  // namespace

double ElementAsDouble(DType d, const void* data, size_t i) {
  const auto* p = static_cast<const uint8_t*>(data);
  switch (d) {
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return HalfToDouble(b);
    }
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::kFloat64: {
      double f;
      std::memcpy(&f, p + 8 * i, 8);
      return f;
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<double>(v);
    }
    case DType::kUInt8:
      return p[i];
  }
  return 0;
}

}  // namespace ftrain::ckpt
