// Unit tests of rank 0's view of the per-rank step phases (train/step_phases.h, no LibTorch):
// median/max/slowest rank over the ranks, the full vector only every N steps, a straggler
// named once (with its host and the phase that makes it slow) only after it stayed above the
// median for a whole window, none in a balanced run, and the metrics.jsonl members parse as
// JSON (nlohmann) inside the step's line. Label: unit; well under a second.
#include "train/step_phases.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/metrics.h"

namespace ftrain::train {
namespace {

// Four ranks on two hosts; `slow` gets `extra` seconds more of `phase` per step (-1: none).
std::vector<RankPhases> Step(int slow, Phase phase, double extra, double jitter = 0) {
  std::vector<RankPhases> v(4);
  for (int r = 0; r < 4; ++r) {
    v[r].s[kDataWait] = 0.001;
    v[r].s[kCompute] = 0.100 + jitter * r;
    v[r].s[kCommWait] = 0.010;
    v[r].s[kOptimizer] = 0.005;
    v[r].s[kBoundaryWait] = 0.002;
  }
  if (slow >= 0) v[slow].s[phase] += extra;
  return v;
}

const std::vector<std::string> kHosts = {"n1", "n1", "n2", "n2"};

TEST(StepPhasesTest, SummaryHasMedianMaxAndTheSlowestRank) {
  PhaseRecorder rec(kHosts, 10, {});
  const PhaseSummary s = rec.Observe(1, Step(2, kCompute, 0.05));
  EXPECT_DOUBLE_EQ(s.median[kCompute], 0.100);
  EXPECT_DOUBLE_EQ(s.max[kCompute], 0.150);
  EXPECT_EQ(s.slowest_rank, 2);
  EXPECT_EQ(s.slowest_host, "n2");
  EXPECT_TRUE(s.ranks.empty()) << "the full vector only every 10 steps";
  const PhaseSummary ten = rec.Observe(10, Step(-1, kCompute, 0));
  ASSERT_EQ(ten.ranks.size(), 4u);
  EXPECT_EQ(ten.hosts, kHosts);
}

TEST(StepPhasesTest, AStragglerIsNamedOnceAfterAWindowWithItsHostAndCause) {
  StragglerOptions o;
  o.window = 5;
  o.threshold = 0.2;
  PhaseRecorder rec(kHosts, 0, o);
  for (int step = 1; step <= 4; ++step) {
    EXPECT_TRUE(rec.Observe(step, Step(3, kCompute, 0.06)).named.empty()) << "window not full";
  }
  const PhaseSummary s = rec.Observe(5, Step(3, kCompute, 0.06));
  ASSERT_EQ(s.named.size(), 1u);
  EXPECT_EQ(s.named[0].rank, 3);
  EXPECT_EQ(s.named[0].host, "n2");
  EXPECT_EQ(s.named[0].cause, "compute_s");
  for (int step = 6; step <= 20; ++step) {
    EXPECT_TRUE(rec.Observe(step, Step(3, kCompute, 0.06)).named.empty()) << "named once";
  }
  EXPECT_EQ(rec.stragglers().size(), 1u);
}

TEST(StepPhasesTest, ARankWithSlowerDataIsNamedWithDataWaitAsTheCause) {
  StragglerOptions o;
  o.window = 3;
  PhaseRecorder rec(kHosts, 0, o);
  PhaseSummary s;
  for (int step = 1; step <= 3; ++step) s = rec.Observe(step, Step(1, kDataWait, 0.08));
  ASSERT_EQ(s.named.size(), 1u);
  EXPECT_EQ(s.named[0].rank, 1);
  EXPECT_EQ(s.named[0].cause, "data_wait_s");
}

TEST(StepPhasesTest, BalancedRanksAndShortBurstsNameNone) {
  StragglerOptions o;
  o.window = 10;
  o.threshold = 0.2;
  PhaseRecorder rec(kHosts, 0, o);
  for (int step = 1; step <= 50; ++step) {
    // 1 % apart, and every 10th step one rank is 50 % slower once (a hiccup, not a straggler).
    const bool burst = step % 10 == 0;
    const PhaseSummary s =
        rec.Observe(step, Step(burst ? step / 10 % 4 : -1, kCompute, burst ? 0.05 : 0, 0.001));
    EXPECT_TRUE(s.named.empty()) << "step " << step;
  }
}

TEST(StepPhasesTest, MetricsLineWithPhasesIsOneJsonObject) {
  StragglerOptions o;
  o.window = 1;
  PhaseRecorder rec(kHosts, 1, o);
  StepMetrics m;
  m.step = 1;
  m.phases = std::make_shared<PhaseSummary>(rec.Observe(1, Step(0, kCompute, 0.1)));
  const nlohmann::json j = nlohmann::json::parse(FormatMetricsLine(m));
  EXPECT_EQ(j["step"], 1);
  EXPECT_EQ(j["phases"]["slowest_rank"], 0);
  EXPECT_NEAR(j["phases"]["max"]["compute_s"].get<double>(), 0.2, 1e-9);
  EXPECT_EQ(j["ranks"]["host"].size(), 4u);
  EXPECT_EQ(j["ranks"]["compute_s"].size(), 4u);
  EXPECT_EQ(j["stragglers"][0]["host"], "n1");
}

}  // namespace
}  // namespace ftrain::train
