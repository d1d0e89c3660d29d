// Rank 0's summary of the per-rank step phases, and the straggler rule.
#include "train/step_phases.h"

#include <algorithm>
#include <cstdio>

#include "core/log.h"

namespace ftrain::train {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string PhaseObject(const double* v) {
  std::string out = "{";
  for (int p = 0; p < kNumPhases; ++p) {
    out += std::string(p > 0 ? "," : "") + Quote(PhaseKey(p)) + ":" + Num(v[p]);
  }
  return out + "}";
}

std::string RanksObject(const PhaseSummary& s) {
  std::string out = "{\"host\":[";
  for (size_t r = 0; r < s.hosts.size(); ++r) out += (r > 0 ? "," : "") + Quote(s.hosts[r]);
  out += "]";
  for (int p = 0; p < kNumPhases; ++p) {
    out += std::string(",") + Quote(PhaseKey(p)) + ":[";
    for (size_t r = 0; r < s.ranks.size(); ++r) out += (r > 0 ? "," : "") + Num(s.ranks[r].s[p]);
    out += "]";
  }
  return out + "}";
}

}  // namespace

const char* PhaseKey(int phase) {
  static const char* const kKeys[kNumPhases] = {"data_wait_s",  "compute_s",       "comm_wait_s",
                                                "optimizer_s", "boundary_wait_s", "ckpt_stall_s"};
  return phase >= 0 && phase < kNumPhases ? kKeys[phase] : "?";
}

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

std::string PhaseSummaryJson(const PhaseSummary& s) {
  std::string out = ",\"phases\":{\"median\":" + PhaseObject(s.median) +
                    ",\"max\":" + PhaseObject(s.max) + ",\"busy_median_s\":" +
                    Num(s.busy_median_s) + ",\"busy_max_s\":" + Num(s.busy_max_s) +
                    ",\"slowest_rank\":" + std::to_string(s.slowest_rank) +
                    ",\"slowest_host\":" + Quote(s.slowest_host) +
                    ",\"comm_bytes\":" + std::to_string(static_cast<int64_t>(s.comm_bytes)) + "}";
  if (!s.ranks.empty()) out += ",\"ranks\":" + RanksObject(s);
  if (!s.named.empty()) {
    out += ",\"stragglers\":[";
    for (size_t i = 0; i < s.named.size(); ++i) {
      const Straggler& g = s.named[i];
      out += std::string(i > 0 ? "," : "") + "{\"rank\":" + std::to_string(g.rank) +
             ",\"host\":" + Quote(g.host) + ",\"busy_s\":" + Num(g.busy_s) +
             ",\"median_s\":" + Num(g.median_s) + ",\"cause\":" + Quote(g.cause) + "}";
    }
    out += "]";
  }
  return out;
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
    : hosts_(std::move(hosts)), full_every_(full_every), opts_(opts) {}

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
  double median_sum = 0;
  for (double m : window_median_) median_sum += m;
  const double median_mean = median_sum / static_cast<double>(w);
  for (size_t r = 0; r < n; ++r) {
    if (named_.count(static_cast<int>(r)) != 0) continue;
    double phase_sum[kNumPhases] = {}, busy = 0;
    bool complete = true;
    for (const auto& at : window_) {
      if (at.size() != n) complete = false;  // the world changed size: wait for a full window
      if (!complete) break;
      busy += at[r].Busy();
      for (int p = 0; p < kNumPhases; ++p) phase_sum[p] += at[r].s[p];
    }
    if (!complete) break;
    busy /= static_cast<double>(w);
    if (busy <= (1 + opts_.threshold) * median_mean || busy - median_mean < opts_.min_excess_s) {
      continue;
    }
    Straggler g;
    g.rank = static_cast<int>(r);
    g.host = host(r);
    g.busy_s = busy;
    g.median_s = median_mean;
    g.step = step;
    // The cause: the own-work phase with the largest share of this rank's busy time relative
    // to the median rank's (data wait for a rank whose shards are slow to read).
    double best = -1;
    for (int p : {kDataWait, kCompute, kOptimizer}) {
      std::vector<double> meds;
      for (const auto& at : window_) {
        std::vector<double> c(n);
        for (size_t q = 0; q < n; ++q) c[q] = at[q].s[p];
        meds.push_back(Median(c));
      }
      double med = 0;
      for (double m : meds) med += m;
      const double excess = phase_sum[p] / static_cast<double>(w) - med / static_cast<double>(w);
      if (excess > best) {
        best = excess;
        g.cause = PhaseKey(p);
      }
    }
    named_.insert(g.rank);
    named_list_.push_back(g);
    s.named.push_back(g);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "straggler: rank %d on %s: busy %.3f s per step against a median of %.3f s "
                  "(+%.0f %%) over the last %lld steps, mostly %s",
                  g.rank, g.host.c_str(), g.busy_s, g.median_s,
                  median_mean > 0 ? 100 * (g.busy_s / median_mean - 1) : 0.0,
                  static_cast<long long>(w), g.cause.c_str());
    FT_LOG(Warning) << line;
  }
  return s;
}

}  // namespace ftrain::train
