// The sending side of buddy replication: after a snapshot is persisted (whole, hashed),
// the server offers it here; one background thread (nice +10 below the persist, never
// touched by the SUBMIT path) streams the newest offered snapshot of each rank to the buddy
// (--buddy HOST:PORT, or the address in --buddy-file, re-read before every connection).
// Older offers of a rank are superseded by newer ones. The slot is not pinned (the server
// hands it out last while it is sent: ReplicationJob::sending): if the trainer reuses it
// while it is being sent, the send is abandoned (the buddy drops the
// partial image); the hashes sent are the persist's, so a torn read can never verify.
// A failure (buddy down, refused) is logged, counted, and retried with backoff.
// At start, once the buddy's address is known, it is checked: that it resolves here and
// that a daemon of this job answers there (a warning naming the address when not), so a
// wrong network shows at start, not at the first node failure.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "core/env.h"
#include "core/status.h"
#include "daemon/shm_slots.h"
#include "daemon/token_bucket.h"

namespace ftrain::ckptd {

struct ReplicationJob {
  int rank = 0;
  std::shared_ptr<ShmSegment> seg;             // keeps the mapping alive while it is read
  std::shared_ptr<std::atomic<bool>> reused;   // set by the server when the slot is handed out
  std::shared_ptr<std::atomic<bool>> sending;  // set here while it is sent (the server spares it)
  ckpt::proto::Submit submit;
  std::vector<uint64_t> xxh3;  // per piece, from the persist
};

struct RankReplication {
  int64_t newest_step = -1;    // newest step the buddy confirmed whole and verified
  int64_t previous_step = -1;  // the one confirmed before it (the buddy keeps it as previous)
  int64_t pending_step = -1;
  uint64_t bytes = 0;  // sent and confirmed
  uint64_t failures = 0;
  uint64_t superseded = 0;  // abandoned: slot reused or a newer snapshot came
  std::string last_error;
};

struct ReplicatorOptions {
  std::string job;
  std::string secret;
  std::string buddy;       // HOST:PORT, or
  std::string buddy_file;  // a file holding it
  std::string start;       // peer::StartIdOf: a buddy file of another start is not used
  double timeout_s = 10;
  Env* env = nullptr;  // the clock of the connections (the daemon's Env); required
  int nice = 19;
  double mbps = 0;  // the sender's cap (token bucket, 1 MB = 1e6 bytes); 0 = unlimited
};

class Replicator {
 public:
  explicit Replicator(ReplicatorOptions options);
  ~Replicator();  // abandons what is in flight (the buddy drops partial images), joins
  void Offer(ReplicationJob job);
  std::map<int, RankReplication> Stats() const;
  // Seconds the sender waited for the cap, in all (0 when unlimited).
  double throttled_s() const;
  std::string buddy() const;  // the address last used ("" before the first)
  // The start-up check's verdict ("" while the buddy's address is not known yet).
  std::string buddy_check() const;

 private:
  void Run();
  Status Send(const ReplicationJob& job, std::string* address);
  // Waits as the cap says before `bytes` go out; false when the send must be abandoned.
  bool Pace(uint64_t bytes, const ReplicationJob& job);
  // A send that waited for the cap was abandoned (its slot reused): the cap is below what
  // the memory tier produces. Logged (the first 10, then every 100th). Called with mu_ held.
  void WarnCapTooLow(const ReplicationJob& job, uint64_t abandoned);
  StatusOr<std::string> BuddyAddress() const;
  // false while the buddy's address is not known yet.
  bool CheckBuddy();

  const ReplicatorOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, ReplicationJob> pending_;  // guarded by mu_: newest offer per rank
  std::map<int, RankReplication> stats_;   // guarded by mu_
  TokenBucket bucket_;                     // replication thread only
  double throttled_s_ = 0;                 // guarded by mu_
  std::string buddy_;                      // guarded by mu_
  std::string buddy_check_;                // guarded by mu_
  bool stop_ = false;                      // guarded by mu_
  std::atomic<bool> stopping_{false};      // read by the sending loop between chunks
  std::thread worker_;
};

}  // namespace ftrain::ckptd
