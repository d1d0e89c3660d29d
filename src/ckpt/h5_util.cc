// HDF5 plumbing shared by the shard writer and reader.
#include "ckpt/h5_util.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace ftrain::ckpt {
namespace {

herr_t CollectError(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (err->desc != nullptr && *err->desc != '\0') {
    if (!out->empty()) *out += "; ";
    *out += err->desc;
  }
  return n < 3 ? 0 : 1;  // the outermost few entries say enough
}

}  // namespace

void QuietHdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string H5ErrorText() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, CollectError, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "unknown HDF5 error" : text;
}

Status H5Fail(const std::string& op, const std::string& path, const std::string& dataset) {
  std::string msg = "HDF5 " + op + " '" + path + "'";
  if (!dataset.empty()) msg += " dataset " + dataset;
  return Status::IOError(msg + ": " + H5ErrorText());
}

void H5Handle::reset(hid_t id) {
  if (id_ >= 0) {
    // Close failures at cleanup have no one to report to; the data path checked already.
    switch (H5Iget_type(id_)) {
      case H5I_FILE:
        H5Fclose(id_);
        break;
      case H5I_DATASET:
        H5Dclose(id_);
        break;
      case H5I_DATASPACE:
        H5Sclose(id_);
        break;
      case H5I_DATATYPE:
        H5Tclose(id_);
        break;
      case H5I_ATTR:
        H5Aclose(id_);
        break;
      case H5I_GENPROP_LST:
        H5Pclose(id_);
        break;
      case H5I_GROUP:
        H5Gclose(id_);
        break;
      default:
        break;
    }
  }
  id_ = id;
}

hid_t FileType(DType d) {
  switch (d) {
    case DType::kBFloat16:
    case DType::kFloat16:
      return H5T_STD_U16LE;  // raw bits; the dtype attribute says which
    case DType::kFloat32:
      return H5T_IEEE_F32LE;
    case DType::kFloat64:
      return H5T_IEEE_F64LE;
    case DType::kInt32:
      return H5T_STD_I32LE;
    case DType::kInt64:
      return H5T_STD_I64LE;
    case DType::kUInt8:
      return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}

hid_t MemType(DType d) {
  switch (d) {
    case DType::kBFloat16:
    case DType::kFloat16:
      return H5T_NATIVE_UINT16;
    case DType::kFloat32:
      return H5T_NATIVE_FLOAT;
    case DType::kFloat64:
      return H5T_NATIVE_DOUBLE;
    case DType::kInt32:
      return H5T_NATIVE_INT32;
    case DType::kInt64:
      return H5T_NATIVE_INT64;
    case DType::kUInt8:
      return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_UINT8;
}

bool WriteStringAttr(hid_t obj, const char* name, const std::string& value) {
  H5Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return attr.ok() && H5Awrite(attr.get(), type.get(), value.c_str()) >= 0;
}

bool WriteI64Attr(hid_t obj, const char* name, const std::vector<int64_t>& values, bool scalar) {
  hsize_t n = values.size();
  H5Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr));
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (values.empty()) return attr.ok();
  return attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()) >= 0;
}

bool WriteU64Attr(hid_t obj, const char* name, uint64_t value) {
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return attr.ok() && H5Awrite(attr.get(), H5T_NATIVE_UINT64, &value) >= 0;
}

bool ReadStringAttr(hid_t obj, const char* name, std::string* out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  H5Handle type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) return false;
  size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (1u << 20)) return false;  // a damaged header, not a 4 GB string
  std::string buf(size, '\0');
  H5Handle mem(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), size);
  H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
  if (H5Aread(attr.get(), mem.get(), &buf[0]) < 0) return false;
  buf.resize(strnlen(buf.c_str(), size));
  *out = buf;
  return true;
}

bool ReadI64Attr(hid_t obj, const char* name, std::vector<int64_t>* out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  H5Handle space(H5Aget_space(attr.get()));
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0 || n > (1 << 20)) return false;
  out->assign(static_cast<size_t>(n), 0);
  if (n == 0) return true;
  return H5Aread(attr.get(), H5T_NATIVE_INT64, out->data()) >= 0;
}

bool ReadU64Attr(hid_t obj, const char* name, uint64_t* out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  return H5Aread(attr.get(), H5T_NATIVE_UINT64, out) >= 0;
}

}  // namespace ftrain::ckpt
