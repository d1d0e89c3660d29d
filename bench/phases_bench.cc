// Rank 0's per-step cost of the per-rank phase accounting (printed, never pass/fail): what
// PhaseRecorder::Observe (median/max/slowest rank, the straggler window) and formatting the
// metrics.jsonl members cost per step for R ranks, on steps without and with the full
// per-rank vector. The collective side is one all-gather of 9 doubles per rank where an
// all-reduce of 2 ran before (bench/phases_cost.sh measures whole steps).
// usage: build/bin/phases_bench [STEPS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "train/telemetry/metrics.h"
#include "train/telemetry/step_phases.h"

int main(int argc, char** argv) {
  using ftrain::records::RankPhases;
  const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  for (int ranks : {4, 64, 1024}) {
    std::vector<std::string> hosts(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) hosts[static_cast<size_t>(r)] = "node" + std::to_string(r / 8);
    for (int every : {0, 1}) {
      ftrain::train::PhaseRecorder rec(hosts, every, {});
      std::vector<std::vector<RankPhases>> input(16, std::vector<RankPhases>(ranks));
      for (auto& step : input) {
        for (auto& p : step) {
          for (double& x : p.s) x = 0.01 * jitter(rng);
        }
      }
      size_t bytes = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 1; s <= steps; ++s) {
        ftrain::records::StepMetrics m;
        m.step = s;
        m.phases = std::make_shared<ftrain::records::PhaseSummary>(
            rec.Observe(s, input[static_cast<size_t>(s) % input.size()]));
        bytes += ftrain::records::FormatMetricsLine(m).size();
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          steps;
      std::printf("ranks %5d  %-22s %9.1f us/step  %7zu bytes/line\n", ranks,
                  every ? "full vector every step" : "summary only", us, bytes / steps);
    }
  }
  return 0;
}
