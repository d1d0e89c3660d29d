// Shared-memory segments for ckptd slots.
#include "daemon/shm_slots.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"

namespace ftrain::ckptd {

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, uint64_t bytes) {
  ::shm_unlink(name.c_str());  // ignored: usually ENOENT; a stale segment is replaced
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("shm_open '" + name + "': " + std::strerror(errno));
  auto fail = [&](const char* op) {
    Status s = Status::IOError(std::string(op) + " '" + name + "': " + std::strerror(errno) +
                               " (is /dev/shm large enough? see --memory-gb)");
    ::close(fd);
    ::shm_unlink(name.c_str());
    return s;
  };
  if (::fchmod(fd, 0600) != 0) return fail("fchmod");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  // Allocate every page now: a full /dev/shm is a clean error here (the trainer falls back to
  // synchronous saves) instead of a SIGBUS in the trainer's copy later, and the first
  // snapshot does not pay the page allocation inside its stall.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    errno = err;
    return fail("posix_fallocate");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return fail("mmap");
  struct stat st {};
  ::fstat(fd, &st);  // cannot fail on an open fd; the identity checked at unlink
  ::close(fd);
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  seg->size_ = bytes;
  seg->data_ = static_cast<uint8_t*>(p);
  seg->dev_ = st.st_dev;
  seg->ino_ = st.st_ino;
  return seg;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
  int fd = ::shm_open(name_.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return;  // already gone
  struct stat st {};
  const bool mine = ::fstat(fd, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
  ::close(fd);
  if (mine) ::shm_unlink(name_.c_str());  // ignored: nothing to do if it is already gone
}

int UnlinkStaleSegments(const std::string& prefix) {
  int n = 0;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) ++n;
  }
  ::closedir(d);
  if (n > 0)
    FT_LOG(Warning) << "ckptd: removed " << n
                    << " stale shared-memory slot(s) of a previous daemon";
  return n;
}

}  // namespace ftrain::ckptd
