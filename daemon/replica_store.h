// The replicas a ckptd holds for its buddies: per (job, rank) the newest COMPLETE snapshot and,
// while the budget has room, the one before it (the newest may never commit: its node ran ahead
// of a node that died first, and the restart resumes from the older), in anonymous memory,
// within a byte budget (--replica-memory-gb). A replica is received into a fresh buffer that
// counts against the budget from the start (Reserve; older "previous" replicas are dropped to
// make room, never a newest one), and replaces the older one only once it is whole and every
// piece's XXH3 verified (Commit); a failed or aborted transfer just drops its buffer.
// Thread-safe (peer connection threads).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "daemon/peer_wire.h"

namespace ftrain::ckptd {

// An anonymous private mapping (munmap on destruction).
class AnonBuffer {
 public:
  static StatusOr<std::unique_ptr<AnonBuffer>> Create(uint64_t bytes);
  ~AnonBuffer();
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  AnonBuffer() = default;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

struct Replica {
  peer::ReplicaHeader header;  // job, rank, step, hashes, descriptor
  std::unique_ptr<AnonBuffer> image;
  std::string from;  // the peer that sent it
  double received_unix = 0;
};

class ReplicaStore {
 public:
  explicit ReplicaStore(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // A reservation of header.extent bytes for a new replica of (job, rank) at `step`:
  // FailedPrecondition when a newer (or as new) complete one is already held, or when it
  // does not fit the budget (the message says by how much; the first refusal per rank is
  // also logged). The reservation is released when the returned buffer is dropped.
  class Reservation;
  StatusOr<std::unique_ptr<Reservation>> Reserve(const peer::ReplicaHeader& header);
  // Makes the received, verified replica the newest of its (job, rank); the one it replaces
  // becomes the previous (if older), the previous before goes (memory returns once no FETCH
  // is still reading it).
  void Commit(std::unique_ptr<Reservation> r, std::string from);
  // The replica of (job, rank) at `step`, or null; `*newest`: the newest step held (-1: none).
  std::shared_ptr<const Replica> Find(const std::string& job, int rank, int64_t step,
                                      int64_t* newest = nullptr) const;

  struct Held {
    std::string job;
    int rank = 0;
    int64_t step = 0;
    uint64_t bytes = 0;
    std::string from;
  };
  std::vector<Held> List() const;
  uint64_t used() const;  // complete replicas + reservations
  uint64_t budget() const { return budget_; }

 private:
  struct Entry {
    std::shared_ptr<const Replica> newest;
    std::shared_ptr<const Replica> previous;  // older; dropped first when room is needed
  };
  // Drops previous replicas (this key's first, then the oldest steps) until `bytes` more fit.
  void MakeRoomLocked(const std::pair<std::string, int>& key, uint64_t bytes);
  void DropLocked(std::shared_ptr<const Replica>* r);

  const uint64_t budget_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, Entry> held_;  // guarded by mu_
  uint64_t held_bytes_ = 0;                            // guarded by mu_
  uint64_t reserved_bytes_ = 0;                        // guarded by mu_
  std::map<int, bool> overflow_logged_;                // guarded by mu_
  friend class Reservation;
};

class ReplicaStore::Reservation {
 public:
  ~Reservation();
  uint8_t* data() const { return replica_->image->data(); }
  const peer::ReplicaHeader& header() const { return replica_->header; }

 private:
  friend class ReplicaStore;
  ReplicaStore* store_ = nullptr;
  std::unique_ptr<Replica> replica_;
  uint64_t bytes_ = 0;
};

}  // namespace ftrain::ckptd
