// The hang guard's decisions without processes (train/config/hang_verdict.h): the threshold a
// phase gets, which rank the others wait for from the ranks' progress files, the [guard]
// hang keys and the stall fault's parsing. Times are parameters: every case runs in
// microseconds. The end-to-end runs (real processes, a real stall) are in
// tests/guard_run_test.cc.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/fault_inject.h"
#include "tiny_config.h"
#include "train/config/guard.h"
#include "train/config/hang_verdict.h"
#include "train/config/train_config.h"

namespace ftrain::train {
namespace {

TEST(HangThreshold, StartUpAllowanceUntilAStepIsMeasuredAndInLongPhases) {
  HangSettings s;
  s.floor_s = 60;
  s.startup_s = 600;
  EXPECT_EQ(HangThreshold(s, {}, HangPhase::kCompute), 600);
  for (HangPhase p : {HangPhase::kStart, HangPhase::kEval, HangPhase::kCheckpoint}) {
    EXPECT_EQ(HangThreshold(s, {1.0, 1.0}, p), 600) << HangPhaseName(p);
  }
  for (HangPhase p : {HangPhase::kCompute, HangPhase::kOptimizer, HangPhase::kBoundary}) {
    EXPECT_EQ(HangThreshold(s, {1.0, 1.0}, p), 60) << HangPhaseName(p);
  }
}

TEST(HangThreshold, AutomaticIsTheFloorOrTenMediansAndAFixedTimeoutWins) {
  HangSettings s;
  s.floor_s = 3;
  EXPECT_EQ(HangThreshold(s, {0.1, 0.2, 0.1}, HangPhase::kCompute), 3);
  // A slow step among fast ones does not move the median.
  EXPECT_DOUBLE_EQ(HangThreshold(s, {2.0, 50.0, 2.0}, HangPhase::kCompute), 20);
  s.timeout_s = 7;
  EXPECT_EQ(HangThreshold(s, {2.0, 2.0}, HangPhase::kCompute), 7);
  EXPECT_EQ(HangThreshold(s, {}, HangPhase::kCompute), s.startup_s);
}

RankProgress Rank(int r, uint64_t launched, double stuck_s, double time = 1000) {
  RankProgress p;
  p.rank = r;
  p.node = r / 2;
  p.host = "h" + std::to_string(r / 2);
  p.generation = "g";
  p.step = 7;
  p.phase = "compute";
  p.launched = launched;
  p.stuck_s = stuck_s;
  p.threshold_s = 3;
  p.time = time;
  return p;
}

TEST(JudgeHang, TheRankThatLaunchedFewerCollectivesIsNamedOnceStuckPastItsThreshold) {
  std::vector<RankProgress> all = {Rank(0, 41, 3.5), Rank(1, 41, 3.4), Rank(2, 40, 3.6),
                                   Rank(3, 41, 3.5)};
  HangVerdict v = JudgeHang(all, 4, 0, 1000.5);
  ASSERT_EQ(v.hung.size(), 1u);
  EXPECT_EQ(v.hung[0].rank, 2);
  EXPECT_DOUBLE_EQ(v.hung[0].stuck_s, 4.1);  // as published, plus the time since the write
  EXPECT_EQ(v.recorder, 0);
  EXPECT_FALSE(v.me_hung);
  EXPECT_TRUE(JudgeHang(all, 4, 2, 1000.5).me_hung);
  EXPECT_EQ(DescribeHung(v.hung[0]),
            "rank 2 (node 1, host h1) hung in compute of step 7 for 4.1 s");
  // Rank 0 hung: rank 1 records it.
  all[0].launched = 39;
  v = JudgeHang(all, 4, 3, 1000.5);
  ASSERT_EQ(v.hung.size(), 1u);
  EXPECT_EQ(v.hung[0].rank, 0);
  EXPECT_EQ(v.recorder, 1);
}

TEST(JudgeHang, NoVerdictBeforeTheThresholdWithAMissingRankOrWhenAllWaitTogether) {
  // Behind but not yet past its threshold (a slow step): no verdict.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 9), Rank(1, 40, 1.0)}, 2, 0, 1000.5).hung.empty());
  // A stuck rank whose file stopped (its watchdog froze too) ages by the time since the write.
  EXPECT_EQ(JudgeHang({Rank(0, 41, 9), Rank(1, 40, 1.0, 990)}, 2, 0, 1000.5).hung.size(), 1u);
  // A rank without a file: nothing is judged.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 9), Rank(1, 40, 9)}, 3, 0, 1000).hung.empty());
  // Every rank inside the same collective: a network fault, left to the collective timeout.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 99), Rank(1, 41, 99)}, 2, 0, 1000).hung.empty());
  // A rank number outside the world (a stray file): nothing is judged.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 9), Rank(5, 40, 9)}, 2, 0, 1000).hung.empty());
}

TEST(JudgeHang, TwoStuckRanksAreBothNamedAndTheLowestOtherRecords) {
  HangVerdict v =
      JudgeHang({Rank(0, 40, 5), Rank(1, 40, 5), Rank(2, 41, 5), Rank(3, 41, 5)}, 4, 3, 1000);
  ASSERT_EQ(v.hung.size(), 2u);
  EXPECT_EQ(v.hung[0].rank, 0);
  EXPECT_EQ(v.hung[1].rank, 1);
  EXPECT_EQ(v.recorder, 2);
}

TEST(ProgressFile, RoundTripsAndRefusesTornText) {
  RankProgress p = Rank(3, 12345678901ULL, 2.5);
  p.pid = 77;
  const std::string text = ProgressJson(p);
  RankProgress q;
  ASSERT_TRUE(ParseProgress(text, &q));
  EXPECT_EQ(q.rank, 3);
  EXPECT_EQ(q.host, "h1");
  EXPECT_EQ(q.launched, 12345678901ULL);
  EXPECT_EQ(q.stuck_s, 2.5);
  EXPECT_EQ(q.pid, 77);
  EXPECT_FALSE(ParseProgress(text.substr(0, text.size() / 2), &q));
  EXPECT_FALSE(ParseProgress("{\"rank\": 1}", &q));
  EXPECT_FALSE(ParseProgress("", &q));
}

TEST(HangConfig, DefaultsAreAutomaticWithASixtySecondFloorOutsideTheConfigHash) {
  auto a = LoadWith("");
  auto b = LoadWith("[guard]\nhang_timeout_s = 120\nhang_floor_s = 30\n");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->guard.hang_timeout_s, 0);
  EXPECT_EQ(a->guard.hang_floor_s, 60);
  EXPECT_EQ(b->guard.hang_timeout_s, 120);
  EXPECT_EQ(a->ConfigHash(), b->ConfigHash());
  // A short collective timeout with the default floor is no contradiction: nobody set it.
  EXPECT_TRUE(LoadWith("[dist]\ntimeout_s = 5\n").ok());
}

TEST(HangConfig, ContradictoryValuesNameTheKey) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"[guard]\nhang_timeout_s = 10\nhang_floor_s = 30\n",
       "guard.hang_timeout_s = 10.000000 is below guard.hang_floor_s = 30.000000"},
      {"[guard]\nhang_timeout_s = -1\n", "guard.hang_timeout_s must be 0 (automatic)"},
      {"[guard]\nhang_floor_s = 0\n", "guard.hang_floor_s must be >= 1 second"},
      {"[guard]\nhang_floor_s = 700\n",
       "guard.hang_floor_s = 700.000000 is not below "
       "dist.timeout_s = 600"},
      {"[guard]\nhang_timeout_s = 90\n[dist]\ntimeout_s = 60\n",
       "guard.hang_timeout_s = 90.000000 is not below dist.timeout_s = 60"},
  };
  for (const auto& c : cases) {
    auto t = LoadWith(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_TRUE(t.status().IsInvalidArgument()) << c.text;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << c.text << "\n"
                                                                      << t.status().message();
  }
}

TEST(HangFault, StallParsesAndFiresOncePerRun) {
  auto p = ParseFaultPlan("stall@4:2", "");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->faults.size(), 1u);
  EXPECT_EQ(p->faults[0].kind, FaultKind::kStall);
  EXPECT_EQ(p->faults[0].step, 4);
  EXPECT_EQ(p->faults[0].rank, 2);
  EXPECT_STREQ(FaultKindName(FaultKind::kStall), "stall");
  EXPECT_TRUE(FiresOncePerRun(FaultKind::kStall));
  EXPECT_EQ(FaultName(p->faults[0]), "stall@4:2");
}

}  // namespace
}  // namespace ftrain::train
