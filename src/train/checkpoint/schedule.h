// When the trainer checkpoints, disk and memory: the one owner of every interval in the ckpt
// section (ckpt.every_minutes/every_steps for the disk, ckpt.memory_every_steps/_seconds for
// the memory tier), a stop and the final step. The coordinator (coordinator.h) asks it at every
// boundary; the memory tier (memory_tier.h) only takes what it is handed. Time comes from `env`
// (Env::NowMicros), so tests drive the rule with a fake clock. Pure but for that clock; no
// LibTorch, so its test is in the torch-free unit tier.
#pragma once

#include <cstdint>

#include "core/env.h"
#include "train/config/train_config.h"

namespace ftrain::train {

class CheckpointSchedule {
 public:
  // The wall-clock intervals start now.
  CheckpointSchedule(const CkptSection& ckpt, int64_t final_step, Env* env);

  // ckpt.every_minutes have passed since the start or the last saved checkpoint.
  bool TimeDue() const;
  // Whether the boundary after optimizer step `step` checkpoints to disk, given the agreed
  // flags (`time_due`: rank 0's TimeDue; `stop`: a stop signal on any rank).
  bool Due(int64_t step, bool time_due, bool stop) const;
  // A stop and the final step must be committed before the run goes on (or ends).
  bool MustBeDurable(int64_t step, bool stop) const;

  // The memory tier is on: ckpt.memory_every_steps or ckpt.memory_every_seconds > 0.
  bool memory_tier() const { return ckpt_.MemoryTierOn(); }
  // ckpt.memory_every_seconds have passed since the start, the last memory snapshot or the
  // last saved checkpoint (rank 0's vote, agreed at the boundary like TimeDue).
  bool MemoryTimeDue() const;
  // Whether a memory snapshot is due after optimizer step `step`: the step interval, or
  // `memory_time_due`, the agreed vote of ckpt.memory_every_seconds (the same on every rank, so
  // every rank takes it at the same step). Never before the first step; the caller asks only
  // where no disk checkpoint is due (a saved checkpoint is in the daemons' memory too).
  bool MemoryDue(int64_t step, bool memory_time_due) const;

  // A checkpoint was saved: both wall-clock intervals start again.
  void Saved();
  // A memory snapshot was taken (or its occasion passed): the memory interval starts again.
  void MemoryTaken();

  const CkptSection& ckpt() const { return ckpt_; }
  Env* env() const { return env_; }

 private:
  CkptSection ckpt_;
  int64_t final_step_;
  Env* env_;
  uint64_t last_micros_;
  uint64_t last_memory_micros_;
};

}  // namespace ftrain::train
