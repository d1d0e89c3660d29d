// The hang guard's decisions as pure functions of what the ranks published: the threshold a
// rank gets in a phase, and, from every rank's progress file, which rank the others wait for.
// No clock, no files, no threads here (train/hang_watch.h reads the files and acts), so that
// tests drive every case in milliseconds. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftrain::train {

// Where a rank's main thread is (it says so through atomics; train/hang_watch.h).
enum class HangPhase { kStart, kCompute, kOptimizer, kBoundary, kEval, kCheckpoint, kDone };
const char* HangPhaseName(HangPhase p);  // "start", "compute", ...
// Phases whose length the step time does not predict (start-up, the first step, evaluation,
// a checkpoint): they get the start-up allowance, dist.timeout_s.
bool IsLongPhase(HangPhase p);

// One rank's RUN/progress/rank-<R>.json.
struct RankProgress {
  int rank = -1;
  int node = 0;
  std::string host;
  std::string generation;  // the start it belongs to (a file of an earlier start is ignored)
  int64_t step = 0;        // the optimizer step it is in (1-based, as metrics.jsonl's "step")
  std::string phase;       // HangPhaseName
  uint64_t launched = 0;   // collectives it has launched, on every group, since its start
  double stuck_s = 0;      // how long (step, phase, launched) had not changed at `time`
  double threshold_s = 0;  // its hang threshold in that phase
  double time = 0;         // unix time of the write
  int64_t pid = 0;
};
std::string ProgressJson(const RankProgress& p);
// False for text that is not a whole record (a torn or foreign file).
bool ParseProgress(const std::string& text, RankProgress* out);

struct HangSettings {
  double timeout_s = 0;    // guard.hang_timeout_s (0: automatic)
  double floor_s = 60;     // guard.hang_floor_s
  double startup_s = 600;  // dist.timeout_s: the first step of a start, long phases
};
// The threshold for a rank in `phase` whose recent step times (the first step of this start
// left out) are `recent_step_s`: the start-up allowance in a long phase or with no step
// measured yet, else hang_timeout_s when set, else max(floor, kHangStepFactor x median).
double HangThreshold(const HangSettings& s, const std::vector<double>& recent_step_s,
                     HangPhase phase);

struct HangVerdict {
  std::vector<RankProgress> hung;  // the ranks the others wait for (stuck_s: as of `now`)
  bool me_hung = false;            // the judging rank is one of them
  int recorder = -1;               // the lowest rank that is not hung: it writes the record
};
// Judged by rank `me` from `all` (this start's files, one per rank) at unix time `now`. The
// ranks that launched the fewest collectives are not in the collective the others wait in;
// they are hung when each has been stuck at least its own threshold (the time since its file
// was written counts: a rank whose watchdog froze with it is still named). No verdict while a
// rank has no file, or when every rank launched as many (all inside one collective: a network
// fault, left to the collective timeout).
HangVerdict JudgeHang(const std::vector<RankProgress>& all, int world_size, int me, double now);

// "rank 3 (node 1, host h1) hung in compute of step 7 for 12.3 s"
std::string DescribeHung(const RankProgress& p);

}  // namespace ftrain::train
