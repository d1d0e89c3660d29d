// [guard], data.skip and the step guard's decisions (guard.h).
#include "train/config/guard.h"

#include <algorithm>
#include <cmath>
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
  if (g.spike_window != 0 && (g.spike_window < 3 || g.spike_window > 100000)) {
    return Status::InvalidArgument(Where(c, "guard.spike_window") +
                                   "guard.spike_window must be 0 (off) or in [3, 100000] steps");
  }
  if (!(g.spike_threshold > 0) || !std::isfinite(g.spike_threshold)) {
    return Status::InvalidArgument(Where(c, "guard.spike_threshold") +
                                   "guard.spike_threshold must be > 0 (MADs above the median)");
  }
  if (g.max_skips < 0 || g.max_skips_window < 1) {
    return Status::InvalidArgument(Where(c, "guard.max_skips") +
                                   "guard.max_skips must be >= 0 and guard.max_skips_window >= 1");
  }
  // Settings that ask for a guard that policy off does not run.
  if (g.policy == GuardPolicy::kOff &&
      (c.Has("guard.spike_window") || c.Has("guard.max_skips") || c.Has("guard.spike_threshold"))) {
    const char* key = c.Has("guard.spike_window") ? "guard.spike_window"
                      : c.Has("guard.max_skips")  ? "guard.max_skips"
                                                  : "guard.spike_threshold";
    return Status::InvalidArgument(Where(c, key) + key +
                                   " is set but guard.policy = off: "
                                   "the guard does not run; set guard.policy = skip or drop " +
                                   key);
  }
  return Status::Ok();
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

bool StepGuard::IsSpike(double grad_norm) const {
  if (cfg_.policy == GuardPolicy::kOff || cfg_.spike_window == 0) return false;
  if (static_cast<int64_t>(window_.size()) < cfg_.spike_window) return false;
  const std::vector<double> w(window_.begin(), window_.end());
  const double median = MedianOf(w);
  std::vector<double> dev;
  dev.reserve(w.size());
  for (double x : w) dev.push_back(std::fabs(x - median));
  const double scale = std::max(1.4826 * MedianOf(dev), 0.01 * median);
  return grad_norm > median + cfg_.spike_threshold * scale;
}

std::string StepGuard::ReasonFor(double grad_norm) const {
  return std::isfinite(grad_norm) ? "spike" : "nonfinite";
}

Status StepGuard::Record(int64_t step, double grad_norm, const std::string& skipped) {
  if (skipped.empty()) {
    if (cfg_.spike_window > 0) {
      window_.push_back(grad_norm);
      while (static_cast<int64_t>(window_.size()) > cfg_.spike_window) window_.pop_front();
    }
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

void StepGuard::Restore(const std::vector<double>& norms, std::vector<SkippedStep> skipped) {
  window_.assign(norms.begin(), norms.end());
  while (cfg_.spike_window >= 0 && static_cast<int64_t>(window_.size()) > cfg_.spike_window) {
    window_.pop_front();
  }
  skipped_ = std::move(skipped);
}

}  // namespace ftrain::train
