// orch/files.cc - private files and checked reads (files.h).
#include "orch/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace ftrain::orch {

// then rename (which replaces a link named `path`, never its target).
Status WritePrivate(const std::string& path, const std::string& data) {
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(rd());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot create '" + tmp + "': " + strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return Status::IOError("cannot write '" + tmp + "': " + strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = fsync(fd) == 0;
  close(fd);
  if (!synced || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Status::IOError("cannot put '" + path + "' in place: " + strerror(err));
  }
  return Status::Ok();
}

// `path` must be this user's, not a link, of `type`, and private (no group/other bits).
Status CheckPrivate(const std::string& path, mode_t type, const char* what) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return Status::FailedPrecondition(path + ": " + strerror(errno));
  }
  if ((st.st_mode & S_IFMT) != type) {
    return Status::FailedPrecondition(path + " is not a " + what +
                                      " (a symbolic link is never followed)");
  }
  if (st.st_uid != getuid()) {
    return Status::FailedPrecondition(path + " belongs to uid " + std::to_string(st.st_uid) +
                                      ", not to this user (" + std::to_string(getuid()) +
                                      "): refusing to replay a submission others control");
  }
  if ((st.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::FailedPrecondition(path + " has mode " + mode +
                                      ": group or others may change it; refusing to replay it");
  }
  return Status::Ok();
}

StatusOr<std::string> ReadPrivate(const std::string& path) {
  FT_RETURN_IF_ERROR(CheckPrivate(path, S_IFREG, "regular file"));
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::FailedPrecondition(path + ": " + strerror(errno));
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

StatusOr<std::string> ReadText(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + " does not exist");
    return Status::IOError("cannot read '" + path + "': " + strerror(errno));
  }
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string ReadTextOr(const std::string& path, const std::string& def) {
  auto t = ReadText(path);
  return t.ok() ? *t : def;
}

std::string LastLine(const std::string& path) {
  auto text = ReadText(path);
  if (!text.ok()) return "";
  std::string t = *text;
  if (t.empty() || t.back() != '\n') {
    const size_t nl = t.rfind('\n');  // a torn last line is no line
    if (nl == std::string::npos) return "";
    t.resize(nl + 1);
  }
  t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace ftrain::orch
