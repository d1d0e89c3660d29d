// RUN/rollbacks.jsonl (RunLayout::rollbacks()): what guard.policy = rollback did, one JSON
// line per event, appended by rank 0. A "rollback" line names a step that was not applied
// (written before every rank exits 79); an "applied" line names the exact steps the next start
// skipped for it (written by that start before it trains), so that every later start skips
// the same steps whatever it resumes. train/verdicts/rollback.h holds the rules; the job
// controller counts the rollback lines. The record, its writer and its strict reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::records {

// The line format written now. Version 1 (no "v" field, ftrain before the "applied" lines):
// every line is a rollback; the reader still takes it (train/verdicts/rollback.h applies it as
// the old trainer did).
inline constexpr int kRollbacksVersion = 2;

enum class RollbackKind { kRollback, kApplied };

// One line of RUN/rollbacks.jsonl. The fields after grad_norm are the version 2 additions
// (listed last so that {step, reason, resumed_from} initialises a rollback).
struct RollbackRecord {
  int64_t step = 0;          // the step that was not applied (1-based, as metrics.jsonl's);
                             // applied: the newest rollback step the range answers
  std::string reason;        // "nonfinite" or "spike" (applied: empty)
  int64_t resumed_from = 0;  // the step the start that wrote the line had resumed from (0: fresh)
  double grad_norm = -1;     // the step's norm when it was finite (-1: not recorded)
  RollbackKind kind = RollbackKind::kRollback;
  int64_t first = 0, last = 0;  // applied: the steps [first, last] that start skipped
  int version = kRollbacksVersion;
};

// The lines of `run_dir`, in file order (no file: none). A bad line, an unknown kind or a
// version newer than kRollbacksVersion is Corruption naming file:line and the field.
StatusOr<std::vector<RollbackRecord>> ReadRollbacks(const std::string& run_dir, Env* env);
// Appends a rollback line: {"v":2,"time","kind":"rollback","step","reason","resumed_from",
// "grad_norm" (when finite)}. Durable when it returns (records::AppendJsonLine).
Status AppendRollback(const std::string& run_dir, const RollbackRecord& r, double grad_norm);
// Appends an applied line: {"v":2,"time","kind":"applied","step","first","last","resumed_from"}.
Status AppendAppliedRollback(const std::string& run_dir, const RollbackRecord& applied);
// The rollback lines alone (what the controller counts: a 79 adds one).
int CountRollbacks(const std::vector<RollbackRecord>& records);

}  // namespace ftrain::records
