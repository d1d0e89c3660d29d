// HDF5 helpers for the shard writer and reader (internal to src/ckpt): silencing HDF5's own
// error printing, turning its error stack into a Status that names the file and dataset, a
// handle that closes itself, the file and memory types of each DType, and scalar/1-D
// attributes. No shard layout here (see shard_writer.cc / shard_reader.cc).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "core/status.h"

namespace ftrain::ckpt {

// Turns off HDF5's printing of error stacks (once per process); errors become Status values.
void QuietHdf5();
// The outermost entries of HDF5's error stack, then clears it.
std::string H5ErrorText();
// IOError "HDF5 <op> '<path>' [dataset <dataset>]: <HDF5's error stack>".
Status H5Fail(const std::string& op, const std::string& path, const std::string& dataset = "");

// Closes an HDF5 handle of any kind at scope exit.
class H5Handle {
 public:
  explicit H5Handle(hid_t id = -1) : id_(id) {}
  ~H5Handle() { reset(); }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  // Closes the handle held (if any) and takes `id`.
  void reset(hid_t id = -1);
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  hid_t release() {
    hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_;
};

// The type a dataset of `d` has in the file (16-bit floats as raw little-endian u16; the
// dtype attribute says which) and in memory.
hid_t FileType(DType d);
hid_t MemType(DType d);

// Attributes; false when HDF5 fails (writers) or the attribute is missing, of the wrong
// class or of an impossible size (readers: a damaged header, not a 4 GB string).
bool WriteStringAttr(hid_t obj, const char* name, const std::string& value);
bool WriteI64Attr(hid_t obj, const char* name, const std::vector<int64_t>& values, bool scalar);
bool WriteU64Attr(hid_t obj, const char* name, uint64_t value);
bool ReadStringAttr(hid_t obj, const char* name, std::string* out);
bool ReadI64Attr(hid_t obj, const char* name, std::vector<int64_t>* out);
bool ReadU64Attr(hid_t obj, const char* name, uint64_t* out);

}  // namespace ftrain::ckpt
