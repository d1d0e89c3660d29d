// Unit tests of rank 0's view of the per-rank step phases (train/telemetry/step_phases.h and
// the record's records/phases.h, no LibTorch): median/max/slowest rank over the ranks, the full
// vector only every N steps, a straggler named once (with its host and the phase that makes it
// slow) only after it stayed above the median for a whole window, none in a balanced run, and the
// metrics.jsonl members parse as JSON (nlohmann) inside the step's line; most of a node's ranks
// slow make one node group. Label: unit; well under a second.
#include "train/telemetry/step_phases.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "records/metrics_record.h"
#include "records/phases.h"

namespace ftrain::train {
namespace {

using records::FormatMetricsLine;
using records::GroupStragglers;
using records::kBoundaryWait;
using records::kCommWait;
using records::kCompute;
using records::kDataWait;
using records::kOptimizer;
using records::Phase;
using records::PhaseSummary;
using records::RankList;
using records::RankPhases;
using records::StepMetrics;
using records::Straggler;
using records::StragglerGroupTitle;

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

// Eight ranks, four per host; the ranks in `slow` get 0.06 s more compute per step.
std::vector<RankPhases> Step8(const std::vector<int>& slow) {
  std::vector<RankPhases> v(8);
  for (auto& r : v) {
    r.s[kDataWait] = 0.001;
    r.s[kCompute] = 0.100;
    r.s[kOptimizer] = 0.005;
  }
  for (int r : slow) v[r].s[kCompute] += 0.06;
  return v;
}
const std::vector<std::string> kHosts8 = {"n1", "n1", "n1", "n1", "n2", "n2", "n2", "n2"};

TEST(StepPhasesTest, MostRanksOfOneNodeSlowAreOneNodeGroup) {
  StragglerOptions o;
  o.window = 5;
  PhaseRecorder rec(kHosts8, 0, o);
  PhaseSummary s;
  for (int step = 1; step <= 5; ++step) s = rec.Observe(step, Step8({4, 5, 6}));
  ASSERT_EQ(s.named.size(), 3u);
  const auto groups = GroupStragglers(rec.stragglers(), kHosts8);
  ASSERT_EQ(groups.size(), 1u) << "one node, not three ranks";
  EXPECT_TRUE(groups[0].node);
  EXPECT_EQ(groups[0].host, "n2");
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(groups[0].host_ranks, 4);
  EXPECT_EQ(groups[0].cause, "compute_s");
  EXPECT_NEAR(groups[0].ExcessPct(), 100 * (0.166 / 0.106 - 1), 0.1);
  EXPECT_EQ(StragglerGroupTitle(groups[0]), "node n2: ranks 4-6 (3 of its 4)");
}

TEST(StepPhasesTest, HalfANodeOrOneRankStaysRanks) {
  auto named = [](int rank, const std::string& host, double busy) {
    Straggler g;
    g.rank = rank;
    g.host = host;
    g.busy_s = busy;
    g.median_s = 0.1;
    g.cause = "compute_s";
    return g;
  };
  // 2 of n2's 4 ranks and 1 of n1's: no node, three ranks in the order named.
  auto groups =
      GroupStragglers({named(6, "n2", 0.15), named(1, "n1", 0.13), named(4, "n2", 0.2)}, kHosts8);
  ASSERT_EQ(groups.size(), 3u);
  for (const auto& g : groups) EXPECT_FALSE(g.node);
  EXPECT_EQ(StragglerGroupTitle(groups[0]), "rank 6 on n2");
  EXPECT_EQ(StragglerGroupTitle(groups[1]), "rank 4 on n2");
  EXPECT_EQ(StragglerGroupTitle(groups[2]), "rank 1 on n1");
  // Hosts not known (no per-rank vector): two ranks of one host make it the node.
  groups = GroupStragglers({named(6, "n2", 0.15), named(7, "n2", 0.2)}, {});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(StragglerGroupTitle(groups[0]), "node n2: ranks 6-7 (2)");
  EXPECT_NEAR(groups[0].ExcessPct(), 75, 1e-9);
  EXPECT_EQ(RankList({0, 2, 3, 5, 6, 7}), "0,2-3,5-7");
}

}  // namespace
}  // namespace ftrain::train
