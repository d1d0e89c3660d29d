// The memory tier: when the schedule says a snapshot is due (schedule.h: ckpt.memory_every_steps
// or ckpt.memory_every_seconds, rank 0's clock agreed at the step boundary) a snapshot goes to
// this node's ckptd and its buddy's memory, never to disk (the disk interval stays
// ckpt.every_minutes/every_steps). A step counts as restorable from memory only when every rank's
// snapshot of it is held in two places, its own daemon and that daemon's buddy; then rank 0 records
// it, with every rank's snapshot digest, in ROOT/MEMORY_TIER.json (ckpt/memory_manifest.h), which
// survives the node that died. Recovery (resume.h) takes the newest restorable step, memory or
// disk. Degrades, never stalls: a snapshot that would wait for a slot, or a daemon that is gone, is
// skipped with a warning. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "core/status.h"

namespace ftrain::train {

class CheckpointSink;

// Where and who; when is the schedule's (schedule.h), which the coordinator asks.
struct MemoryTierOptions {
  std::string root;  // ckpt.root: where MEMORY_TIER.json goes
  int rank = 0;
  int world = 1;
  bool leader = false;  // rank 0 writes the manifest and logs
};

class MemoryTier {
 public:
  MemoryTier(MemoryTierOptions options, CheckpointSink* sink);

  // Hands this rank's snapshot over (not collective); returns the training thread's stall.
  // A skipped snapshot is logged and leaves the step unrestorable from memory.
  double Take(const ckpt::CheckpointMeta& meta, const ckpt::ShardContents& contents);
  // Collective whenever snapshots await confirmation (the same on every rank): asks each
  // daemon which are held twice, agrees on the newest step held twice on every rank, and
  // rank 0 records it in the memory manifest. Asks 1, 2, 4, 8... steps after the newest
  // snapshot (a slow or missing buddy costs a few queries per interval, not one per step).
  // Errors: the collective failed.
  // `force`: ask now whatever the 1, 2, 4, 8... schedule says (a snapshot is due at this step:
  // a step that became restorable is recorded before the next snapshot takes a daemon slot).
  Status Confirm(const ckpt::CheckpointMeta& identity, int64_t step, bool force = false);
  // Whether the snapshot due now passes, to keep the recorded step held: every daemon slot a
  // new snapshot could take holds either the recorded step or one still awaiting its buddy, so
  // taking it would evict the only restorable step in memory. Passes at most
  // kMaxPassedForPending occasions in a row, then takes it anyway (a buddy that never confirms
  // must not stop the tier). The same on every rank (pending_ and the record are). Logged.
  bool PassForPending(int64_t step);
  // The newest step recorded as restorable from memory by this start (-1: none).
  int64_t restorable_step() const { return restorable_step_; }

  // Pending snapshots kept for confirmation: a daemon keeps a few per rank, the buddy two.
  static constexpr size_t kMaxPending = 3;
  static constexpr int kMaxPassedForPending = 3;
  // PassForPending's rule, pure: `pending` unconfirmed snapshots, `recorded` the newest step
  // recorded by this start (-1: none), `passed` occasions passed in a row.
  static bool ShouldPass(size_t pending, int64_t recorded, int passed) {
    return pending > 0 && recorded >= 0 && passed < kMaxPassedForPending;
  }

 private:
  void Forget(int64_t step, const std::string& why);

  MemoryTierOptions options_;
  CheckpointSink* sink_;
  std::vector<int64_t> pending_;  // taken, not yet confirmed; oldest first
  int64_t restorable_step_ = -1;
  int64_t skipped_ = 0;      // snapshots this rank could not hand over
  int64_t unconfirmed_ = 0;  // steps that never became restorable
  int passed_ = 0;           // due snapshots passed in a row by PassForPending
  int64_t passed_total_ = 0;
};

}  // namespace ftrain::train
