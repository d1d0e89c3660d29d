// FileSlice reading with pread on one descriptor per call.
#include "data/pack/file_slice.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "data/format/hash.h"

namespace ftrain::data {
namespace {

class Fd {
 public:
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ >= 0) return Status::Ok();
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError("open " + path + ": " + std::strerror(errno));
  }
  // Up to cap bytes at offset; 0 at the end of the file.
  StatusOr<size_t> ReadAt(uint64_t offset, char* buf, size_t cap) {
    for (;;) {
      ssize_t n = ::pread(fd_, buf, cap, off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return Status::IOError("read " + path_ + " at offset " + std::to_string(offset) + ": " +
                               std::strerror(errno));
      }
      return size_t(n);
    }
  }
  // Calls f on consecutive blocks of [begin, end) (end may lie past the end of the file).
  Status Scan(uint64_t begin, uint64_t end, const std::function<bool(const char*, size_t)>& f,
              uint64_t* stopped_at = nullptr) {
    std::vector<char> buf(1 << 20);
    uint64_t pos = begin;
    while (pos < end) {
      FT_ASSIGN_OR_RETURN(
          size_t n, ReadAt(pos, buf.data(), size_t(std::min<uint64_t>(buf.size(), end - pos))));
      if (n == 0) break;
      if (!f(buf.data(), n)) break;
      pos += n;
    }
    if (stopped_at != nullptr) *stopped_at = pos;
    return Status::Ok();
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

class SliceStream : public InputStream {
 public:
  SliceStream(std::unique_ptr<Fd> fd, FileSlice s) : fd_(std::move(fd)), s_(s), pos_(s.begin) {}
  StatusOr<size_t> Read(char* buf, size_t cap) override {
    if (pos_ >= s_.end) return size_t{0};
    FT_ASSIGN_OR_RETURN(size_t n,
                        fd_->ReadAt(pos_, buf, size_t(std::min<uint64_t>(cap, s_.end - pos_))));
    if (n == 0) {
      return Status::Corruption(fd_->path() + " ended at byte " + std::to_string(pos_) +
                                " while its part reads up to byte " + std::to_string(s_.end) +
                                " (the file changed since the parts were planned; rerun the part)");
    }
    hash_.Update(buf, n);
    pos_ += n;
    return n;
  }
  uint64_t raw_bytes() const override { return pos_ - s_.begin; }
  uint64_t raw_xxh3() const override { return hash_.Digest(); }
  Status DrainRaw() override {
    std::vector<char> buf(1 << 20);
    for (;;) {
      FT_ASSIGN_OR_RETURN(size_t n, Read(buf.data(), buf.size()));
      if (n == 0) return Status::Ok();
    }
  }

 private:
  std::unique_ptr<Fd> fd_;
  FileSlice s_;
  uint64_t pos_;
  Hash64Stream hash_;
};

}  // namespace

StatusOr<std::unique_ptr<InputStream>> OpenFileSlice(const InputFile& file,
                                                     const FileSlice& slice) {
  auto fd = std::make_unique<Fd>();
  FT_RETURN_IF_ERROR(fd->Open(file.path));
  return std::unique_ptr<InputStream>(new SliceStream(std::move(fd), slice));
}

StatusOr<uint64_t> LineStartAtOrAfter(const std::string& path, uint64_t pos, uint64_t size) {
  if (pos == 0) return uint64_t{0};
  if (pos >= size) return size;
  Fd fd;
  FT_RETURN_IF_ERROR(fd.Open(path));
  uint64_t found = size;
  uint64_t block_start = pos - 1;
  FT_RETURN_IF_ERROR(fd.Scan(pos - 1, size, [&](const char* p, size_t n) {
    const void* nl = std::memchr(p, '\n', n);
    if (nl != nullptr) {
      found = block_start + uint64_t(static_cast<const char*>(nl) - p) + 1;
      return false;
    }
    block_start += n;
    return true;
  }));
  return found;
}

StatusOr<uint64_t> CountNewlines(const std::string& path, uint64_t end) {
  if (end == 0) return uint64_t{0};
  Fd fd;
  FT_RETURN_IF_ERROR(fd.Open(path));
  uint64_t lines = 0;
  FT_RETURN_IF_ERROR(fd.Scan(0, end, [&](const char* p, size_t n) {
    lines += uint64_t(std::count(p, p + n, '\n'));
    return true;
  }));
  return lines;
}

StatusOr<uint64_t> HashWholeFile(const std::string& path, uint64_t size) {
  Fd fd;
  FT_RETURN_IF_ERROR(fd.Open(path));
  Hash64Stream hash;
  uint64_t read = 0;
  FT_RETURN_IF_ERROR(fd.Scan(0, UINT64_MAX, [&](const char* p, size_t n) {
    hash.Update(p, n);
    read += n;
    return true;
  }));
  if (read != size) {
    return Status::Corruption(path + " holds " + std::to_string(read) + " bytes, not the " +
                              std::to_string(size) +
                              " it held when the parts were planned (rerun the pack)");
  }
  return hash.Digest();
}

}  // namespace ftrain::data
