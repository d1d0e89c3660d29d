// XXH3-64 of a buffer and of a whole file (the hashes shard files, receipts and manifests
// record).
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ckpt/shard_file.h"

namespace ftrain::ckpt {

uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

Status HashFile(const std::string& path, uint64_t* size, uint64_t* hash) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("open '" + path + "': " + std::strerror(errno));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  // A buffer that stays in L2: each block is copied out of the page cache and hashed while
  // still in cache (an 8 MiB buffer made that two trips through memory).
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint; ignoring failure is fine
  std::vector<char> buf(256u << 10);
  uint64_t total = 0;
  Status status;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = Status::IOError("read '" + path + "': " + std::strerror(errno));
      break;
    }
    if (n == 0) break;
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  *hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  *size = total;
  return status;
}

}  // namespace ftrain::ckpt
