// [guard], data.skip and the step guard's decisions (guard.h).
#include "train/verdicts/guard.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace ftrain::train {

const char* GuardPolicyName(GuardPolicy p) {
  switch (p) {
    case GuardPolicy::kOff:
      return "off";
    case GuardPolicy::kRollback:
      return "rollback";
    case GuardPolicy::kSkip:
      break;
  }
  return "skip";
}

namespace {
std::string Where(const Config& c, const char* key) {
  return c.Has(key) ? c.entries().at(key).origin + ": " : std::string();
}
}  // namespace

Status LoadGuard(const Config& c, GuardSection* out) {
  GuardSection& g = *out;
  std::string policy = GuardPolicyName(g.policy);
  FT_RETURN_IF_ERROR(c.GetString("guard.policy", &policy));
  if (policy == "off") {
    g.policy = GuardPolicy::kOff;
  } else if (policy == "skip") {
    g.policy = GuardPolicy::kSkip;
  } else if (policy == "rollback") {
    g.policy = GuardPolicy::kRollback;
  } else {
    return Status::InvalidArgument(Where(c, "guard.policy") + "guard.policy = '" + policy +
                                   "' is not one of off, skip, rollback");
  }
  FT_RETURN_IF_ERROR(c.GetInt("guard.spike_window", &g.spike_window));
  FT_RETURN_IF_ERROR(c.GetDouble("guard.spike_threshold", &g.spike_threshold));
  FT_RETURN_IF_ERROR(c.GetInt("guard.spike_readmit_steps", &g.spike_readmit_steps));
  FT_RETURN_IF_ERROR(c.GetInt("guard.spike_readmit_within", &g.spike_readmit_within));
  FT_RETURN_IF_ERROR(c.GetInt("guard.max_skips", &g.max_skips));
  FT_RETURN_IF_ERROR(c.GetInt("guard.max_skips_window", &g.max_skips_window));
  FT_RETURN_IF_ERROR(c.GetInt("guard.sdc_every_steps", &g.sdc_every_steps));
  FT_RETURN_IF_ERROR(c.GetInt("guard.max_rollbacks", &g.max_rollbacks));
  if (g.max_rollbacks < 0 || g.max_rollbacks > 1000) {
    return Status::InvalidArgument(Where(c, "guard.max_rollbacks") +
                                   "guard.max_rollbacks must be in [0, 1000], got " +
                                   std::to_string(g.max_rollbacks));
  }
  if (g.policy != GuardPolicy::kRollback && c.Has("guard.max_rollbacks")) {
    return Status::InvalidArgument(Where(c, "guard.max_rollbacks") +
                                   "guard.max_rollbacks is set but guard.policy = " + policy +
                                   ": only rollback rolls back; set guard.policy = rollback or "
                                   "drop guard.max_rollbacks");
  }
  if (g.sdc_every_steps < 0 || g.sdc_every_steps > 100000000) {
    return Status::InvalidArgument(Where(c, "guard.sdc_every_steps") +
                                   "guard.sdc_every_steps must be in [0, 100000000] steps (0 = "
                                   "no replica check), got " +
                                   std::to_string(g.sdc_every_steps));
  }
  FT_RETURN_IF_ERROR(c.GetDouble("guard.hang_timeout_s", &g.hang_timeout_s));
  FT_RETURN_IF_ERROR(c.GetDouble("guard.hang_floor_s", &g.hang_floor_s));
  if (!(g.hang_floor_s >= 1) || !std::isfinite(g.hang_floor_s)) {
    return Status::InvalidArgument(Where(c, "guard.hang_floor_s") +
                                   "guard.hang_floor_s must be >= 1 second (the guard looks "
                                   "twice a second), got " +
                                   std::to_string(g.hang_floor_s));
  }
  if (!(g.hang_timeout_s >= 0) || !std::isfinite(g.hang_timeout_s)) {
    return Status::InvalidArgument(Where(c, "guard.hang_timeout_s") +
                                   "guard.hang_timeout_s must be 0 (automatic) or a number of "
                                   "seconds >= guard.hang_floor_s, got " +
                                   std::to_string(g.hang_timeout_s));
  }
  FT_RETURN_IF_ERROR(c.GetDouble("guard.hang_io_s", &g.hang_io_s));
  if (c.Has("guard.hang_io_s") && (!(g.hang_io_s > 0) || !std::isfinite(g.hang_io_s))) {
    return Status::InvalidArgument(Where(c, "guard.hang_io_s") +
                                   "guard.hang_io_s must be a number of seconds > 0 (the hang "
                                   "guard's allowance for metrics writes and data reads; unset: "
                                   "dist.timeout_s), got " +
                                   std::to_string(g.hang_io_s));
  }
  if (g.hang_timeout_s > 0 && g.hang_timeout_s < g.hang_floor_s) {
    return Status::InvalidArgument(
        Where(c, "guard.hang_timeout_s") +
        "guard.hang_timeout_s = " + std::to_string(g.hang_timeout_s) +
        " is below guard.hang_floor_s = " + std::to_string(g.hang_floor_s) +
        ": the floor is the least the guard waits; lower the floor or raise the timeout");
  }
  if (g.spike_window != 0 && (g.spike_window < 3 || g.spike_window > 100000)) {
    return Status::InvalidArgument(Where(c, "guard.spike_window") +
                                   "guard.spike_window must be 0 (off) or in [3, 100000] steps");
  }
  if (!(g.spike_threshold > 0) || !std::isfinite(g.spike_threshold)) {
    return Status::InvalidArgument(Where(c, "guard.spike_threshold") +
                                   "guard.spike_threshold must be > 0 (MADs above the median)");
  }
  if (g.spike_readmit_steps != 0 && (g.spike_readmit_steps < 2 || g.spike_readmit_steps > 1000)) {
    return Status::InvalidArgument(Where(c, "guard.spike_readmit_steps") +
                                   "guard.spike_readmit_steps must be 0 (never re-admit) or in "
                                   "[2, 1000] steps, got " +
                                   std::to_string(g.spike_readmit_steps));
  }
  if (g.spike_readmit_steps != 0 &&
      (g.spike_readmit_within < g.spike_readmit_steps || g.spike_readmit_within > 10000)) {
    return Status::InvalidArgument(
        Where(c, "guard.spike_readmit_within") +
        "guard.spike_readmit_within must be in [guard.spike_readmit_steps = " +
        std::to_string(g.spike_readmit_steps) + ", 10000] steps, got " +
        std::to_string(g.spike_readmit_within));
  }
  if (g.max_skips < 0 || g.max_skips_window < 1) {
    return Status::InvalidArgument(Where(c, "guard.max_skips") +
                                   "guard.max_skips must be >= 0 and guard.max_skips_window >= 1");
  }
  // Settings that ask for a guard that policy off does not run.
  if (g.policy == GuardPolicy::kOff) {
    const char* key = nullptr;
    for (const char* k : {"guard.spike_window", "guard.max_skips", "guard.spike_threshold",
                          "guard.spike_readmit_steps", "guard.spike_readmit_within"}) {
      if (key == nullptr && c.Has(k)) key = k;
    }
    if (key == nullptr) return Status::Ok();
    return Status::InvalidArgument(Where(c, key) + key +
                                   " is set but guard.policy = off: "
                                   "the guard does not run; set guard.policy = skip or drop " +
                                   key);
  }
  return Status::Ok();
}

