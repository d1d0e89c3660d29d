// RUN/quarantine.jsonl (RunLayout::quarantine()): the hosts that must not train this run again,
// one line each, appended by the trainer's replica check (train/sdc_check.h: cause "sdc") and by
// the job controller (orch/job_runner_records.cc: "hang", "node_fault"). The one definition of
// the line: its struct, its writer, the strict reader `ftrain report` uses and the lenient one
// the controller uses. Which hosts a set of lines keeps out is orch/quarantine.h's business.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "records/restarts.h"

namespace ftrain::records {

// One line. The first six members keep their order (callers aggregate-initialise them).
struct QuarantineRecord {
  std::string host, cause;  // cause: "sdc", "hang", "node_fault", ...
  int64_t step = -1;        // -1: the line has none (as below)
  int rank = -1;
  bool by_majority = false;  // sdc: outvoted by its replicas
  double time = -1;          // unix seconds of the writer's wall clock
  int node = -1;
  int shard = -1;
  std::string job = {};            // SLURM_JOB_ID of the writer ("": none)
  std::vector<Field> fields = {};  // the writer's other fields (reason, exit, hangs, ...)
};

// The cause of an operator's line (`ftrain quarantine clear`, src/cli/cmd_quarantine.cc): the
// host's earlier lines no longer keep it out, and its earlier hang records no longer count
// towards a repeat. History is appended to, never edited.
inline constexpr const char* kClearedCause = "cleared";

// The line (no newline): a JSON object with sorted keys; node, rank, shard and step only when
// set (>= 0), job only when not empty, `fields` as given.
std::string EncodeQuarantine(const QuarantineRecord& q);
// Appends the line to `path` (AppendJsonLine: one O_APPEND write, fsynced, no link followed).
Status AppendQuarantine(const std::string& path, const QuarantineRecord& q);

// Strict: every line of `path` (a missing file: none). A line that is not a JSON object, lacks
// "time" or "host", or holds a field of the wrong type is Corruption naming path:line; a torn
// last line is skipped with a warning (ReadJsonLines).
StatusOr<std::vector<QuarantineRecord>> ReadQuarantineFile(const std::string& path,
                                                           std::vector<std::string>* warnings,
                                                           Env* env);
// Lenient: every line of `text` that is a JSON object with a non-empty "host"; a field of the
// wrong type is left at its default. Lines skipped (torn, not JSON, no host) are counted in
// `*skipped` when given.
std::vector<QuarantineRecord> ParseQuarantineText(const std::string& text, int* skipped = nullptr);

}  // namespace ftrain::records
