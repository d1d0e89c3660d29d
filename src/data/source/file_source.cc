// Source over a directory: pread on file descriptors opened once and kept (one per shard).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "core/env.h"
#include "data/source/s3.h"
#include "data/source/source.h"

namespace ftrain::data {
namespace {

class FileSource : public Source {
 public:
  FileSource(std::string dir, Env* env) : dir_(std::move(dir)), env_(env) {
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  }
  ~FileSource() override {
    for (auto& [name, fd] : fds_) ::close(fd);
  }

  std::string Where(const std::string& name) const override { return dir_ + "/" + name; }

  StatusOr<std::string> ReadFile(const std::string& name) override {
    const std::string path = Where(name);
    std::string out;
    Status s = env_->ReadFile(path, &out);
    if (s.IsNotFound()) return Status::NotFound(path + ": no such file");
    if (!s.ok()) return s;
    return out;
  }

  void Hint(const std::string& name, uint64_t offset, uint64_t len) override {
    int fd = -1;
    if (!Fd(name, &fd).ok()) return;  // a hint: the read itself will report the error
    ::posix_fadvise(fd, off_t(offset), off_t(len), POSIX_FADV_WILLNEED);
  }

  Status ReadRange(const std::string& name, uint64_t offset, uint64_t len, uint8_t* out) override {
    if (cancelled()) return Status::Aborted("read cancelled");
    int fd = -1;
    FT_RETURN_IF_ERROR(Fd(name, &fd));
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd, out + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return Status::IOError("read " + Where(name) + " at offset " +
                               std::to_string(offset + done) + ": " + std::strerror(errno));
      }
      if (n == 0) {
        struct stat st;
        std::string size = ::fstat(fd, &st) == 0 ? std::to_string(st.st_size) : "?";
        return Status::Corruption(Where(name) + ": the file is " + size +
                                  " bytes long, but bytes " + std::to_string(offset) + ".." +
                                  std::to_string(offset + len - 1) +
                                  " were expected (truncated file?)");
      }
      done += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

 private:
  static Status OpenError(const std::string& path, int err) {
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IOError("open " + path + ": " + std::strerror(err));
  }

  Status Fd(const std::string& name, int* fd) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fds_.find(name);
    if (it != fds_.end()) {
      *fd = it->second;
      return Status::Ok();
    }
    const std::string path = Where(name);
    int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f < 0) return OpenError(path, errno);
    fds_[name] = f;
    *fd = f;
    return Status::Ok();
  }

  std::string dir_;
  Env* env_;  // ReadFile's reads
  std::mutex mu_;
  std::map<std::string, int> fds_;  // guarded by mu_; closed in the destructor
};

}  // namespace

std::unique_ptr<Source> NewFileSource(const std::string& dir, Env* env) {
  return std::make_unique<FileSource>(dir, env);
}

bool IsUrl(const std::string& spec) {
  return spec.rfind("http://", 0) == 0 || spec.rfind("https://", 0) == 0 || IsS3Url(spec);
}

Status HttpOptions::Validate() const {
  if (max_retries < 0) return Status::InvalidArgument("http max_retries must be >= 0");
  if (backoff_ms < 0 || max_backoff_ms < backoff_ms) {
    return Status::InvalidArgument("http backoff_ms must be >= 0 and <= max_backoff_ms");
  }
  if (connect_timeout_ms <= 0 || stall_timeout_ms <= 0 || request_timeout_ms <= 0) {
    return Status::InvalidArgument("http timeouts must be > 0");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Source>> OpenSource(const std::string& spec, const HttpOptions& http,
                                             Env* env) {
  if (spec.empty()) return Status::InvalidArgument("data source is empty: give a directory or URL");
  if (IsS3Url(spec)) {
    FT_RETURN_IF_ERROR(http.Validate());
    return NewS3Source(spec, http);
  }
  if (IsUrl(spec)) {
    FT_RETURN_IF_ERROR(http.Validate());
    return NewHttpSource(spec, http);
  }
  struct stat st;
  if (::stat(spec.c_str(), &st) != 0) {
    return Status::NotFound(spec + ": no such directory (expected a packed directory with " +
                            "index.json, or an http(s):// or s3:// URL)");
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(spec + ": not a directory");
  return NewFileSource(spec, env);
}

}  // namespace ftrain::data
