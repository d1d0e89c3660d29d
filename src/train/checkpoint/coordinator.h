// The one owner of the training loop's checkpoints: when one is due (schedule.h, the one owner
// of every interval, disk and memory), whether it must be durable,
// what goes in (train_state.h), where it goes (sink.h), the training time it stalls, and the
// GPU snapshot copy that must end before the next optimizer step changes the state. The loop
// calls it at three points of every step:
//   BeforeOptimizerStep()  a snapshot still copying off the GPU finishes first (a stall)
//   AfterOptimizerStep()   that snapshot goes to ckptd; returns this rank's votes for the
//                          boundary agreement (boundary_agreement.h): the intervals passed
//   AtBoundary()           once the ranks agreed: saves when due (collective); between disk
//                          checkpoints, the memory tier's snapshots (memory_tier.h)
// Which checkpoint a start resumes from is resume.h, before the loop. No LibTorch here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ckpt/manifest.h"
#include "core/env.h"
#include "core/status.h"
#include "records/metrics_record.h"
#include "train/checkpoint/schedule.h"
#include "train/config/train_config.h"

namespace ftrain::data {
class TokenReader;
}
namespace ftrain::fsdp {
class FsdpEngine;
}

namespace ftrain::train {

class CheckpointSink;
class MemoryTier;
struct RunState;

// This rank's wall-clock votes after an optimizer step (only rank 0's clock votes); the
// boundary agreement max-reduces them so that every rank acts at the same step.
struct TimeVotes {
  bool disk = false;    // ckpt.every_minutes passed
  bool memory = false;  // ckpt.memory_every_seconds passed
};

// What a checkpoint of this run carries besides the engine's shards and the run state.
struct CheckpointIdentity {
  ckpt::CheckpointMeta meta;  // all but the step, which each save sets
  std::string schedule_json;  // the LR schedule, for LoadCheckpoint's check
};

// The outcome of AtBoundary.
struct BoundarySave {
  bool saved = false;    // a checkpoint of this step was saved (committed or handed over)
  bool durable = false;  // ... and it is committed on disk
  double stall_s = 0;    // what the save cost the training thread (0 when none)
  bool memory = false;   // a memory-tier snapshot of this step was handed over instead
};

class CheckpointCoordinator {
 public:
  struct Parts {
    CheckpointSink* sink = nullptr;                // where (not owned)
    const fsdp::FsdpEngine* engine = nullptr;      // what: the shards (not owned)
    RunState* state = nullptr;                     // what: the run state (not owned)
    data::TokenReader* reader = nullptr;           // what: the data cursor (not owned)
    CheckpointIdentity identity;                   // what: the meta
    bool leader = false;                           // rank 0 logs and keeps the metrics line
    int rank = 0;                                  // for the memory tier
    int64_t resumed_step = -1;                     // the checkpoint this start resumed, or -1
    std::function<void(double seconds)> on_stall;  // the step's phase clock takes every stall
  };
  CheckpointCoordinator(CheckpointSchedule schedule, Parts parts);
  ~CheckpointCoordinator();

  void BeforeOptimizerStep();
  TimeVotes AfterOptimizerStep();
  // `agreed`: the votes as the boundary agreed them (the same on every rank). `m`: the step's
  // metrics record, carried in the checkpoint (rank 0) so that a crash between the commit and the
  // metrics append leaves no hole in metrics.jsonl. A failed save is logged loudly and retried at
  // the next interval; a failed durable one ends the run.
  StatusOr<BoundarySave> AtBoundary(int64_t step, TimeVotes agreed, bool stop,
                                    const records::StepMetrics& m);

  // Whether AtBoundary(step, time_due, stop) writes a disk checkpoint (the replica check runs
  // before every one, so that no checkpoint commits a corrupted shard: train/sdc_check.h).
  bool DiskDue(int64_t step, bool time_due, bool stop) const {
    return schedule_.Due(step, time_due, stop);
  }
  // Whether a memory-tier snapshot is due after `step` (`memory_time_due`: the agreed vote;
  // at a disk step the disk takes it instead). The replica check runs before every one too:
  // only checked steps become restorable from memory (issue 44, hole 7).
  bool MemoryDue(int64_t step, bool memory_time_due) const {
    return memory_ != nullptr && schedule_.MemoryDue(step, memory_time_due);
  }
  // The newest step this start saved (or resumed from); -1 when none.
  int64_t last_saved() const { return last_saved_; }
  // The newest step this start recorded as restorable from memory; -1 when none.
  int64_t memory_restorable() const;

 private:
  // The state's meta and contents at this boundary, as every save takes them.
  ckpt::CheckpointMeta MetaNow(const records::StepMetrics& m);
  BoundarySave TakeMemory(int64_t step, const records::StepMetrics& m);

  CheckpointSchedule schedule_;
  Parts parts_;
  int64_t last_saved_;
  std::unique_ptr<MemoryTier> memory_;  // null when both memory intervals are 0
};

}  // namespace ftrain::train
