// guard.policy = rollback: a step whose gradient is non-finite or spikes is not applied, and
// the run goes back. Rank 0 appends the step to RUN/rollbacks.jsonl and every rank exits with
// kExitRollback (the job restarts in its allocation like after a failed rank; under `ftrain
// launch`, run it again). The start that follows resumes, as any start does, from the newest
// restorable snapshot (the daemons' memory where it is there, else the disk) and skips every
// step after the one it resumed up to the bad one: their batches are read, not trained on,
// and recorded as skipped ("rollback") in metrics.jsonl and in every later checkpoint. That
// start records the exact range it skipped (an "applied" line), and every later start skips
// exactly the recorded ranges after its own resume step, whatever checkpoint it resumes (an
// older one included), clipped at train.steps. So a run restarted from any checkpoint, or a
// fresh run given those steps as data.skip, produces the same bits. The decision needs no exchange:
// every rank holds the same all-reduced norm. No checkpoint is written after the bad step before
// the restart, so rotation cannot remove the snapshot the rollback returns to. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "records/exit_codes.h"
#include "records/rollbacks.h"
#include "train/verdicts/guard.h"

namespace ftrain::train {

using ftrain::kExitRollback;  // records/exit_codes.h

// The record and its reader/writer live in records/rollbacks.h (the file's one owner).
using records::AppendAppliedRollback;
using records::AppendRollback;
using records::ReadRollbacks;
using records::RollbackRecord;

// Pure. FailedPrecondition when rolling back at `step` would be more than g.max_rollbacks
// rollbacks within the last g.max_skips_window steps (`past`: the records before this one).
Status CheckRollbackBudget(const std::vector<RollbackRecord>& past, int64_t step,
                           const GuardSection& g);
// What a start skips for the rollbacks (PlanRollbackSkips).
struct RollbackSkips {
  // The step ranges [first, last] it reads and does not train on: merged, in order, all in
  // (resumed_step, train_steps].
  std::vector<std::pair<int64_t, int64_t>> ranges;
  // When rollback lines no start has applied yet are there: the applied line this start
  // appends (rank 0) before it trains, naming the range it adds. Otherwise kind = kRollback
  // and nothing is appended.
  RollbackRecord to_record;
  bool must_record() const { return to_record.kind == records::RollbackKind::kApplied; }
};
// Pure. The steps a start that resumed `resumed_step` skips for `records` (file order), so
// that every start skips what the run that was recorded skipped:
//  - an applied line's range [first, last], the part after resumed_step: exactly the steps the
//    start that applied it skipped, whatever this start resumed (older or newer);
//  - rollback lines after the last applied line (pending: their 79 ended the start before
//    this one, or a start that died before it trained; a version 1 file has no applied line):
//    resumed_step + 1 to the newest of them, as the trainer did before applied lines existed.
//    This start records that range (to_record), and later starts replay it.
// Every range is clipped at train_steps (the run ends there; nothing after it is skipped).
RollbackSkips PlanRollbackSkips(const std::vector<RollbackRecord>& records, int64_t resumed_step,
                                int64_t train_steps);
// Pure. The norms of the spike steps rolled back over that a start which resumed
// `resumed_step` counts as suspects for the guard's re-admission of a new level
// (StepGuard::AddSuspects), keyed by the step after which the guard takes them, in step order:
// the step the start that applied them had resumed (an applied line's resumed_from), so that a
// start from an older checkpoint adds them where the recorded run did; `resumed_step` for the
// rollbacks this start applies itself. Rollbacks applied by a start that resumed before
// `resumed_step` are in the resumed checkpoint's guard state already. Without suspects a level
// shift would roll back until the budget ends the run.
std::map<int64_t, std::vector<double>> RolledBackSuspects(
    const std::vector<RollbackRecord>& records, int64_t resumed_step);

}  // namespace ftrain::train
