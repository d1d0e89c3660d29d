// The hang guard's decisions as pure functions of what the ranks published: the threshold a
// rank gets in a phase, the age of each rank's progress on the judge's own monotonic clock
// (ProgressAges: never another host's wall clock), and, from every node's progress file, which
// rank the others wait for. No clock, no files, no threads here (train/hang_watch.h reads the
// files and acts; the caller passes `now`), so that tests drive every case in milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "records/progress.h"

namespace ftrain::train {

// Where a rank's main thread is (it says so through atomics; train/hang_watch.h).
// kIo: rank 0's metrics, TensorBoard and Prometheus writes and a rank's wait for its data
// (storage, not compute: a storage recovery takes minutes).
enum class HangPhase { kStart, kCompute, kOptimizer, kBoundary, kEval, kCheckpoint, kIo, kDone };
const char* HangPhaseName(HangPhase p);  // "start", "compute", ...
// Phases whose length the step time does not predict (start-up, the first step, evaluation,
// a checkpoint): they get the start-up allowance, dist.timeout_s. kIo has its own (io_s).
bool IsLongPhase(HangPhase p);

// One rank's progress and RUN/progress/node-<N>.json: defined in records/progress.h.
using records::NodeProgress;
using records::RankProgress;

struct HangSettings {
  double timeout_s = 0;    // guard.hang_timeout_s (0: automatic)
  double floor_s = 60;     // guard.hang_floor_s
  double startup_s = 600;  // dist.timeout_s: the first step of a start, long phases
  double io_s = 600;       // guard.hang_io_s (default dist.timeout_s): the kIo phase
};
// The threshold for a rank in `phase` whose recent step times (the first step of this start
// left out) are `recent_step_s`: io_s in kIo, the start-up allowance in a long phase or with no
// step measured yet, else hang_timeout_s when set, else max(floor, kHangStepFactor x median).
double HangThreshold(const HangSettings& s, const std::vector<double>& recent_step_s,
                     HangPhase phase);

// How long each rank's (step, phase, launched) has not changed, on the judge's own monotonic
// clock: the judge notes when it first saw each value (back-dated by the rank's own stuck_s,
// a duration its host measured, the first time it sees it). A rank whose files stopped (its
// node froze) keeps ageing on the judge's clock. The wall-clock `time` of a file is never used:
// a judge whose clock is ahead of another host's does not see that host's ranks as old.
class ProgressAges {
 public:
  // `all` with each stuck_s replaced by its age at `now` (the judge's monotonic seconds).
  std::vector<RankProgress> Aged(const std::vector<RankProgress>& all, double now);

 private:
  struct Seen {
    int64_t step = 0;
    std::string phase;
    uint64_t launched = 0;
    double since = 0;  // judge's clock: when this value began
  };
  std::vector<Seen> seen_;  // by rank; since < 0: never seen
};

// The kIo allowance: `configured` (guard.hang_io_s, itself dist.timeout_s when unset) unless
// the deprecated FTRAIN_HANG_IO_S's `value` is set (not nullptr or ""): then that value, seconds
// > 0; anything else is InvalidArgument naming the variable. The variable goes in a later
// release (docs/operations.md).
StatusOr<double> HangIoAllowance(const char* value, double configured);

struct HangVerdict {
  std::vector<RankProgress> hung;  // the ranks the others wait for (stuck_s: their age)
  bool me_hung = false;            // the judging rank is one of them
  int recorder = -1;               // the lowest rank that is not hung: it writes the record
  // No verdict because a rank behind is still under its threshold: the least time until one
  // could come (0: none pending). A judge need not look again sooner.
  double wait_s = 0;
};
// Judged by rank `me` from `all` (this start's progress, one entry per rank, stuck_s as aged
// by ProgressAges). The ranks that launched the fewest collectives are not in the collective
// the others wait in; they are hung when each has been stuck at least its own threshold. No
// verdict while a rank has no entry, or when every rank launched as many (all inside one
// collective: a network fault, left to the collective timeout).
HangVerdict JudgeHang(const std::vector<RankProgress>& all, int world_size, int me);

// "rank 3 (node 1, host h1) hung in compute of step 7 for 12.3 s"
std::string DescribeHung(const RankProgress& p);

}  // namespace ftrain::train
