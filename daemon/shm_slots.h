// POSIX shared-memory snapshot slots owned by ckptd: created O_EXCL with mode 0600 (fchmod'd
// so the umask cannot widen it), mapped by the daemon and by the rank's trainer, unlinked
// when the daemon drops them or exits. What a slot holds is described by the SUBMIT message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace ftrain::ckptd {

class ShmSegment {
 public:
  // `name` starts with '/'. An existing segment of that name is replaced (stale leftovers of
  // a daemon that was SIGKILLed).
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, uint64_t bytes);
  // munmap + shm_unlink (only if the name still is this segment: a replication that held
  // it can outlive the slot, and a new slot of the same name may exist by then).
  ~ShmSegment();

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  uint8_t* data() const { return data_; }

 private:
  ShmSegment() = default;
  std::string name_;
  uint64_t size_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t dev_ = 0, ino_ = 0;
};

// Unlinks every /dev/shm entry starting with `prefix` (no leading '/'); returns the count.
int UnlinkStaleSegments(const std::string& prefix);

}  // namespace ftrain::ckptd
