// The checkpoint coordinator (coordinator.h): the due rule, and the three calls of the loop.
#include "train/checkpoint/coordinator.h"

#include <iomanip>
#include <utility>

#include "core/log.h"
#include "data/read/reader.h"
#include "fsdp/engine.h"
#include "records/metrics_record.h"
#include "trace/trace_range.h"
#include "train/checkpoint/memory_tier.h"
#include "train/checkpoint/sink.h"
#include "train/checkpoint/train_state.h"

namespace ftrain::train {

CheckpointCoordinator::CheckpointCoordinator(CheckpointSchedule schedule, Parts parts)
    : schedule_(std::move(schedule)), parts_(std::move(parts)), last_saved_(parts_.resumed_step) {
  const CkptSection& c = schedule_.ckpt();
  if (schedule_.memory_tier()) {
    MemoryTierOptions o;
    o.root = c.root;
    o.rank = parts_.rank;
    o.world = parts_.identity.meta.world_size;
    o.leader = parts_.leader;
    memory_ = std::make_unique<MemoryTier>(o, parts_.sink);
  }
}

CheckpointCoordinator::~CheckpointCoordinator() = default;

int64_t CheckpointCoordinator::memory_restorable() const {
  return memory_ ? memory_->restorable_step() : -1;
}

ckpt::CheckpointMeta CheckpointCoordinator::MetaNow(const records::StepMetrics& m) {
  RunState& state = *parts_.state;
  state.metrics_line = parts_.leader ? records::FormatMetricsLine(m) : "";
  state.data_cursor = parts_.reader->SaveCursor();
  ckpt::CheckpointMeta meta = parts_.identity.meta;
  meta.step = state.step;
  return meta;
}

BoundarySave CheckpointCoordinator::TakeMemory(int64_t step, const records::StepMetrics& m) {
  BoundarySave out;
  TraceRange range("ftrain/checkpoint memory snapshot");
  const ckpt::CheckpointMeta meta = MetaNow(m);
  out.stall_s = memory_->Take(
      meta, BuildShardContents(*parts_.engine, *parts_.state, parts_.identity.schedule_json));
  out.memory = true;
  if (parts_.on_stall) parts_.on_stall(out.stall_s);
  schedule_.MemoryTaken();
  (void)step;
  return out;
}

void CheckpointCoordinator::BeforeOptimizerStep() {
  const double t0 = NowSeconds(schedule_.env());
  parts_.sink->BeforeStateChanges();
  if (parts_.on_stall) parts_.on_stall(NowSeconds(schedule_.env()) - t0);
}

TimeVotes CheckpointCoordinator::AfterOptimizerStep() {
  parts_.sink->FinishPending();
  TimeVotes v;
  if (!parts_.leader) return v;
  v.disk = schedule_.TimeDue();
  v.memory = memory_ != nullptr && schedule_.MemoryTimeDue();
  return v;
}

StatusOr<BoundarySave> CheckpointCoordinator::AtBoundary(int64_t step, TimeVotes agreed, bool stop,
                                                         const records::StepMetrics& m) {
  BoundarySave out;
  const bool disk_due = schedule_.Due(step, agreed.disk, stop);
  const bool memory_due = !disk_due && MemoryDue(step, agreed.memory);
  if (memory_) {
    // Snapshots of earlier steps that their buddies now hold become restorable (collective
    // while any await it; the same on every rank), always before a snapshot takes a daemon
    // slot. A failure only delays the record.
    Status c = memory_->Confirm(parts_.identity.meta, step, disk_due || memory_due);
    if (!c.ok()) FT_LOG(Error) << "memory tier: confirming snapshots: " << c.message();
  }
  if (!disk_due) {
    if (!memory_due) return out;
    if (memory_->PassForPending(step)) {
      schedule_.MemoryTaken();  // this occasion passes; the next comes an interval later
      return out;
    }
    return TakeMemory(step, m);
  }
  const bool durable = schedule_.MustBeDurable(step, stop);
  RunState& state = *parts_.state;
  StatusOr<SaveOutcome> saved = [&]() -> StatusOr<SaveOutcome> {
    TraceRange range("ftrain/checkpoint save");
    const ckpt::CheckpointMeta meta = MetaNow(m);
    return parts_.sink->Save(
        meta, BuildShardContents(*parts_.engine, state, parts_.identity.schedule_json), durable);
  }();
  if (!saved.ok()) {
    // Never silently skip: log loudly; the next interval tries again.
    FT_LOG(Error) << "CHECKPOINT FAILED at step " << step << ": " << saved.status().message()
                  << " (training continues; will retry)";
    if (durable) return saved.status();
    return out;
  }
  if (parts_.leader) {
    FT_LOG(Info) << "checkpoint step " << step << ": "
                 << (saved->via_daemon ? (saved->deferred ? "copying to ckptd" : "handed to ckptd")
                                       : "written synchronously")
                 << (saved->durable ? ", committed" : ", persisting in the background")
                 << ", stall " << std::setprecision(3) << saved->stall_s << " s";
  }
  out.saved = true;
  out.durable = saved->durable;
  out.stall_s = saved->stall_s;
  if (parts_.on_stall) parts_.on_stall(out.stall_s);
  last_saved_ = step;
  schedule_.Saved();
  return out;
}

}  // namespace ftrain::train
