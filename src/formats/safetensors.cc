// safetensors header validation, reading and streaming writing.
#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

namespace ftrain::model {

using nlohmann::json;

size_t SafetensorsDTypeSize(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

namespace {
constexpr uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit
}

StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  auto bad = [&](const std::string& what) {
    return Status::Corruption("safetensors file '" + path + "': " + what);
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status::NotFound("cannot open safetensors file '" + path + "': " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError("cannot stat safetensors file '" + path + "': " + std::strerror(err));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint8_t len_bytes[8];
  if (file_size < 8 || ::pread(fd, len_bytes, 8, 0) != 8) {
    ::close(fd);
    return bad("shorter than the 8-byte header length");
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | len_bytes[i];
  if (hlen > kMaxHeader || hlen > file_size - 8) {
    ::close(fd);
    return bad("header length " + std::to_string(hlen) + " exceeds the file (" +
               std::to_string(file_size) + " bytes) or the 100 MB limit");
  }
  std::string text(static_cast<size_t>(hlen), '\0');
  if (::pread(fd, &text[0], hlen, 8) != static_cast<ssize_t>(hlen)) {
    ::close(fd);
    return bad("cannot read the header");
  }
  ::close(fd);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("header is not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + hlen;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return bad("__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) return bad("__metadata__ values must be strings");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const json& v = it.value();
    SafetensorsEntry e;
    e.name = it.key();
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      return bad("tensor '" + e.name + "' lacks dtype/shape/data_offsets");
    }
    e.dtype = v["dtype"].get<std::string>();
    const size_t elem = SafetensorsDTypeSize(e.dtype);
    if (elem == 0) return bad("tensor '" + e.name + "' has unknown dtype '" + e.dtype + "'");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor '" + e.name + "' has a bad shape");
      uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX)) {
        return bad("tensor '" + e.name + "' has a dimension larger than 2^63");
      }
      if (dim != 0 && numel > data_size / dim) {
        return bad("tensor '" + e.name + "' shape is larger than the file");
      }
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return bad("tensor '" + e.name + "' has bad data_offsets");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size) {
      return bad("tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + ") are outside the data section of " +
                 std::to_string(data_size) + " bytes (truncated file?)");
    }
    if (e.end - e.begin != numel * elem) {
      return bad("tensor '" + e.name + "' has " + std::to_string(e.end - e.begin) +
                 " bytes but its shape and dtype need " + std::to_string(numel * elem));
    }
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  // Non-empty byte ranges must not overlap (an empty tensor occupies no bytes).
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : h.entries) {
    if (e.begin == e.end) continue;
    if (prev != nullptr && e.begin < prev->end) {
      return bad("tensors '" + prev->name + "' and '" + e.name + "' overlap");
    }
    prev = &e;
  }
  return h;
}

Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, std::vector<uint8_t>* out) {
  out->resize(entry.end - entry.begin);
  return ReadSafetensorsTensor(path, header, entry, out->data(), out->size());
}

Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, void* out, size_t out_bytes) {
  if (entry.end < entry.begin || out_bytes != entry.end - entry.begin) {
    return Status::Internal("tensor '" + entry.name + "' in '" + path + "' has " +
                            std::to_string(entry.end - entry.begin) + " bytes, buffer has " +
                            std::to_string(out_bytes));
  }
  return ReadSafetensorsRange(path, header, entry, 0, out, out_bytes);
}

Status ReadSafetensorsRange(const std::string& path, const SafetensorsHeader& header,
                            const SafetensorsEntry& entry, uint64_t offset, void* out,
                            size_t bytes) {
  const std::string range =
      "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + ")";
  if (entry.end < entry.begin || offset > entry.end - entry.begin ||
      bytes > entry.end - entry.begin - offset) {
    return Status::Corruption("tensor '" + entry.name + "' in '" + path + "': " + range +
                              " are outside its " + std::to_string(entry.end - entry.begin) +
                              " bytes");
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("cannot open '" + path + "': " + std::strerror(errno));
  uint8_t* dst = static_cast<uint8_t*>(out);
  const uint64_t start = header.data_start + entry.begin + offset;
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd, dst + done, bytes - done, static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError("read of tensor '" + entry.name + "' (" + range + ") in '" + path +
                             "' failed: " + std::strerror(err));
    }
    if (n == 0) {
      ::close(fd);
      return Status::Corruption("short read of tensor '" + entry.name + "' (" + range + ") in '" +
                                path +
                                "': the file ends early (truncated since its header was read?)");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);  // unfinished: drop the temp file
    ::unlink(tmp_.c_str());
  }
}

StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Begin(
    const std::string& path, std::vector<SafetensorsEntry> entries,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  json header = json::object();
  uint64_t offset = 0;
  for (auto& e : entries) {
    const size_t elem = SafetensorsDTypeSize(e.dtype);
    if (elem == 0) return Status::InvalidArgument("unknown safetensors dtype " + e.dtype);
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    e.begin = offset;
    e.end = offset + numel * elem;
    offset = e.end;
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // align the data section
  w->file_ = std::fopen(w->tmp_.c_str(), "wb");
  if (w->file_ == nullptr) {
    return Status::IOError("cannot create '" + w->tmp_ + "': " + std::strerror(errno));
  }
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, w->file_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), w->file_) != text.size()) {
    return Status::IOError("write '" + w->tmp_ + "': " + std::strerror(errno));
  }
  w->entries_ = std::move(entries);
  return w;
}

Status SafetensorsWriter::Write(const std::string& name, const void* data, size_t bytes) {
  if (next_ >= entries_.size() || entries_[next_].name != name) {
    return Status::Internal("safetensors tensors must be written in header order; got " + name);
  }
  const auto& e = entries_[next_];
  if (bytes != e.end - e.begin) {
    return Status::Internal("tensor " + name + " has " + std::to_string(bytes) +
                            " bytes, header says " + std::to_string(e.end - e.begin));
  }
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) {
    return Status::IOError("write '" + tmp_ + "': " + std::strerror(errno));
  }
  ++next_;
  return Status::Ok();
}

Status SafetensorsWriter::Finish() {
  if (next_ != entries_.size()) return Status::Internal("not every tensor was written");
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) {
    return Status::IOError("flush '" + tmp_ + "': " + std::strerror(errno));
  }
  std::fclose(file_);
  file_ = nullptr;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return Status::IOError("rename '" + tmp_ + "' -> '" + path_ + "': " + std::strerror(errno));
  }
  // Make the rename durable: fsync the directory that now names the file.
  const size_t slash = path_.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    return Status::IOError("fsync of directory '" + dir + "' after writing '" + path_ +
                           "': " + std::strerror(err));
  }
  ::close(dfd);
  return Status::Ok();
}

}  // namespace ftrain::model