Status CheckHangAgainstTimeout(const Config& c, const GuardSection& g, int64_t dist_timeout_s) {
  const bool fixed = g.hang_timeout_s > 0;
  const char* key = fixed ? "guard.hang_timeout_s" : "guard.hang_floor_s";
  const double t = fixed ? g.hang_timeout_s : g.hang_floor_s;
  // Only a value someone set contradicts the timeout; a default floor above a short
  // dist.timeout_s leaves the timeout to end a hang, as before the guard.
  if (!c.Has(key) || t < static_cast<double>(dist_timeout_s)) return Status::Ok();
  return Status::InvalidArgument(
      Where(c, key) + key + " = " + std::to_string(t) +
      " is not below dist.timeout_s = " + std::to_string(dist_timeout_s) +
      ": the collective timeout would end the job first and the hang "
      "guard would never name the rank; lower " +
      key);
}

Status ParseSkipList(const Config& c, int64_t total_steps, std::set<int64_t>* out) {
  std::string text;
  FT_RETURN_IF_ERROR(c.GetString("data.skip", &text));
  std::stringstream in(text);
  std::string item;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(Where(c, "data.skip") + "data.skip: '" + item + "' " + why);
  };
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    int64_t first = 0, last = 0;
    const size_t dash = item.find('-');
    const bool ok = dash == std::string::npos ? ParseInt64(item, &first) && ParseInt64(item, &last)
                                              : ParseInt64(item.substr(0, dash), &first) &&
                                                    ParseInt64(item.substr(dash + 1), &last);
    if (!ok || last < first) return bad("is not a step or a range A-B of steps");
    if (first < 1 || last > total_steps) {
      return bad("names a step that does not exist: steps run from 1 to train.steps = " +
                 std::to_string(total_steps));
    }
    if (last - first > 10000000) return bad("is a range of more than 10^7 steps");
    for (int64_t s = first; s <= last; ++s) out->insert(s);
  }
  return Status::Ok();
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<long>(n / 2), v.end());
  const double hi = v[n / 2];
  if (n % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<long>(n / 2));
  return (lo + hi) / 2;
}

