// The hang guard's pure decisions (hang_verdict.h).
#include "train/verdicts/hang_verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "train/verdicts/guard.h"

namespace ftrain::train {

namespace {
constexpr const char* kPhaseNames[] = {"start", "compute",    "optimizer", "boundary",
                                       "eval",  "checkpoint", "io",        "done"};
}  // namespace

const char* HangPhaseName(HangPhase p) { return kPhaseNames[static_cast<int>(p)]; }

bool IsLongPhase(HangPhase p) {
  return p == HangPhase::kStart || p == HangPhase::kEval || p == HangPhase::kCheckpoint ||
         p == HangPhase::kDone;
}

double HangThreshold(const HangSettings& s, const std::vector<double>& recent_step_s,
                     HangPhase phase) {
  if (phase == HangPhase::kIo) return s.io_s;
  if (IsLongPhase(phase) || recent_step_s.empty()) return s.startup_s;
  if (s.timeout_s > 0) return s.timeout_s;
  return std::max(s.floor_s, kHangStepFactor * MedianOf(recent_step_s));
}

StatusOr<double> HangIoAllowance(const char* value, double configured) {
  if (value == nullptr || *value == '\0') return configured;
  char* end = nullptr;
  const double v = std::strtod(value, &end);
  if (end == value || *end != '\0' || !std::isfinite(v) || v <= 0) {
    return Status::InvalidArgument(std::string("FTRAIN_HANG_IO_S='") + value +
                                   "' is not a number of seconds > 0: the hang guard's allowance "
                                   "for metrics writes and data reads (deprecated: unset it and "
                                   "set guard.hang_io_s in the config)");
  }
  return v;
}

std::vector<RankProgress> ProgressAges::Aged(const std::vector<RankProgress>& all, double now) {
  std::vector<RankProgress> out = all;
  for (RankProgress& p : out) {
    if (p.rank < 0) continue;
    if (static_cast<size_t>(p.rank) >= seen_.size()) seen_.resize(p.rank + 1, Seen{0, "", 0, -1});
    Seen& s = seen_[static_cast<size_t>(p.rank)];
    if (s.since < 0 || s.step != p.step || s.phase != p.phase || s.launched != p.launched) {
      // A new value: it began stuck_s ago by the rank's own clock (a duration, not a time).
      s = Seen{p.step, p.phase, p.launched, now - std::max(0.0, p.stuck_s)};
    }
    p.stuck_s = now - s.since;
  }
  return out;
}

HangVerdict JudgeHang(const std::vector<RankProgress>& all, int world_size, int me) {
  HangVerdict v;
  std::vector<bool> seen(static_cast<size_t>(std::max(world_size, 0)), false);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const RankProgress& p : all) {
    if (p.rank < 0 || p.rank >= world_size) return v;
    seen[static_cast<size_t>(p.rank)] = true;
    lo = std::min(lo, p.launched);
    hi = std::max(hi, p.launched);
  }
  if (std::count(seen.begin(), seen.end(), true) != world_size || lo == hi) return v;
  double wait = 0;
  for (const RankProgress& p : all) {
    if (p.launched != lo) continue;
    // One still under its threshold may be on its way: no verdict yet.
    if (p.stuck_s < p.threshold_s) wait = std::max(wait, p.threshold_s - p.stuck_s);
    v.hung.push_back(p);
  }
  if (wait > 0) {
    HangVerdict none;
    none.wait_s = wait;
    return none;
  }
  std::sort(v.hung.begin(), v.hung.end(),
            [](const RankProgress& a, const RankProgress& b) { return a.rank < b.rank; });
  for (int r = 0; r < world_size && v.recorder < 0; ++r) {
    const bool hung = std::any_of(v.hung.begin(), v.hung.end(),
                                  [r](const RankProgress& p) { return p.rank == r; });
    if (!hung) v.recorder = r;
  }
  v.me_hung = std::any_of(v.hung.begin(), v.hung.end(),
                          [me](const RankProgress& p) { return p.rank == me; });
  return v;
}

std::string DescribeHung(const RankProgress& p) {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", p.stuck_s);
  return "rank " + std::to_string(p.rank) + " (node " + std::to_string(p.node) + ", host " +
         p.host + ") hung in " + p.phase + " of step " + std::to_string(p.step) + " for " + secs +
         " s";
}

}  // namespace ftrain::train
