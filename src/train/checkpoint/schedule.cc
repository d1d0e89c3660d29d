// The trainer's checkpoint due rules (schedule.h).
#include "train/checkpoint/schedule.h"

namespace ftrain::train {

CheckpointSchedule::CheckpointSchedule(const CkptSection& ckpt, int64_t final_step, Env* env)
    : ckpt_(ckpt),
      final_step_(final_step),
      env_(env),
      last_micros_(env->NowMicros()),
      last_memory_micros_(last_micros_) {}

bool CheckpointSchedule::TimeDue() const {
  return ckpt_.every_minutes > 0 &&
         static_cast<double>(env_->NowMicros() - last_micros_) / 1e6 >= ckpt_.every_minutes * 60;
}

bool CheckpointSchedule::Due(int64_t step, bool time_due, bool stop) const {
  const bool step_due = ckpt_.every_steps > 0 && step % ckpt_.every_steps == 0;
  return time_due || step_due || stop || (step == final_step_ && ckpt_.save_final);
}

bool CheckpointSchedule::MustBeDurable(int64_t step, bool stop) const {
  return stop || step == final_step_;
}

bool CheckpointSchedule::MemoryTimeDue() const {
  return ckpt_.memory_every_seconds > 0 &&
         static_cast<double>(env_->NowMicros() - last_memory_micros_) / 1e6 >=
             ckpt_.memory_every_seconds;
}

bool CheckpointSchedule::MemoryDue(int64_t step, bool memory_time_due) const {
  if (!memory_tier() || step <= 0) return false;
  if (memory_time_due && ckpt_.memory_every_seconds > 0) return true;
  return ckpt_.memory_every_steps > 0 && step % ckpt_.memory_every_steps == 0;
}

void CheckpointSchedule::Saved() { last_micros_ = last_memory_micros_ = env_->NowMicros(); }

void CheckpointSchedule::MemoryTaken() { last_memory_micros_ = env_->NowMicros(); }

}  // namespace ftrain::train
