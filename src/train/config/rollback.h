// guard.policy = rollback: a step whose gradient is non-finite or spikes is not applied, and
// the run goes back. Rank 0 appends the step to RUN/rollbacks.jsonl and every rank exits with
// kExitRollback (the job restarts in its allocation like after a failed rank; under `ftrain
// launch`, run it again). The start that follows resumes, as any start does, from the newest
// restorable snapshot (the daemons' memory where it is there, else the disk) and skips every
// step after the one it resumed up to the bad one: their batches are read, not trained on,
// and recorded as skipped ("rollback") in metrics.jsonl and in every later checkpoint. So a
// run restarted from any later checkpoint, or a fresh run given those steps as data.skip,
// produces the same bits. The decision needs no exchange: every rank holds the same
// all-reduced norm. No checkpoint is written after the bad step before the restart, so
// rotation cannot remove the snapshot the rollback returns to. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "records/exit_codes.h"
#include "records/rollbacks.h"
#include "train/config/guard.h"

namespace ftrain::train {

using ftrain::kExitRollback;  // records/exit_codes.h

// The record and its reader/writer live in records/rollbacks.h (the file's one owner).
using records::AppendRollback;
using records::ReadRollbacks;
using records::RollbackRecord;

// Pure. FailedPrecondition when rolling back at `step` would be more than g.max_rollbacks
// rollbacks within the last g.max_skips_window steps (`past`: the records before this one).
Status CheckRollbackBudget(const std::vector<RollbackRecord>& past, int64_t step,
                           const GuardSection& g);
// Pure. The step ranges [first, last] a start that resumed after `resumed_step` skips: for
// each record later than it, from resumed_step + 1 to the record's step (merged, in order).
std::vector<std::pair<int64_t, int64_t>> RolledBackRanges(
    const std::vector<RollbackRecord>& records, int64_t resumed_step);
// Pure. The norms of the spike steps a start that resumed after `resumed_step` rolls back over,
// in step order: suspects for the guard's re-admission of a new level (StepGuard::AddSuspects).
// The snapshot it resumed predates them, so without these a level shift would roll back until
// the budget ends the run.
std::vector<double> RolledBackSuspects(const std::vector<RollbackRecord>& records,
                                       int64_t resumed_step);

}  // namespace ftrain::train
