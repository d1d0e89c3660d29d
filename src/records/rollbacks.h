// RUN/rollbacks.jsonl (RunLayout::rollbacks()): one line per step that guard.policy = rollback
// did not apply, appended by rank 0 before every rank exits 79. The trainer's next start skips
// by it (train/config/rollback.h holds the rules) and the job controller counts it (a 79 is a
// rollback only when its line is there). The record, its writer and its strict reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::records {

// One line of RUN/rollbacks.jsonl.
struct RollbackRecord {
  int64_t step = 0;          // the step that was not applied (1-based, as metrics.jsonl's)
  std::string reason;        // "nonfinite" or "spike"
  int64_t resumed_from = 0;  // the step the start that met it had resumed from (0: fresh)
  double grad_norm = -1;     // the step's norm when it was finite (-1: not recorded)
};

// The records of `run_dir` (no file: none). A bad line is Corruption naming file:line.
StatusOr<std::vector<RollbackRecord>> ReadRollbacks(const std::string& run_dir);
Status AppendRollback(const std::string& run_dir, const RollbackRecord& r, double grad_norm);

}  // namespace ftrain::records
