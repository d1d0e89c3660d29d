// safetensors files (the Hugging Face format): 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw bytes.
// The header is untrusted input: its length, JSON, dtypes, shapes and offsets are validated
// against the file size before anything is allocated. Streaming writer for large exports.
// No LibTorch here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::model {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "BF16", "F16", "F32", "F64", "I64", "I32", "U8", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

size_t SafetensorsDTypeSize(const std::string& dtype);  // 0 if unknown

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data section
};

// Reads and validates the header of `path` (sizes, offsets in bounds, no overlaps, shape x
// dtype size == byte length). Errors name the file and the tensor.
StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);
// Reads one tensor's bytes.
Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, std::vector<uint8_t>* out);
// Reads one tensor's bytes into `out`, which must hold exactly entry.end - entry.begin bytes.
Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, void* out, size_t out_bytes);
// Reads `bytes` bytes of one tensor starting `offset` bytes into it (pread: nothing else of
// the file is touched). The range must lie inside the tensor; errors name the file, the
// tensor and the range.
Status ReadSafetensorsRange(const std::string& path, const SafetensorsHeader& header,
                            const SafetensorsEntry& entry, uint64_t offset, void* out,
                            size_t bytes);

// Writes tensors in the order given: Begin() with every entry's name/dtype/shape (offsets are
// assigned), then Write() each tensor's bytes in that order, then Finish() (fsync, rename
// from path.tmp, fsync of the directory).
class SafetensorsWriter {
 public:
  ~SafetensorsWriter();
  static StatusOr<std::unique_ptr<SafetensorsWriter>> Begin(
      const std::string& path, std::vector<SafetensorsEntry> entries,
      const std::map<std::string, std::string>& metadata);
  Status Write(const std::string& name, const void* data, size_t bytes);
  Status Finish();

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::string tmp_;
  FILE* file_ = nullptr;
  std::vector<SafetensorsEntry> entries_;
  size_t next_ = 0;
};

}  // namespace ftrain::model