namespace {

// The spike rule's scale of `v` around its median: 1.4826 x MAD (the standard deviation of
// normal data), floored at 1 % of the median so that a flat run does not call noise a spike.
double RobustScale(const std::vector<double>& v, double median) {
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - median));
  return std::max(1.4826 * MedianOf(dev), 0.01 * median);
}

}  // namespace

bool StepGuard::WindowLevel(double* median, double* scale) const {
  if (cfg_.policy == GuardPolicy::kOff || cfg_.spike_window == 0 ||
      static_cast<int64_t>(window_.size()) < cfg_.spike_window) {
    return false;
  }
  const std::vector<double> w(window_.begin(), window_.end());
  *median = MedianOf(w);
  *scale = RobustScale(w, *median);
  return true;
}

double StepGuard::Limit() const {
  double median = 0, scale = 0;
  if (!WindowLevel(&median, &scale)) return std::numeric_limits<double>::infinity();
  return median + cfg_.spike_threshold * scale;
}

// A level shift, not a spike: the step and at least spike_readmit_steps - 1 suspects of the
// last spike_readmit_within judged steps lie within spike_threshold x the window's relative
// scale of their own median (two-sided), i.e. they are as steady among themselves as the old
// level was. The relative scale (scale / median, at least the 1 % floor) is the window's, not
// the suspects' own: the MAD of a few growing norms (3, 9, 27, 81) is as large
// as their spread and would call any run-away a level. A lone spike has no company; spikes of
// different sizes do not agree; an outlier among the suspects is left out, not a veto.
std::vector<double> StepGuard::Readmitted(double grad_norm) const {
  double window_median = 0, window_scale = 0;
  if (cfg_.spike_readmit_steps == 0 || !std::isfinite(grad_norm) ||
      !WindowLevel(&window_median, &window_scale) || !(window_median > 0)) {
    return {};
  }
  const size_t look = static_cast<size_t>(cfg_.spike_readmit_within - 1);
  const size_t first = recent_.size() > look ? recent_.size() - look : 0;
  std::vector<double> suspects;
  for (size_t i = first; i < recent_.size(); ++i) {
    if (recent_[i].second) suspects.push_back(recent_[i].first);
  }
  suspects.push_back(grad_norm);
  if (static_cast<int64_t>(suspects.size()) < cfg_.spike_readmit_steps) return {};
  const double median = MedianOf(suspects);
  const double band = cfg_.spike_threshold * (window_scale / window_median) * median;
  std::vector<double> agree;
  for (double x : suspects) {
    if (std::fabs(x - median) <= band) agree.push_back(x);
  }
  if (std::fabs(grad_norm - median) > band ||
      static_cast<int64_t>(agree.size()) < cfg_.spike_readmit_steps) {
    return {};
  }
  return agree;
}

