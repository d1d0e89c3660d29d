// PosixEnv: Env over POSIX calls; every error names the path, the operation and errno.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/config.h"
#include "core/env.h"
#include "core/log.h"

namespace ftrain {
namespace {

Status PosixError(const std::string& op, const std::string& path, int err) {
  std::string msg = op + " '" + path + "': " + std::strerror(err);
  if (err == ENOSPC) msg += " (the file system is full: free space or change the directory)";
  if (err == ENOENT) return Status::NotFound(msg);
  return Status::IOError(msg);
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);  // an unclosed file was abandoned after an error
  }
  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return PosixError("write", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return PosixError("fsync", path_, errno);
    return Status::Ok();
  }
  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return PosixError("close", path_, errno);
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixEnv : public Env {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    // O_NOFOLLOW: the run directory may be shared (a group-writable project tree); a file is
    // never created or truncated through a link someone planted in its place (ELOOP).
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return PosixError("create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Status CreateExclusive(const std::string& path, const std::string& contents) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) return Status::FailedPrecondition("'" + path + "' already exists");
      return PosixError("create", path, errno);
    }
    PosixWritableFile f(path, fd);
    Status s = f.Append(contents.data(), contents.size());
    if (s.ok()) s = f.Sync();
    Status c = f.Close();
    return s.ok() ? c : s;
  }

  Status ReadFile(const std::string& path, std::string* contents) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open", path, errno);
    contents->clear();
    char buf[1 << 16];
    for (;;) {
      ssize_t r = ::read(fd, buf, sizeof(buf));
      if (r < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        return PosixError("read", path, err);
      }
      if (r == 0) break;
      contents->append(buf, static_cast<size_t>(r));
    }
    ::close(fd);
    return Status::Ok();
  }

  Status SyncFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("open for fsync", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return PosixError("fsync", path, err);
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("open directory for fsync", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return PosixError("fsync directory", path, err);
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError("rename to '" + to + "' of", from, errno);
    }
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("remove", path, errno);
    return Status::Ok();
  }

  Status RemoveDirRecursive(const std::string& path) override {
    if (IsSymlink(path)) {
      return Status::FailedPrecondition("refusing to remove '" + path +
                                        "' recursively: it is a symbolic link (its target is "
                                        "left alone; remove the link itself if you mean to)");
    }
    auto children = ListDir(path);
    if (!children.ok()) return children.status();
    for (const auto& c : *children) {
      std::string p = JoinPath(path, c);
      // lstat, not stat: a link to a directory is unlinked, never descended into.
      struct stat st;
      const bool dir = ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      Status s = dir ? RemoveDirRecursive(p) : RemoveFile(p);
      if (!s.ok()) return s;
    }
    if (::rmdir(path.c_str()) != 0) return PosixError("remove directory", path, errno);
    return Status::Ok();
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return PosixError("create directory", path, errno);
    }
    return Status::Ok();
  }

  StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return PosixError("list directory", path, errno);
    std::vector<std::string> out;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
    return out;
  }

  StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PosixError("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  bool IsRegularFile(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }

  bool IsSymlink(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  }

  uint64_t NowMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }

  uint64_t UnixMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }

  void SleepForMicroseconds(int64_t micros) override {
    std::this_thread::sleep_for(std::chrono::microseconds(micros));
  }
};

}  // namespace

Env* Env::Default() {
  static Env* env = []() -> Env* {
    static PosixEnv posix;
    const char* crash = std::getenv("FTRAIN_CRASH_AT");
    // With FTRAIN_CRASH_RANK set, only the process whose RANK matches crashes (multi-rank
    // crash tests hand one environment to every rank).
    const char* crash_rank = std::getenv("FTRAIN_CRASH_RANK");
    const char* rank = std::getenv("RANK");
    const bool this_rank =
        crash_rank == nullptr || (rank != nullptr && std::string(rank) == crash_rank);
    int64_t n = 0;
    if (crash != nullptr && this_rank && ParseInt64(crash, &n) && n > 0) {
      static FaultInjectionEnv faulty(&posix);
      faulty.CrashAt(n);
      // A stray variable in a production job would kill it: say so once, up front.
      FT_LOG(Warning) << "FTRAIN_CRASH_AT=" << n
                      << " is set: this process SIGKILLs itself before file-system operation " << n
                      << " (crash testing; see docs/operations.md)";
      return &faulty;
    }
    return &posix;
  }();
  return env;
}

}  // namespace ftrain
