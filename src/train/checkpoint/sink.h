// Where a rank's checkpoint goes: to this node's ckptd (asynchronous: the trainer only copies
// its state into a shared-memory slot) or, when there is no daemon or it failed, through the
// checkpoint library on the training thread (synchronous). Both paths meet in the store's
// cross-node commit: whoever writes the last shard of a step (a daemon or a trainer rank)
// commits it, exactly once. Every method is collective over the world communicator, so all
// ranks learn the same outcome; a rank whose daemon is gone saves synchronously and says so
// loudly: a checkpoint is never skipped silently. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/ckptd_client.h"
#include "ckpt/shard_file.h"
#include "ckpt/store.h"
#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::comm {
class Comm;
}

namespace ftrain::train {

struct CheckpointSinkOptions {
  DaemonMode daemon = DaemonMode::kAuto;
  std::string run_dir;  // the daemon's socket is RUN/ckptd-<node>/sock
  std::string node;     // ckpt::proto::DefaultNodeId() unless a test says otherwise
  std::string root;
  Env* env = nullptr;  // the files and the clock (the main's Env); required
  int rank = 0;
  int world = 1;
  ckpt::WriteOptions write;  // synchronous path
  int keep = 3;
  int keep_every = 0;
  double flush_timeout_s = 600;  // waiting for the daemons to commit a step that must be durable
  // GPU ranks: copies device tensors into the daemon's slots (or a host buffer for the
  // synchronous path). Not owned; outlives the CheckpointSink. Null on CPU.
  ckpt::DeviceMemory* device = nullptr;
  // The health of every communicator this rank computes with (comm::DistContext::Health):
  // a failed one (an aborted NCCL collective) may have left partially reduced state behind,
  // so no snapshot begins, none that is pending is finished, and the save vote fails on
  // every rank. Unset: always healthy.
  std::function<Status()> comm_health;
  // Checked like comm_health before every save, and refused the same way on every rank
  // (state that must not be committed, e.g. a non-finite value: [guard]). Unset: none.
  std::function<Status()> state_check;
};

struct SaveOutcome {
  double stall_s = 0;       // what the training thread spent (max over ranks)
  bool via_daemon = false;  // at least one rank handed its shard to a daemon
  bool durable = false;     // the step is committed on disk
  bool deferred = false;    // this rank's device -> host copy is still running (GPU): call
                            // BeforeStateChanges before the next optimizer step and
                            // FinishPending after it
};

class CheckpointSink {
 public:
  CheckpointSink(CheckpointSinkOptions options, comm::Comm* world);
  ~CheckpointSink();

  // Connects to this node's daemon (ckpt.daemon = auto | require) with slots of `slot_bytes`,
  // then waits until it has persisted whatever an earlier trainer of this job handed over, so
  // that the start-up recovery sees no live writer. Collective.
  Status Start(uint64_t slot_bytes);

  // Saves `contents` as this rank's shard of meta.step. With `durable` (stop signal, final
  // step) it returns only when the step is committed, rewriting synchronously what a daemon
  // failed to persist. Collective: every rank gets the same status.
  StatusOr<SaveOutcome> Save(const ckpt::CheckpointMeta& meta, const ckpt::ShardContents& contents,
                             bool durable);

  // A deferred snapshot (SaveOutcome::deferred): the optimizer step that is about to change
  // the state waits for the copy on the device (call right before it); after that step the
  // snapshot is submitted to the daemon (a failure is logged loudly; training continues).
  void BeforeStateChanges();
  void FinishPending();

  // Asks this node's daemon to pull this rank's snapshot of `step` from a peer daemon's memory
  // (buddy replication; a replacement node after a node failure); afterwards MemorySnapshot()
  // returns it. Not connected: not found.
  StatusOr<ckpt::CkptdClient::PeerFetch> FetchFromPeer(int64_t step);
  // The daemon's in-memory snapshot of this rank at `step` (restore from memory), if connected
  // and held.
  StatusOr<std::optional<ckpt::CkptdClient::MemorySnapshot>> MemorySnapshot(int64_t step);

  bool connected() const { return client_ != nullptr; }
  const ckpt::WriteOptions& write_options() const { return options_.write; }
  Env* env() const { return options_.env; }  // the run's Env, for the resume beside the sink

  // Memory tier (memory_tier.h). Not collective: hands this rank's snapshot of meta.step to
  // the daemon as memory-only (kept in memory and replicated to the buddy, never persisted),
  // the same hand-over as Save's. Refuses (Unavailable, nothing waited for) when there is no
  // daemon, a communicator failed, or every slot of the rank is still being written: the
  // memory tier gets sparser, the training never waits and the disk tier loses nothing.
  StatusOr<SaveOutcome> SaveMemory(const ckpt::CheckpointMeta& meta,
                                   const ckpt::ShardContents& contents);
  // The memory-tier snapshots this node's daemon holds of this rank that its buddy holds too:
  // step -> digest (proto::SnapshotDigest). Empty without a daemon.
  std::map<int64_t, uint64_t> MemoryHeldTwice();
  // Sum-reduces `v` (size n) over the world (collective).
  Status ReduceSum(double* v, int n);

 private:
  Status CommHealth() const;
  // Drops the pending snapshot without handing it over (after a communicator failed).
  void DropPending(const Status& why);
  bool TryConnect(bool quiet);
  void DropDaemon(const std::string& why);
  // Drops the daemon if it writes to another checkpoint root than ckpt.root.
  void CheckDaemonRoot();
  // The daemon's status, or nullopt (and the daemon dropped) if it does not answer.
  struct DaemonState {
    int64_t in_flight = 0;             // this rank's snapshots queued or being written
    int64_t last_failed_step = -1;     // of this rank, since it connected
    int64_t last_persisted_step = -1;  // of this rank, since it connected
    int64_t last_committed_step = -1;
    std::string last_error;
  };
  std::optional<DaemonState> QueryDaemon();
  Status SaveSync(const ckpt::CheckpointMeta& meta, const ckpt::ShardContents& contents,
                  bool* committed);
  Status WaitUntilCommitted(const ckpt::CheckpointMeta& meta, const ckpt::ShardContents& contents,
                            bool via_daemon);
  // Max-reduces `v` (size n) over the world.
  Status ReduceMax(double* v, int n);
  // Whether a memory-tier snapshot may start without waiting for a slot ("" = yes).
  std::string MemorySlotProblem();

  CheckpointSinkOptions options_;
  comm::Comm* world_;
  ckpt::CheckpointStore store_;
  std::unique_ptr<ckpt::CkptdClient> client_;
  uint64_t slot_bytes_ = 0;
  bool had_daemon_ = false;
  int64_t reported_failed_step_ = -1;
  void WaitForDeviceCopies();
  std::optional<ckpt::CkptdClient::Pending> pending_;  // a begun, unsubmitted snapshot
  int64_t pending_step_ = -1;
  // Host copy of device tensors for SaveSync (mmap'd pages, registered with the device).
  void ReleaseSyncStaging();
  uint8_t* sync_staging_ = nullptr;
  uint64_t sync_staging_bytes_ = 0;
};

}  // namespace ftrain::train
