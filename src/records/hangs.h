// RUN/hangs.jsonl (RunLayout::hangs()): one line per rank the hang guard named (a rank the
// others waited for in a collective beyond its threshold), appended by the lowest rank that
// was not hung (train/hang_watch.h) before every rank exits 78. The one definition of the line:
// its struct, its writer, the strict reader `ftrain report` uses and the lenient one the job
// controller uses to count repeated hangs (orch/quarantine.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::records {

// One line. The first five members keep their order (callers aggregate-initialise them).
struct HangRecord {
  std::string host;
  int64_t step = -1;  // -1: the line has none (as below)
  int rank = -1, node = -1;
  double time = -1;  // unix seconds of the recorder's wall clock
  std::string phase = {};
  double stuck_s = 0, threshold_s = 0;
  int detected_by = -1;         // the rank that recorded it
  std::string generation = {};  // the start it happened in
  uint64_t launched = 0;        // collectives the hung rank had launched
  std::string job = {};         // SLURM_JOB_ID of the recorder ("": none)
};

// The line (no newline): a JSON object with sorted keys, every field, job only when set.
std::string EncodeHang(const HangRecord& h);
// Appends the line to `path` (AppendJsonLine: one O_APPEND write, fsynced, no link followed).
Status AppendHang(const std::string& path, const HangRecord& h);

// Strict: every line of `path` (a missing file: none). A line that is not a JSON object, lacks
// "time" or "rank", or holds a field of the wrong type is Corruption naming path:line; a torn
// last line is skipped with a warning (ReadJsonLines).
StatusOr<std::vector<HangRecord>> ReadHangsFile(const std::string& path,
                                                std::vector<std::string>* warnings, Env* env);
// Lenient: every line of `text` that is a JSON object with a non-empty "host"; a field of the
// wrong type keeps its default; skipped lines are counted in `*skipped` when given.
std::vector<HangRecord> ParseHangsText(const std::string& text, int* skipped = nullptr);

}  // namespace ftrain::records
