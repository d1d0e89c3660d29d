// ckptd's front end: the Unix socket (in a 0700 directory under the run dir, one daemon per
// node enforced by a lock file), the peer uid check (SO_PEERCRED), message validation, slot
// ownership (a rank's slots belong to the connection that said HELLO for that rank) and the
// status report. One poll() loop on one thread; the persist worker reports back through a
// pipe. A malformed or hostile client is logged and disconnected; the others keep going.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/store.h"
#include "core/prom_textfile.h"
#include "daemon/peer_options.h"
#include "daemon/persist.h"
#include "daemon/shm_slots.h"

namespace ftrain::ckptd {

struct ServerOptions {
  Env* env = nullptr;  // the files and the clock (the main's Env); required
  std::string root;
  std::string run_dir;
  std::string node;
  PersistOptions persist;
  double memory_gb = 8;
  int slots_per_rank = 2;
  uid_t allowed_uid = 0;  // the job's user (getuid() unless a test says otherwise)
  std::string prom_dir;   // --prom-dir: node_exporter textfile directory; "" = none
  std::string job_id;     // SLURM_JOB_ID as main read it (the Prometheus labels); "" = none
  PeerOptions peer;       // buddy replication (server_peer.cc)
};

class ReplicaStore;
class PeerServer;
class Replicator;
class PeerFetcher;
struct FetchResult;

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  // Creates the socket directory and socket, takes the node lock, removes stale slots,
  // finishes interrupted commits (CheckpointStore::Recover). Errors are start-up failures.
  Status Start();
  // Serves until `stop_fd` becomes readable (the signal pipe); then drains the persist queue.
  Status Serve(int stop_fd);

 private:
  // kRetained: persisted, and kept as the rank's newest in-memory snapshot so that a
  // trainer restarted on this node can restore from memory (RESTORE). A retained slot is
  // handed out for the next snapshot when no slot is free (retention never costs the
  // trainer a wait).
  // kFetching: being filled from a peer's replica (FETCH_PEER), then kRetained.
  enum class SlotState { kFree, kHeld, kPersisting, kRetained, kFetching };
  struct Slot {
    // Shared with a replication or fetch in flight, which keeps the mapping alive.
    std::shared_ptr<ShmSegment> seg;
    // Set (and dropped) when the slot is handed out again: a replication reading it stops.
    std::shared_ptr<std::atomic<bool>> reused;
    // Set by the replication thread while it sends this slot's snapshot: ACQUIRE hands out
    // another retained slot first, so that a slow (or capped) send can finish.
    std::shared_ptr<std::atomic<bool>> sending;
    SlotState state = SlotState::kFree;
    int64_t step = -1;
    ckpt::proto::Submit submit;  // descriptor of what the slot holds (persisting/retained)
    uint64_t digest = 0;         // memory tier (submit.memory_only): proto::SnapshotDigest
  };
  struct RankSlots {
    std::vector<Slot> slots;
    int conn = -1;  // fd of the connection that owns this rank, -1 when none
    int64_t last_step = -1;
    // Of the snapshots submitted since the current trainer connected (reset at HELLO).
    int64_t last_persisted_step = -1;
    int64_t last_failed_step = -1;
  };
  struct Conn {
    uid_t uid = 0;
    pid_t pid = 0;
    int rank = -1;  // after HELLO
    std::string in;
    bool waiting_acquire = false;
    // FETCH_PEER in flight (0: none); answered once, by DrainPeerResults or ExpireFetches.
    uint64_t fetch_id = 0;
    int64_t fetch_step = 0;
    double fetch_deadline_s = 0;  // steady seconds; 0 = the client waits without bound
  };

  // Buddy replication (server_peer.cc). A failure to start it leaves it off (loudly).
  void StartPeers();
  Status TryStartPeers();
  void FindStartSince();
  void MaybePublishAddress();
  void StopPeers();
  bool StartFetch(int fd, Conn& c, const std::string& payload);
  void ExpireFetches();
  int NextDeadlineMs(int cap_ms) const;
  void OfferReplica(const PersistResult& r, Slot& slot);
  void DrainPeerResults();
  nlohmann::json ReplicationJson() const;
  std::vector<PromSample> PeerPromSamples() const;
  static void MarkReused(Slot& slot);

  void Accept();
  // false: the peer must be disconnected (reason logged).
  bool OnReadable(int fd);
  bool Handle(int fd, Conn& c, ckpt::proto::MsgType type, const std::string& payload);
  // One handler per request type; false: the connection was closed.
  bool OnHello(int fd, Conn& c, const std::string& payload);
  bool OnSubmit(int fd, Conn& c, const std::string& payload);
  bool OnRestore(int fd, Conn& c, const std::string& payload);
  bool Refuse(int fd, const Conn& c, const std::string& why);
  void Send(int fd, ckpt::proto::MsgType type, const std::string& payload);
  void Disconnect(int fd, const std::string& why);
  void ServeAcquires();
  void DrainResults();
  // A memory-tier snapshot was hashed: retained, offered to the buddy, counted.
  void OnMemorySnapshot(const PersistResult& r);
  // Per rank: the memory-tier snapshots held, with their digest and whether the buddy holds
  // them too (the restorable rule's two places; train/checkpoint/memory_tier.h).
  nlohmann::json MemorySnapshotsJson(int rank, const RankSlots& rs) const;
  std::string StatusJson();
  uint64_t SlotBytesInUse() const;
  // No trainer connected and no snapshot held or being written.
  bool Idle() const;
  // The .prom file (server_metrics.cc): rewritten at most once a second, or now with `force`.
  Status OpenPromFile();
  void MaybeWritePromFile(bool force);

  ServerOptions options_;
  ckpt::CheckpointStore store_;
  std::unique_ptr<Persister> persister_;
  int listen_fd_ = -1;
  int lock_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::string socket_path_;
  std::map<int, Conn> conns_;
  std::map<int, RankSlots> ranks_;
  int world_ = 0;

  std::mutex results_mu_;
  std::vector<PersistResult> results_;  // guarded by results_mu_

  // Statistics (loop thread only).
  int64_t last_persisted_step_ = -1;
  int64_t last_failed_step_ = -1;
  int64_t last_committed_step_ = -1;
  uint64_t saves_ = 0, commits_ = 0, failures_ = 0;
  uint64_t memory_snapshots_ = 0;  // memory tier: hashed and retained, never written
  uint64_t raw_bytes_ = 0, stored_bytes_ = 0;
  double persist_s_ = 0;
  std::string last_error_;
  double start_unix_ = 0;
  std::unique_ptr<PromTextfile> prom_;
  double prom_written_unix_ = 0;
  std::string prom_error_;  // the last write error logged

  std::unique_ptr<ReplicaStore> replicas_;
  std::unique_ptr<PeerServer> peer_server_;
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<PeerFetcher> fetcher_;
  std::string peer_addr_file_;
  std::string replication_error_;  // why replication is off ("" = on, or not asked for)
  std::string start_id_;           // peer::StartIdOf
  int64_t since_ = -1;             // no replica of this step or older exists in this start
  bool address_published_ = false;
  int address_attempts_ = 0;
  double address_retry_at_ = 0;  // steady seconds
  uint64_t next_fetch_id_ = 1;
  std::vector<FetchResult> fetch_results_;                         // guarded by results_mu_
  uint64_t fetches_ = 0, fetch_failures_ = 0, fetched_bytes_ = 0;  // loop thread only
};

}  // namespace ftrain::ckptd