bool StepGuard::IsSpike(double grad_norm) const {
  return grad_norm > Limit() && Readmitted(grad_norm).empty();
}

std::string StepGuard::ReasonFor(double grad_norm) const {
  return std::isfinite(grad_norm) ? "spike" : "nonfinite";
}

Status StepGuard::Record(int64_t step, double grad_norm, const std::string& skipped) {
  // Applied above the limit: IsSpike re-admitted it. Asked before anything changes, so that
  // the answer is IsSpike's.
  const std::vector<double> level =
      skipped.empty() && grad_norm > Limit() ? Readmitted(grad_norm) : std::vector<double>();
  readmitted_ = !level.empty();
  const bool judged = cfg_.spike_window > 0 && cfg_.spike_readmit_steps > 0 &&
                      std::isfinite(grad_norm) && (skipped.empty() || skipped == "spike");
  if (readmitted_) {
    // The new level replaces the old: the window restarts from the agreeing norms, and the
    // suspects that made it are spent.
    window_.assign(level.begin(), level.end());
    recent_.clear();
  } else if (judged) {
    recent_.emplace_back(grad_norm, !skipped.empty());
    const size_t keep = static_cast<size_t>(cfg_.spike_readmit_within - 1);
    if (recent_.size() > keep) recent_.erase(recent_.begin(), recent_.end() - keep);
  }
  if (skipped.empty()) {
    if (cfg_.spike_window == 0) return Status::Ok();
    if (!readmitted_) window_.push_back(grad_norm);
    while (static_cast<int64_t>(window_.size()) > cfg_.spike_window) window_.pop_front();
    return Status::Ok();
  }
  skipped_.emplace_back(step, skipped);
  if (skipped == "listed" || skipped == "rollback") return Status::Ok();
  std::string steps;
  int64_t count = 0;
  for (const auto& [s, why] : skipped_) {
    if (why == "listed" || why == "rollback" || s <= step - cfg_.max_skips_window) continue;
    ++count;
    steps += (steps.empty() ? "" : ",") + std::to_string(s);
  }
  if (count <= cfg_.max_skips) return Status::Ok();
  return Status::FailedPrecondition(
      "guard: " + std::to_string(count) + " steps skipped within the last " +
      std::to_string(cfg_.max_skips_window) + " (steps " + steps +
      "; guard.max_skips = " + std::to_string(cfg_.max_skips) +
      "): the run is diverging or its data is bad, so it ends here instead of skipping on. "
      "Inspect those steps' batches, then resume with a lower train.lr or --data.skip=" +
      steps);
}

void StepGuard::AddSuspects(const std::vector<double>& norms) {
  if (cfg_.spike_window == 0 || cfg_.spike_readmit_steps == 0) return;
  for (double x : norms) {
    if (std::isfinite(x)) recent_.emplace_back(x, true);
  }
  const size_t keep = static_cast<size_t>(cfg_.spike_readmit_within - 1);
  if (recent_.size() > keep) recent_.erase(recent_.begin(), recent_.end() - keep);
}

void StepGuard::Restore(const std::vector<double>& norms, std::vector<SkippedStep> skipped,
                        std::vector<RecentNorm> recent) {
  window_.assign(norms.begin(), norms.end());
  while (cfg_.spike_window >= 0 && static_cast<int64_t>(window_.size()) > cfg_.spike_window) {
    window_.pop_front();
  }
  skipped_ = std::move(skipped);
  // A resume with other re-admission settings keeps what they would have kept.
  recent_ = std::move(recent);
  const size_t keep = cfg_.spike_window > 0 && cfg_.spike_readmit_steps > 0
                          ? static_cast<size_t>(cfg_.spike_readmit_within - 1)
                          : 0;
  if (recent_.size() > keep) recent_.erase(recent_.begin(), recent_.end() - keep);
  readmitted_ = false;
}

}  // namespace ftrain::train
