// Rank 0's summary of the per-rank step phases, and the straggler rule.
#include "train/telemetry/step_phases.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/log.h"

namespace ftrain::train {

using records::kCompute;
using records::kDataWait;
using records::kNumPhases;
using records::kOptimizer;
using records::kOther;
using records::PhaseKey;
using records::PhaseSummary;
using records::RankPhases;
using records::Straggler;
using records::StragglerGroup;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}

std::vector<std::pair<std::string, double>> PhaseScalars(const PhaseSummary& s) {
  std::vector<std::pair<std::string, double>> v;
  for (int p = 0; p < kNumPhases; ++p) {
    v.push_back({std::string("median_") + PhaseKey(p), s.median[p]});
    v.push_back({std::string("max_") + PhaseKey(p), s.max[p]});
  }
  v.push_back({"slowest_rank", static_cast<double>(s.slowest_rank)});
  v.push_back({"busy_max_over_median", s.busy_median_s > 0 ? s.busy_max_s / s.busy_median_s : 1});
  return v;
}

PhaseRecorder::PhaseRecorder(std::vector<std::string> hosts, int64_t full_every,
                             StragglerOptions opts)
    : hosts_(std::move(hosts)),
      nodes_(static_cast<int>(std::set<std::string>(hosts_.begin(), hosts_.end()).size())),
      full_every_(full_every),
      opts_(opts) {}

PhaseSummary PhaseRecorder::Observe(int64_t step, const std::vector<RankPhases>& ranks) {
  PhaseSummary s;
  const size_t n = ranks.size();
  if (n == 0) return s;
  auto host = [this](size_t r) { return r < hosts_.size() ? hosts_[r] : std::string("?"); };
  std::vector<double> col(n);
  for (int p = 0; p < kNumPhases; ++p) {
    for (size_t r = 0; r < n; ++r) col[r] = ranks[r].s[p];
    s.median[p] = Median(col);
    s.max[p] = *std::max_element(col.begin(), col.end());
  }
  for (size_t r = 0; r < n; ++r) s.read_bytes += ranks[r].read_bytes;
  s.nodes = nodes_;
  for (size_t r = 0; r < n; ++r) col[r] = ranks[r].Busy();
  s.busy_median_s = Median(col);
  const auto slowest = std::max_element(col.begin(), col.end());
  s.busy_max_s = *slowest;
  s.slowest_rank = static_cast<int>(slowest - col.begin());
  s.slowest_host = host(static_cast<size_t>(s.slowest_rank));
  if (full_every_ > 0 && step % full_every_ == 0) {
    s.ranks = ranks;
    s.hosts.resize(n);
    for (size_t r = 0; r < n; ++r) s.hosts[r] = host(r);
  }
  // The window (a ring of the last `window` steps).
  const size_t w = static_cast<size_t>(std::max<int64_t>(1, opts_.window));
  if (window_.size() < w) {
    window_.push_back(ranks);
    window_median_.push_back(s.busy_median_s);
  } else {
    window_[next_] = ranks;
    window_median_[next_] = s.busy_median_s;
  }
  next_ = (next_ + 1) % w;
  if (window_.size() < w) return s;
  NameStragglers(step, n, &s);
  return s;
}

void PhaseRecorder::NameStragglers(int64_t step, size_t n, PhaseSummary* s) {
  for (size_t r = 0; r < n; ++r) {
    if (named_.count(static_cast<int>(r)) != 0) continue;
    std::optional<Straggler> g = Judge(r, step);
    if (!g) continue;
    named_.insert(g->rank);
    named_list_.push_back(*g);
    s->named.push_back(*g);
  }
  if (s->named.empty()) return;
  std::set<int> fresh;
  for (const Straggler& g : s->named) fresh.insert(g.rank);
  const long long w = static_cast<long long>(window_.size());
  char line[320];
  for (const StragglerGroup& g : records::GroupStragglers(named_list_, hosts_)) {
    const bool any_fresh =
        std::any_of(g.ranks.begin(), g.ranks.end(), [&](int r) { return fresh.count(r) != 0; });
    if (!any_fresh || (g.node && !named_nodes_.insert(g.host).second)) continue;
    std::snprintf(line, sizeof(line),
                  "straggler: %s: busy %.3f s per step against a median of %.3f s (+%.0f %%) "
                  "over the last %lld steps, mostly %s",
                  records::StragglerGroupTitle(g).c_str(), g.busy_s, g.median_s, g.ExcessPct(), w,
                  g.cause.c_str());
    FT_LOG(Warning) << line;
  }
}

// Rank r over the full window: a straggler when its busy time over the step's median busy time,
// averaged over the window (its largest tenth left out), exceeds 1 + threshold, and by at
// least min_excess_s per step (timer noise).
std::optional<Straggler> PhaseRecorder::Judge(size_t r, int64_t step) const {
  const size_t w = window_.size(), n = window_.front().size();
  double busy = 0, median = 0;
  std::vector<double> ratios;
  for (size_t i = 0; i < w; ++i) {
    const std::vector<RankPhases>& at = window_[i];
    if (at.size() != n || r >= n) return std::nullopt;  // the world changed: wait for a window
    busy += at[r].Busy();
    median += window_median_[i];
    ratios.push_back(window_median_[i] > 0 ? at[r].Busy() / window_median_[i] : 1);
  }
  busy /= static_cast<double>(w);
  median /= static_cast<double>(w);
  // The mean ratio without the largest tenth: one long step (a page fault, a descheduled
  // thread) is a hiccup, while a rank slowed in bursts still stands out on average.
  std::sort(ratios.begin(), ratios.end());
  ratios.resize(ratios.size() - ratios.size() / 10);
  double ratio = 0;
  for (double x : ratios) ratio += x;
  ratio /= static_cast<double>(ratios.size());
  if (ratio <= 1 + opts_.threshold || busy - median < opts_.min_excess_s) return std::nullopt;
  // Named: which phase (only now, once per straggler: it costs window x ranks medians).
  double phase_sum[kNumPhases] = {}, phase_median[kNumPhases] = {};
  std::vector<double> col(n);
  for (const std::vector<RankPhases>& at : window_) {
    for (int p = 0; p < kNumPhases; ++p) {
      phase_sum[p] += at[r].s[p];
      for (size_t q = 0; q < n; ++q) col[q] = at[q].s[p];
      phase_median[p] += Median(col);
    }
  }
  Straggler g;
  g.rank = static_cast<int>(r);
  g.host = r < hosts_.size() ? hosts_[r] : "?";
  g.busy_s = busy;
  g.median_s = median;
  g.step = step;
  // The cause: the own-work phase with the largest excess over the median rank's (data wait
  // for a rank whose shards are slow to read).
  double best = -1;
  for (int p : {kDataWait, kCompute, kOptimizer, kOther}) {
    const double excess = (phase_sum[p] - phase_median[p]) / static_cast<double>(w);
    if (excess > best) {
      best = excess;
      g.cause = PhaseKey(p);
    }
  }
  return g;
}

}  // namespace ftrain::train
