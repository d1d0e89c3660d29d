// Per-rank step phases and stragglers (rank 0's side; no LibTorch). Every rank splits its
// step into the phases of records/phases.h (train/phase_clock.h measures them); the vectors
// ride on the boundary's flag agreement (train/boundary_agreement.h), so rank 0 sees every
// rank's phases each step without a new round trip. Here rank 0 summarises them (median, max,
// slowest rank), names stragglers once (logged by node), and gives the TensorBoard scalars and
// Prometheus samples; the metrics.jsonl members are records/phases.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "records/phases.h"

namespace ftrain::train {

// TensorBoard tags / Prometheus names with their values.
std::vector<std::pair<std::string, double>> PhaseScalars(const records::PhaseSummary& p);

struct StragglerOptions {
  int64_t window = 20;          // steps
  double threshold = 0.2;       // mean busy / median busy over the window > 1 + threshold
  double min_excess_s = 0.002;  // and by at least this much per step (timer noise)
};

// Rank 0: turns the per-rank vectors of each step into its summary and names stragglers.
class PhaseRecorder {
 public:
  PhaseRecorder(std::vector<std::string> hosts, int64_t full_every, StragglerOptions opts);
  records::PhaseSummary Observe(int64_t step, const std::vector<records::RankPhases>& ranks);
  const std::vector<records::Straggler>& stragglers() const { return named_list_; }

 private:
  std::optional<records::Straggler> Judge(size_t rank, int64_t step) const;
  // Names the ranks whose window says so into s->named, and logs them once: by node when most
  // of a node's ranks are named (a node line), else one line per rank.
  void NameStragglers(int64_t step, size_t ranks, records::PhaseSummary* s);
  std::vector<std::string> hosts_;  // per rank
  int nodes_;                       // distinct hosts
  int64_t full_every_;
  StragglerOptions opts_;
  // The window: per step, every rank's phases and the median busy time.
  std::vector<std::vector<records::RankPhases>> window_;
  std::vector<double> window_median_;
  size_t next_ = 0;  // ring position
  std::set<int> named_;
  std::set<std::string> named_nodes_;  // nodes logged as a whole
  std::vector<records::Straggler> named_list_;
};

double Median(std::vector<double> v);

}  // namespace ftrain::train
