// The trainer's side of ckptd (torch-free): connect to this node's daemon, copy a rank's
// snapshot (ckpt::ShardContents) into a free shared-memory slot and submit it. The trainer-
// visible stall is the wait for a free slot plus the copy plus one small message; the daemon
// does the compression, writes, fsyncs and the cross-node commit. Not thread-safe: one client
// per rank, used from the training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "core/status.h"

namespace ftrain::ckpt {

struct SubmitStats {
  double wait_s = 0;   // waiting for a free slot (backpressure)
  double copy_s = 0;   // copying the state into the slot
  double send_s = 0;   // SUBMIT round trip
  uint64_t bytes = 0;  // copied
  uint32_t slot = 0;
  double stall_s() const { return wait_s + copy_s + send_s; }
};

// Bytes a slot needs for `contents` (pieces 64-byte aligned).
uint64_t SlotBytesFor(const ShardContents& contents);

// One device -> host copy of `n` bytes.
struct DeviceCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t n = 0;
};

// Device memory as the checkpoint library sees it: it has no device code, so a GPU trainer
// hands it an implementation (train/device/device_memory.h). Host ranges it registers are where
// snapshots land (the daemon's slots), so the device can copy into them directly.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // `p` (`n` bytes) is a copy destination from now on: pin it for DMA where possible.
  virtual void RegisterHost(void* p, size_t n) = 0;
  // Before `p` is unmapped.
  virtual void UnregisterHost(void* p) = 0;
  // Starts every copy, after the work the device has queued so far (the step that made the
  // state), and returns once they are queued (the host does not wait for the bytes).
  virtual Status StartCopyToHost(const std::vector<DeviceCopy>& copies) = 0;
  // Returns once every started copy has landed on the host.
  virtual Status WaitForCopies() = 0;
  // Makes the device's next work (the optimizer step that changes the copied state) wait for
  // the started copies, without blocking the host.
  virtual Status OrderBeforeStateChanges() = 0;
  Status CopyToHost(const std::vector<DeviceCopy>& copies) {
    Status s = StartCopyToHost(copies);
    return s.ok() ? WaitForCopies() : s;
  }
};

// Whether any tensor of `contents` lies in device memory.
bool HasDeviceTensors(const ShardContents& contents);

class CkptdClient {
 public:
  // Connects to RUN/ckptd-<node>/sock and says HELLO; the daemon maps (or reuses) this
  // rank's slots of at least `slot_bytes`. Unavailable when no daemon answers.
  // With `device` (not owned; outlives the client) the slots are registered with it, and
  // device tensors are copied straight into a slot.
  static StatusOr<std::unique_ptr<CkptdClient>> Connect(const std::string& run_dir,
                                                        const std::string& node, int rank,
                                                        int world, uint64_t slot_bytes,
                                                        DeviceMemory* device = nullptr);
  ~CkptdClient();

  // Waits for a free slot (at most `timeout_s`), copies `contents` into it and submits step
  // meta.step. After OK the snapshot is the daemon's: the caller may change its state.
  StatusOr<SubmitStats> Submit(const CheckpointMeta& meta, const ShardContents& contents,
                               double timeout_s = 600);
  // Submit in two halves, so that a GPU rank's device -> host copy overlaps its next forward
  // and backward: Begin takes a slot, copies the host pieces and starts the device copies;
  // Finish waits for them and submits. Between the two the device state must not change
  // (DeviceMemory::OrderBeforeStateChanges); Finish must come before the next Begin.
  struct Pending {
    proto::Submit submit;
    SubmitStats stats;
  };
  StatusOr<Pending> BeginSubmit(const CheckpointMeta& meta, const ShardContents& contents,
                                double timeout_s = 600);
  StatusOr<SubmitStats> FinishSubmit(Pending pending);

  // This rank's snapshot of `step` that the daemon persisted and still holds in memory
  // (step -1: the newest it holds; nullopt if none). Ask for the step you resume from: ranks
  // that got further than a dead one hold a newer snapshot that was never committed.
  // `base` points into the slot mapping; valid until the next Submit.
  struct MemorySnapshot {
    proto::Submit submit;  // step, meta and one descriptor per piece
    const uint8_t* base = nullptr;
  };
  StatusOr<std::optional<MemorySnapshot>> Restore(int64_t step = -1);

  // Restore from a peer's memory (a replacement node): asks this node's daemon to pull this
  // rank's replica of `step` from the peers (`address` HOST:PORT, or "" = every daemon that
  // published RUN/ckptd-*/peer-addr) into one of this rank's slots. found: from now on
  // Restore() returns it exactly like a snapshot this rank wrote here (check it against the
  // committed manifest as usual). Not found is not an error (read from disk); an error is a
  // refusal (no free slot, replication not configured) or a lost daemon.
  struct PeerFetch {
    bool found = false;
    int64_t step = 0;
    std::string source;  // "peer HOST:PORT"
    uint64_t bytes = 0;
    double seconds = 0;
    std::string detail;  // not found: what each peer said
    double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
  };
  StatusOr<PeerFetch> FetchFromPeer(int64_t step, const std::string& address = "",
                                    double timeout_s = 600);

  // The daemon's status as JSON text.
  StatusOr<std::string> StatusJson();

  uint64_t slot_bytes() const { return slot_bytes_; }
  size_t slot_count() const { return maps_.size(); }  // this rank's slots in the daemon
  // Threads that copy a snapshot into the slot (default: the machine's cores, at most 4).
  void set_copy_threads(int n) { copy_threads_ = n < 1 ? 1 : n; }
  int fd() const { return fd_; }

  // Low-level (tests): send bytes as they are; receive one message.
  Status SendRaw(const std::string& bytes);
  StatusOr<std::pair<proto::MsgType, std::string>> Receive(double timeout_s);
  // Connects without HELLO (tests, status queries).
  static StatusOr<std::unique_ptr<CkptdClient>> ConnectRaw(const std::string& socket_path);

 private:
  CkptdClient() = default;
  StatusOr<std::string> Call(proto::MsgType type, const std::string& payload, proto::MsgType want,
                             double timeout_s);

  int fd_ = -1;
  uint64_t slot_bytes_ = 0;
  int copy_threads_ = DefaultCopyThreads();
  static int DefaultCopyThreads();
  std::vector<std::pair<void*, size_t>> maps_;  // one mapping per slot
  DeviceMemory* device_ = nullptr;              // not owned
};

// STATUS of the daemon behind `socket_path`, without HELLO (ckptctl status).
StatusOr<std::string> QueryCkptdStatus(const std::string& socket_path, double timeout_s = 5);

}  // namespace ftrain::ckpt
