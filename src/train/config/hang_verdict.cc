// The hang guard's pure decisions (hang_verdict.h).
#include "train/config/hang_verdict.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "train/config/guard.h"

namespace ftrain::train {

namespace {
constexpr const char* kPhaseNames[] = {"start", "compute",    "optimizer", "boundary",
                                       "eval",  "checkpoint", "done"};
}  // namespace

const char* HangPhaseName(HangPhase p) { return kPhaseNames[static_cast<int>(p)]; }

bool IsLongPhase(HangPhase p) {
  return p == HangPhase::kStart || p == HangPhase::kEval || p == HangPhase::kCheckpoint ||
         p == HangPhase::kDone;
}

std::string ProgressJson(const RankProgress& p) {
  return nlohmann::json({{"rank", p.rank},
                         {"node", p.node},
                         {"host", p.host},
                         {"generation", p.generation},
                         {"step", p.step},
                         {"phase", p.phase},
                         {"launched", p.launched},
                         {"stuck_s", p.stuck_s},
                         {"threshold_s", p.threshold_s},
                         {"time", p.time},
                         {"pid", p.pid}})
      .dump();
}

bool ParseProgress(const std::string& text, RankProgress* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  try {
    RankProgress p;
    p.rank = j.at("rank").get<int>();
    p.node = j.at("node").get<int>();
    p.host = j.at("host").get<std::string>();
    p.generation = j.at("generation").get<std::string>();
    p.step = j.at("step").get<int64_t>();
    p.phase = j.at("phase").get<std::string>();
    p.launched = j.at("launched").get<uint64_t>();
    p.stuck_s = j.at("stuck_s").get<double>();
    p.threshold_s = j.at("threshold_s").get<double>();
    p.time = j.at("time").get<double>();
    p.pid = j.value("pid", int64_t{0});
    *out = std::move(p);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;  // a field missing or of another type: not a record of ours
  }
}

double HangThreshold(const HangSettings& s, const std::vector<double>& recent_step_s,
                     HangPhase phase) {
  if (IsLongPhase(phase) || recent_step_s.empty()) return s.startup_s;
  if (s.timeout_s > 0) return s.timeout_s;
  return std::max(s.floor_s, kHangStepFactor * MedianOf(recent_step_s));
}

HangVerdict JudgeHang(const std::vector<RankProgress>& all, int world_size, int me, double now) {
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
  for (const RankProgress& p : all) {
    if (p.launched != lo) continue;
    RankProgress h = p;
    h.stuck_s = p.stuck_s + std::max(0.0, now - p.time);
    if (h.stuck_s < p.threshold_s) return HangVerdict();  // it may still be on its way
    v.hung.push_back(h);
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
