// The hang guard's progress records (train/hang_watch.h): RUN/progress/node-<N>.json
// (RunLayout::node_progress), the progress of a node's ranks, rewritten by one rank of the node
// every few seconds and read by every node's judge; and its entry, one rank's progress, which is
// also the node-local file each rank shares with its node (train/hang_local.h). The one
// definition of both: the structs, the writer and the reader. Live state, never synced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::records {

// One rank's progress.
struct RankProgress {
  int rank = -1;
  int node = 0;
  std::string host;
  std::string generation;  // the start it belongs to (a file of an earlier start is ignored)
  int64_t step = 0;        // the optimizer step it is in (1-based, as metrics.jsonl's "step")
  std::string phase;       // train::HangPhaseName
  uint64_t launched = 0;   // collectives it has launched, on every group, since its start
  double stuck_s = 0;      // how long (step, phase, launched) had not changed at the write, on
                           // the rank's own monotonic clock (a duration, comparable anywhere)
  double threshold_s = 0;  // its hang threshold in that phase
  double time = 0;         // unix time of the write: for people only, never compared
  int64_t pid = 0;
  double mono = 0;  // the writer's CLOCK_MONOTONIC seconds: compared on its own host only
};
// A JSON object with sorted keys, every field, "mono" only when > 0.
std::string ProgressJson(const RankProgress& p);
// False for text that is not a whole record (a torn or foreign file). "pid" and "mono" may be
// absent (0); every other field must be there with its type.
bool ParseProgress(const std::string& text, RankProgress* out);

// RUN/progress/node-<N>.json.
struct NodeProgress {
  int node = 0;
  std::string host;
  std::string generation;
  double time = 0;  // unix time of the write: for people only
  std::vector<RankProgress> ranks;
};
// {"generation","host","node","ranks":[ProgressJson...],"time"} (sorted keys).
std::string NodeProgressJson(const NodeProgress& n);
// False for text that is not a whole node record, or holds a rank entry that is not one.
bool ParseNodeProgress(const std::string& text, NodeProgress* out);

// Writes `text` to `path` through a temporary (path.tmp.<pid>, no link followed) and a rename,
// so that a reader never sees a torn file. Not synced: progress is live state; a crash makes
// it moot. The error names the operation and the path.
Status WriteReplace(const std::string& path, const std::string& text);
// The node file at `path` (WriteReplace of NodeProgressJson).
Status WriteNodeProgress(const std::string& path, const NodeProgress& n);
// False when `path` is missing, unreadable or not a whole node record (no verdict from it).
bool ReadNodeProgress(const std::string& path, NodeProgress* out, Env* env);

}  // namespace ftrain::records
