// The guard's decisions without processes (train/verdicts/guard.h, core/fault_inject.h,
// records/metrics_record.h): [guard] and data.skip validation, the spike rule on a rolling
// median + MAD, the skip budget, FTRAIN_FAULT parsing, a skipped step's metrics line and the
// replica check's verdict (train/verdicts/sdc_verdict.h).
// The end-to-end runs are in tests/guard_run_test.cc.
#include "train/verdicts/guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/fault_inject.h"
#include "records/metrics_record.h"
#include "tiny_config.h"
#include "train/config/train_config.h"
#include "train/verdicts/rollback.h"
#include "train/verdicts/sdc_verdict.h"

namespace ftrain::train {
namespace {

TEST(GuardConfig, DefaultsSkipNonFiniteStepsWithoutSpikeDetection) {
  auto t = LoadWith("");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->guard.policy, GuardPolicy::kSkip);
  EXPECT_EQ(t->guard.spike_window, 0);
  EXPECT_TRUE(t->data.skip.empty());
}

TEST(GuardConfig, SkipListTakesStepsAndRanges) {
  auto t = LoadWith("[data]\nskip = 3,7-9,10\n");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->data.skip, (std::set<int64_t>{3, 7, 8, 9, 10}));
}

TEST(GuardConfig, SdcEveryStepsDefaultsOffAndIsOutsideTheConfigHash) {
  auto a = LoadWith("");
  auto b = LoadWith("[guard]\nsdc_every_steps = 10\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->guard.sdc_every_steps, 0);
  EXPECT_EQ(b->guard.sdc_every_steps, 10);
  EXPECT_EQ(a->ConfigHash(), b->ConfigHash()) << "an operational check: resumes may turn it on";
}

TEST(GuardConfig, BadInputNamesTheKeyAndTheReason) {
  struct Case {
    std::string extra, expect;
  } cases[] = {
      {"[data]\nskip = 11\n", "data.skip: '11' names a step that does not exist"},
      {"[data]\nskip = 0\n", "data.skip: '0' names a step that does not exist"},
      {"[data]\nskip = 5-3\n", "data.skip: '5-3' is not a step or a range"},
      {"[data]\nskip = x\n", "data.skip: 'x'"},
      {"[guard]\npolicy = maybe\n", "guard.policy = 'maybe' is not one of off, skip, rollback"},
      {"[guard]\nmax_rollbacks = 2\n", "guard.max_rollbacks is set but guard.policy = skip"},
      {"[guard]\npolicy = rollback\nmax_rollbacks = -1\n", "guard.max_rollbacks must be in"},
      {"[guard]\npolicy = off\nspike_window = 20\n",
       "guard.spike_window is set but guard.policy = off"},
      {"[guard]\nspike_window = 2\n", "guard.spike_window must be 0 (off) or in [3, 100000]"},
      {"[guard]\nspike_threshold = 0\n", "guard.spike_threshold must be > 0"},
      {"[guard]\nmax_skips = -1\n", "guard.max_skips must be >= 0"},
      {"[guard]\nspike_windw = 5\n", "guard.spike_windw"},
      {"[guard]\nsdc_every_steps = -1\n", "guard.sdc_every_steps must be in [0, 100000000]"},
      {"[guard]\nspike_readmit_steps = 1\n",
       "guard.spike_readmit_steps must be 0 (never re-admit) or in [2, 1000]"},
      {"[guard]\nspike_readmit_steps = 9\n",
       "guard.spike_readmit_within must be in [guard.spike_readmit_steps = 9, 10000]"},
      {"[guard]\nspike_readmit_within = 20000\n", "guard.spike_readmit_within must be in"},
      {"[guard]\npolicy = off\nspike_readmit_steps = 3\n",
       "guard.spike_readmit_steps is set but guard.policy = off"},
  };
  for (const auto& c : cases) {
    auto t = LoadWith(c.extra);
    ASSERT_FALSE(t.ok()) << c.extra;
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument) << c.extra;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos)
        << c.extra << " -> " << t.status().message();
  }
}

TEST(GuardConfig, GuardAndSkipListStayOutOfTheConfigHash) {
  auto a = LoadWith("");
  auto b = LoadWith("[data]\nskip = 4\n[guard]\nspike_window = 10\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ConfigHash(), b->ConfigHash());
}

TEST(GuardConfig, RollbackIsAPolicyWithABudget) {
  auto t = LoadWith("[guard]\npolicy = rollback\nmax_rollbacks = 2\n");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->guard.policy, GuardPolicy::kRollback);
  EXPECT_EQ(t->guard.max_rollbacks, 2);
  EXPECT_TRUE(StepGuard(t->guard, {}).nonfinite_on());
}

// Pending rollbacks (no applied line after them; every version 1 file): a start that resumed
// step R after rollbacks at steps K skips R+1 .. max K, as the trainer always did, and records
// that range; the records it resumed past are in its checkpoint already.
TEST(Rollback, APendingRollbackSkipsFromTheResumedStepAndIsRecordedAsApplied) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  const std::vector<RollbackRecord> one = {{50, "spike", 20}};
  EXPECT_EQ(PlanRollbackSkips(one, 40, 100).ranges, (Ranges{{41, 50}}));
  EXPECT_EQ(PlanRollbackSkips(one, 45, 100).ranges, (Ranges{{46, 50}})) << "resumed inside";
  EXPECT_EQ(PlanRollbackSkips(one, 50, 100).ranges, Ranges{});
  EXPECT_EQ(PlanRollbackSkips(one, 60, 100).ranges, Ranges{}) << "resumed past it";
  EXPECT_FALSE(PlanRollbackSkips(one, 60, 100).must_record());
  EXPECT_EQ(PlanRollbackSkips({}, 0, 100).ranges, Ranges{});
  const RollbackSkips p = PlanRollbackSkips(one, 40, 100);
  ASSERT_TRUE(p.must_record());
  EXPECT_EQ(p.to_record.step, 50);
  EXPECT_EQ(p.to_record.first, 41);
  EXPECT_EQ(p.to_record.last, 50);
  EXPECT_EQ(p.to_record.resumed_from, 40);
  RollbackRecord v1a{50, "spike", 20}, v1b{80, "nonfinite", 60};
  v1a.version = v1b.version = 1;
  EXPECT_EQ(PlanRollbackSkips({v1a, v1b}, 70, 100).ranges, (Ranges{{71, 80}}));
  EXPECT_EQ(PlanRollbackSkips({v1a, v1b}, 30, 100).ranges, (Ranges{{31, 80}}))
      << "the old rule for the old form: resumed + 1 to the newest rollback";
  StepGuard g(GuardSection{}, {3});
  g.AddRolledBack(41, 43);
  EXPECT_TRUE(g.Listed(3));
  EXPECT_STREQ(g.ListedReason(3), "listed");
  EXPECT_TRUE(g.Listed(42));
  EXPECT_STREQ(g.ListedReason(42), "rollback");
  EXPECT_FALSE(g.Listed(44));
  ASSERT_TRUE(g.Record(42, std::nan(""), "rollback").ok()) << "not counted against max_skips";
}

// Hole 10 of issue 44: the first start after a rollback at 50 resumed step 40 and skipped
// 41-50 (its applied line). Every later start skips exactly that, whatever it resumes: from an
// older checkpoint (20: steps 21-40 are trained again, as the recorded run trained them; the
// old rule skipped 21-50), from inside the range, or from after it.
TEST(Rollback, RecordedRangesAreReplayedExactlyWhateverALaterStartResumes) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  RollbackRecord applied;
  applied.kind = records::RollbackKind::kApplied;
  applied.step = 50;
  applied.first = 41;
  applied.last = 50;
  applied.resumed_from = 40;
  const std::vector<RollbackRecord> log = {{50, "spike", 20}, applied};
  EXPECT_EQ(PlanRollbackSkips(log, 20, 100).ranges, (Ranges{{41, 50}})) << "older checkpoint";
  EXPECT_EQ(PlanRollbackSkips(log, 0, 100).ranges, (Ranges{{41, 50}})) << "fresh start";
  EXPECT_EQ(PlanRollbackSkips(log, 40, 100).ranges, (Ranges{{41, 50}}));
  EXPECT_EQ(PlanRollbackSkips(log, 45, 100).ranges, (Ranges{{46, 50}})) << "inside it";
  EXPECT_EQ(PlanRollbackSkips(log, 55, 100).ranges, Ranges{}) << "after it";
  for (int64_t r : {0, 20, 45, 55}) {
    EXPECT_FALSE(PlanRollbackSkips(log, r, 100).must_record()) << "answered: nothing to add";
  }
  // A second rollback at 70, met by a start that resumed 60. Before any start applies it, a
  // start from 30 skips 31-70 (pending: resumed + 1 to 70, merged with 41-50) and records
  // 31-70. Here its restart resumed 45 instead and recorded 46-70: overlapping records merge,
  // and a start from step 10 replays both.
  RollbackRecord second = applied;
  second.step = 70;
  second.first = 46;
  second.last = 70;
  second.resumed_from = 45;
  std::vector<RollbackRecord> two = log;
  two.push_back({70, "nonfinite", 60});
  EXPECT_EQ(PlanRollbackSkips(two, 30, 100).ranges, (Ranges{{31, 70}}));
  EXPECT_EQ(PlanRollbackSkips(two, 30, 100).to_record.first, 31);
  EXPECT_EQ(PlanRollbackSkips(two, 30, 100).to_record.last, 70);
  two.push_back(second);
  EXPECT_EQ(PlanRollbackSkips(two, 10, 100).ranges, (Ranges{{41, 70}}));
  EXPECT_EQ(PlanRollbackSkips(two, 60, 100).ranges, (Ranges{{61, 70}}));
  // A rollback after an applied line, below the applied range, is pending again on its own.
  std::vector<RollbackRecord> low = log;
  low.push_back({35, "nonfinite", 30});
  const RollbackSkips l = PlanRollbackSkips(low, 30, 100);
  EXPECT_EQ(l.ranges, (Ranges{{31, 35}, {41, 50}}));
  EXPECT_EQ(l.to_record.first, 31);
  EXPECT_EQ(l.to_record.last, 35);
}

// Nothing is skipped past train.steps: a recorded range, or a pending one, is clipped at the
// run's end (a run restarted with fewer steps), and nothing is recorded past it.
TEST(Rollback, SkipRangesAreBoundedByTheRun) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  RollbackRecord applied;
  applied.kind = records::RollbackKind::kApplied;
  applied.step = 50;
  applied.first = 41;
  applied.last = 50;
  EXPECT_EQ(PlanRollbackSkips({{50, "spike", 20}, applied}, 20, 45).ranges, (Ranges{{41, 45}}));
  EXPECT_EQ(PlanRollbackSkips({{50, "spike", 20}, applied}, 20, 40).ranges, Ranges{});
  const RollbackSkips p = PlanRollbackSkips({{50, "spike", 20}}, 40, 44);
  EXPECT_EQ(p.ranges, (Ranges{{41, 44}}));
  EXPECT_EQ(p.to_record.last, 44);
  EXPECT_FALSE(PlanRollbackSkips({{50, "spike", 20}}, 44, 44).must_record());
}

// Applied lines are no rollbacks: the budget and the controller's count see only the events.
TEST(Rollback, AppliedLinesCountNeitherAgainstTheBudgetNorAsRollbacks) {
  GuardSection g;
  g.policy = GuardPolicy::kRollback;
  g.max_rollbacks = 1;
  RollbackRecord applied;
  applied.kind = records::RollbackKind::kApplied;
  applied.step = 10;
  applied.first = 1;
  applied.last = 10;
  EXPECT_TRUE(CheckRollbackBudget({applied, applied}, 30, g).ok());
  EXPECT_FALSE(CheckRollbackBudget({{10, "spike", 0}, applied}, 30, g).ok());
  EXPECT_EQ(records::CountRollbacks({{10, "spike", 0}, applied, {20, "spike", 0}}), 2);
}

TEST(Rollback, TheBudgetCountsRollbacksWithinTheWindowAndNamesThem) {
  GuardSection g;
  g.policy = GuardPolicy::kRollback;
  g.max_rollbacks = 2;
  g.max_skips_window = 100;
  EXPECT_TRUE(CheckRollbackBudget({}, 10, g).ok());
  EXPECT_TRUE(CheckRollbackBudget({{10, "spike", 0}}, 30, g).ok());
  const Status s = CheckRollbackBudget({{10, "spike", 0}, {30, "nonfinite", 0}}, 60, g);
  ASSERT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("rollback number 3 within the last 100 steps (earlier: 10,30"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(CheckRollbackBudget({{10, "spike", 0}, {30, "nonfinite", 0}}, 130, g).ok())
      << "step 10 is out of the window";
  EXPECT_TRUE(CheckRollbackBudget({{10, "spike", 0}, {60, "spike", 0}}, 60, g).ok())
      << "a record of this very step (a rank that read it late) is not an earlier one";
}

TEST(MedianOf, OddEvenAndEmpty) {
  EXPECT_EQ(MedianOf({3, 1, 2}), 2);
  EXPECT_EQ(MedianOf({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(MedianOf({}), 0);
}

GuardSection Spikes(int64_t window, double threshold) {
  GuardSection g;
  g.spike_window = window;
  g.spike_threshold = threshold;
  g.max_skips = 100;
  return g;
}

TEST(StepGuard, ASpikeIsFarAboveTheMedianInMadsOnceTheWindowIsFull) {
  StepGuard g(Spikes(5, 6), {});
  const double norms[] = {1.0, 1.1, 0.9, 1.05, 0.95};
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(g.IsSpike(100)) << "the window is not full yet, step " << i;
    ASSERT_TRUE(g.Record(i + 1, norms[i], "").ok());
  }
  // median 1.0, MAD 0.05 -> scale 0.0741, limit 1.0 + 6 x 0.0741 = 1.445.
  EXPECT_FALSE(g.IsSpike(1.44));
  EXPECT_TRUE(g.IsSpike(1.45));
  EXPECT_FALSE(g.IsSpike(0.01)) << "only upward spikes";
  // A skipped step's norm does not enter the window; an applied one pushes the oldest out.
  ASSERT_TRUE(g.Record(6, 50, "spike").ok());
  EXPECT_EQ(g.norms(), (std::vector<double>{1.0, 1.1, 0.9, 1.05, 0.95}));
  ASSERT_TRUE(g.Record(7, 1.2, "").ok());
  EXPECT_EQ(g.norms(), (std::vector<double>{1.1, 0.9, 1.05, 0.95, 1.2}));
}

TEST(StepGuard, AFlatWindowFloorsTheMadAtOnePercentOfTheMedian) {
  StepGuard g(Spikes(3, 6), {});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(g.Record(i + 1, 2.0, "").ok());
  EXPECT_FALSE(g.IsSpike(2.11));  // limit 2 + 6 x 0.02 = 2.12
  EXPECT_TRUE(g.IsSpike(2.13));
}

TEST(StepGuard, SpikeDetectionOffOrPolicyOffNeverFires) {
  StepGuard off(Spikes(0, 6), {});
  GuardSection p = Spikes(3, 6);
  p.policy = GuardPolicy::kOff;
  StepGuard policy_off(p, {});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(off.Record(i + 1, 1.0, "").ok());
    ASSERT_TRUE(policy_off.Record(i + 1, 1.0, "").ok());
  }
  EXPECT_FALSE(off.IsSpike(1e9));
  EXPECT_FALSE(policy_off.IsSpike(1e9));
  EXPECT_FALSE(policy_off.nonfinite_on());
  EXPECT_TRUE(off.nonfinite_on());
}

TEST(StepGuard, TheBudgetEndsTheRunNamingTheStepsAndListedStepsDoNotCount) {
  GuardSection c;
  c.max_skips = 2;
  c.max_skips_window = 10;
  StepGuard g(c, {4});
  EXPECT_TRUE(g.Listed(4));
  EXPECT_FALSE(g.Listed(5));
  ASSERT_TRUE(g.Record(4, std::nan(""), "listed").ok());
  ASSERT_TRUE(g.Record(5, std::nan(""), "nonfinite").ok());
  ASSERT_TRUE(g.Record(8, 99, "spike").ok());
  ASSERT_TRUE(g.Record(16, 99, "spike").ok()) << "step 5 has left the window of 10";
  Status s = g.Record(17, std::nan(""), "nonfinite");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);  // exit 2: the job is not restarted
  EXPECT_NE(s.message().find("3 steps skipped within the last 10 (steps 8,16,17"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(g.skipped().size(), 5u);
}

TEST(StepGuard, RestoreBringsBackTheWindowAndTheSkips) {
  StepGuard g(Spikes(3, 6), {});
  g.Restore({1, 2, 3, 4}, {{2, "nonfinite"}});
  EXPECT_EQ(g.norms(), (std::vector<double>{2, 3, 4}));
  ASSERT_EQ(g.skipped().size(), 1u);
  EXPECT_EQ(g.ReasonFor(std::nan("")), "nonfinite");
  EXPECT_EQ(g.ReasonFor(5.0), "spike");
}

TEST(GuardConfig, ReadmissionDefaultsToFourOfEightAndZeroTurnsItOff) {
  auto t = LoadWith("[guard]\nspike_window = 20\n");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->guard.spike_readmit_steps, 4);
  EXPECT_EQ(t->guard.spike_readmit_within, 8);
  auto off = LoadWith("[guard]\nspike_window = 20\nspike_readmit_steps = 0\n");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(off->guard.spike_readmit_steps, 0);
}

// The trainer's use of the guard, step by step: the engine asks IsSpike, the step is skipped
// or applied, Record takes the outcome. Returns every step's outcome ("" applied) and the
// first error (the skip budget).
struct Replay {
  std::vector<std::string> outcome;
  std::vector<int64_t> readmitted;  // steps applied as a re-admitted new level
  Status status = Status::Ok();
};
Replay Drive(StepGuard& g, int64_t first_step, const std::vector<double>& norms) {
  Replay r;
  for (size_t i = 0; i < norms.size(); ++i) {
    const int64_t step = first_step + static_cast<int64_t>(i);
    const std::string skipped = g.IsSpike(norms[i]) ? g.ReasonFor(norms[i]) : "";
    r.outcome.push_back(skipped);
    r.status = g.Record(step, norms[i], skipped);
    if (g.readmitted()) r.readmitted.push_back(step);
    if (!r.status.ok()) break;
  }
  return r;
}

// Norms around `level` with a deterministic +-1 % wobble.
std::vector<double> Level(double level, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(level * (1 + 0.01 * ((i % 3) - 1)));
  return out;
}

GuardSection Readmitting() {
  GuardSection g;  // the defaults: max_skips 5 per 100, re-admission 4 of 8
  g.spike_window = 20;
  return g;
}

// Issue 44, hole 9: a sustained +12 % shift (the end of warm-up, a data-mix stage) once skipped
// every step (a skipped norm never entered the window) until the skip budget ended the run.
TEST(StepGuard, ASustainedLevelShiftIsReadmittedAfterKStepsAndTheRunContinues) {
  StepGuard g(Readmitting(), {});
  ASSERT_TRUE(Drive(g, 1, Level(1.0, 20)).status.ok());
  ASSERT_TRUE(g.IsSpike(1.12)) << "the new level is over the old window's limit";
  Replay r = Drive(g, 21, Level(1.12, 60));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.outcome.size(), 60u);
  // Three suspects are skipped, the fourth agrees with them and is applied.
  EXPECT_EQ(r.outcome[0], "spike");
  EXPECT_EQ(r.outcome[1], "spike");
  EXPECT_EQ(r.outcome[2], "spike");
  EXPECT_EQ(r.readmitted, (std::vector<int64_t>{24}));
  for (size_t i = 3; i < r.outcome.size(); ++i) EXPECT_EQ(r.outcome[i], "") << "step " << 21 + i;
  EXPECT_EQ(g.skipped().size(), 3u);
  // The window holds the new level only, and detection is back: a spike on it is skipped.
  for (double x : g.norms()) EXPECT_NEAR(x, 1.12, 0.02);
  EXPECT_EQ(g.norms().size(), 20u);
  EXPECT_TRUE(g.IsSpike(11.2));
  EXPECT_FALSE(g.IsSpike(1.15));
}

// What the re-admission must not let through: a lone spike, spikes of different sizes, and
// fewer agreeing suspects than spike_readmit_steps within spike_readmit_within steps.
TEST(StepGuard, AnIsolatedSpikeIsStillSkipped) {
  GuardSection c = Readmitting();
  c.max_skips = 100;
  StepGuard g(c, {});
  ASSERT_TRUE(Drive(g, 1, Level(1.0, 20)).status.ok());
  std::vector<double> norms = Level(1.0, 40);
  norms[2] = 10;                                 // a lone spike
  norms[10] = 3, norms[11] = 9, norms[12] = 27;  // a burst that grows: no level
  norms[13] = 81;
  norms[20] = 5, norms[21] = 5.01, norms[22] = 4.99;  // three alike: K is 4
  norms[30] = 7, norms[35] = 7, norms[38] = 7;        // spread over more than 8 steps...
  Replay r = Drive(g, 21, norms);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_TRUE(r.readmitted.empty());
  for (size_t i = 0; i < norms.size(); ++i) {
    EXPECT_EQ(r.outcome[i], norms[i] > 1.5 ? "spike" : "") << "step " << 21 + i;
  }
  for (double x : g.norms()) EXPECT_LT(x, 1.5) << "no spike entered the window";
  // ...but a fourth 7 within 8 steps of three others is a level: steps 56, 59, 61 and 62.
  Replay more = Drive(g, 61, {7, 7});
  EXPECT_EQ(more.outcome, (std::vector<std::string>{"spike", ""}));
  EXPECT_EQ(more.readmitted, (std::vector<int64_t>{62}));
}

// The recent steps decide later steps, so a resume restores them from the checkpoint: a run
// saved in the middle of a shift decides every later step as the one that was not interrupted.
// A checkpoint from before re-admission (no recent steps) still resumes: the shift is
// re-admitted spike_readmit_steps suspects after the resume instead.
TEST(StepGuard, ASaveAndRestoreInTheMiddleOfAShiftDecidesLikeTheUninterruptedRun) {
  std::vector<double> norms = Level(1.0, 20);
  for (double x : Level(1.12, 30)) norms.push_back(x);
  norms[45] = 20;  // a spike on the new level, once the window is full again
  GuardSection c = Readmitting();
  c.max_skips = 10;  // the old checkpoint below skips six
  StepGuard whole(c, {});
  const Replay a = Drive(whole, 1, norms);
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  EXPECT_EQ(a.outcome[45], "spike");
  EXPECT_EQ(a.readmitted, (std::vector<int64_t>{24}));
  for (size_t cut : {21u, 22u, 23u, 24u, 30u}) {
    StepGuard first(c, {});
    const Replay head = Drive(first, 1, {norms.begin(), norms.begin() + cut});
    ASSERT_TRUE(head.status.ok());
    StepGuard resumed(c, {});
    resumed.Restore(first.norms(), first.skipped(), first.recent());
    const Replay tail =
        Drive(resumed, static_cast<int64_t>(cut) + 1, {norms.begin() + cut, norms.end()});
    ASSERT_TRUE(tail.status.ok()) << tail.status.message();
    std::vector<std::string> joined = head.outcome;
    joined.insert(joined.end(), tail.outcome.begin(), tail.outcome.end());
    EXPECT_EQ(joined, a.outcome) << "saved after step " << cut;
    EXPECT_EQ(resumed.norms(), whole.norms()) << "saved after step " << cut;
    EXPECT_EQ(resumed.recent(), whole.recent()) << "saved after step " << cut;
    EXPECT_EQ(resumed.skipped(), whole.skipped()) << "saved after step " << cut;
  }
  // An old checkpoint saved after two suspects has no recent steps: four more are needed.
  StepGuard first(c, {});
  ASSERT_TRUE(Drive(first, 1, {norms.begin(), norms.begin() + 22}).status.ok());
  StepGuard old(c, {});
  old.Restore(first.norms(), first.skipped());
  const Replay tail = Drive(old, 23, {norms.begin() + 22, norms.end()});
  ASSERT_TRUE(tail.status.ok()) << tail.status.message();
  EXPECT_EQ(tail.readmitted, (std::vector<int64_t>{26}));
}

// guard.policy = rollback never keeps a suspect in a snapshot: every start resumes from before
// it. The rollback records carry the norms, so each start counts the steps it rolls back over
// as suspects, and the fourth step of a new level is applied instead of a fourth rollback
// (which guard.max_rollbacks = 3 would turn into the end of the run).
TEST(Rollback, ASustainedShiftIsReadmittedAfterTheRollbacksItsSuspectsCaused) {
  GuardSection c = Readmitting();
  c.policy = GuardPolicy::kRollback;
  StepGuard at20(c, {});  // the snapshot every start resumes: the window full at the old level
  ASSERT_TRUE(Drive(at20, 1, Level(1.0, 20)).status.ok());
  const std::vector<double> level = Level(1.12, 4);
  std::vector<RollbackRecord> records;
  for (int k = 0; k < 4; ++k) {
    StepGuard g(c, {});
    g.Restore(at20.norms(), at20.skipped(), at20.recent());
    g.AddSuspects(RolledBackSuspects(records, 20)[20]);
    for (const auto& [first, last] : PlanRollbackSkips(records, 20, 100).ranges) {
      g.AddRolledBack(first, last);
    }
    const int64_t step = 21 + k;
    for (int64_t s = 21; s < step; ++s) {
      ASSERT_TRUE(g.Listed(s));
      ASSERT_TRUE(g.Record(s, std::nan(""), "rollback").ok());
    }
    if (k < 3) {
      EXPECT_TRUE(g.IsSpike(level[k])) << "step " << step;
      ASSERT_TRUE(CheckRollbackBudget(records, step, c).ok()) << "step " << step;
      records.push_back({step, "spike", 20, level[k]});
    } else {
      EXPECT_FALSE(g.IsSpike(level[k])) << "it agrees with the three rolled back: a new level";
      ASSERT_TRUE(g.Record(step, level[k], "").ok());
      EXPECT_TRUE(g.readmitted());
      EXPECT_EQ(g.norms().size(), 4u) << "the window restarts from the new level";
    }
  }
  // Only spike records later than the resumed step, in step order, with a recorded norm.
  // Only spike records later than the resumed step, in step order, with a recorded norm; all
  // pending (no applied line): taken right after the resumed step.
  using Suspects = std::map<int64_t, std::vector<double>>;
  EXPECT_EQ(RolledBackSuspects({{30, "spike", 20, 1.5},
                                {25, "spike", 20, 1.4},
                                {27, "nonfinite", 20, -1},
                                {28, "spike", 20},
                                {19, "spike", 10, 9}},
                               20),
            (Suspects{{20, {1.4, 1.5}}}));
  // Applied (issue 44, hole 10): the start that applied the spike at 30 had resumed step 25 and
  // took its suspect there. A start from step 10 takes it after step 25, as the recorded run
  // did; a start from 25 at once; a start from 27 has it in its checkpoint already.
  RollbackRecord applied;
  applied.kind = records::RollbackKind::kApplied;
  applied.step = 30;
  applied.first = 26;
  applied.last = 30;
  applied.resumed_from = 25;
  const std::vector<RollbackRecord> log = {{30, "spike", 20, 1.5}, applied};
  EXPECT_EQ(RolledBackSuspects(log, 10), (Suspects{{25, {1.5}}}));
  EXPECT_EQ(RolledBackSuspects(log, 25), (Suspects{{25, {1.5}}}));
  EXPECT_EQ(RolledBackSuspects(log, 27), Suspects{});
  std::vector<RollbackRecord> more = log;
  more.push_back({40, "spike", 35, 2.5});  // pending, met after a resume at 35
  EXPECT_EQ(RolledBackSuspects(more, 35), (Suspects{{35, {2.5}}}));
  EXPECT_EQ(RolledBackSuspects(more, 10), (Suspects{{10, {2.5}}, {25, {1.5}}}));
}

TEST(FaultPlan, ParsesKindsStepsRanksAndFactor) {
  auto p = ParseFaultPlan("nan_loss@3,nan_grad@5:1,spike@7:2", "50");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->faults.size(), 3u);
  EXPECT_EQ(p->spike_factor, 50);
  EXPECT_EQ(p->At(3, 0).size(), 1u);  // no rank: every rank
  EXPECT_EQ(p->At(3, 5).size(), 1u);
  EXPECT_EQ(p->At(5, 0).size(), 0u);
  ASSERT_EQ(p->At(5, 1).size(), 1u);
  EXPECT_EQ(p->At(5, 1)[0].kind, FaultKind::kNanGrad);
  EXPECT_EQ(p->At(7, 2)[0].kind, FaultKind::kSpike);
  EXPECT_TRUE(p->At(4, 0).empty());
  auto empty = ParseFaultPlan("", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->spike_factor, 1000);
}

TEST(FaultPlan, ParsesBitflip) {
  auto p = ParseFaultPlan("bitflip@4:3", "");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->At(4, 3).size(), 1u);
  EXPECT_EQ(p->At(4, 3)[0].kind, FaultKind::kBitflip);
  EXPECT_STREQ(FaultKindName(FaultKind::kBitflip), "bitflip");
  EXPECT_TRUE(p->At(4, 2).empty());
}

// A fault that ends the process fires once per run: what RUN/.faults_fired lists is dropped at
// the next start; numeric faults stay (a replay of their step meets them again, alike).
TEST(FaultPlan, AFiredBitflipIsDroppedAtTheNextStartNumericFaultsStay) {
  const std::string path = ::testing::TempDir() + "/faults_fired_test";
  std::remove(path.c_str());
  auto p = ParseFaultPlan("bitflip@4:3,bitflip@6,nan_loss@4:3", "");
  ASSERT_TRUE(p.ok()) << p.status().message();
  DropFiredFaults(path, &*p);  // no file yet: nothing fired
  EXPECT_EQ(p->faults.size(), 3u);
  ASSERT_TRUE(RecordFiredFault(path, p->At(4, 3)[0]).ok());
  ASSERT_TRUE(RecordFiredFault(path, p->At(4, 3)[1]).ok());  // a numeric fault: never dropped
  DropFiredFaults(path, &*p);
  ASSERT_EQ(p->faults.size(), 2u);
  EXPECT_EQ(FaultName(p->faults[0]), "bitflip@6:*");
  EXPECT_EQ(FaultName(p->faults[1]), "nan_loss@4:3");
  EXPECT_TRUE(p->At(4, 3)[0].kind == FaultKind::kNanLoss);
  std::remove(path.c_str());
}

TEST(FaultPlan, BadSpecsNameTheVariableAndTheItem) {
  for (const char* spec :
       {"nan", "nan_loss", "nan_loss@0", "nan_loss@x", "bitflp@3", "spike@3:-1"}) {
    auto p = ParseFaultPlan(spec, "");
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_NE(p.status().message().find("FTRAIN_FAULT"), std::string::npos) << spec;
  }
  EXPECT_FALSE(ParseFaultPlan("spike@3", "0").ok());
  EXPECT_FALSE(ParseFaultPlan("spike@3", "abc").ok());
}

TEST(SkippedStepRecord, NonFiniteValuesAreNullAndTheReasonRoundTrips) {
  records::StepMetrics m;
  m.step = 4;
  m.loss = std::nanf("");
  m.grad_norm = std::nan("");
  m.skipped = "nonfinite";
  m.step_time_s = 0.5;
  m.unix_time = 100;
  const std::string line = records::FormatMetricsLine(m);
  const nlohmann::json j = nlohmann::json::parse(line);  // valid JSON: no bare nan
  EXPECT_TRUE(j["loss"].is_null()) << line;
  EXPECT_TRUE(j["grad_norm"].is_null()) << line;
  EXPECT_EQ(j["skipped"], "nonfinite");
  auto back = records::ParseMetricsRecord(j, "x:1", nullptr);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(std::isnan(back->loss));
  EXPECT_EQ(back->skipped, "nonfinite");
  m.loss = 2.5f;
  m.skipped.clear();
  EXPECT_EQ(nlohmann::json::parse(records::FormatMetricsLine(m)).count("skipped"), 0u);
}

// Hashes of (rank, shard, node, hash) rows; hosts h0, h1, ... by node for the tests.
std::vector<ReplicaHash> Rows(std::initializer_list<ReplicaHash> r) { return r; }
const std::vector<std::string> kHosts = {"h0", "h0", "h1", "h1", "h2", "h2", "h3", "h3"};

// Issue 44, hole 7: the check runs every N steps and before every snapshot a restart could
// take, disk or memory, so a memory snapshot between two periodic checks (step 8 with the
// check every 6) is checked before it is taken; with the check off nothing runs.
TEST(SdcVerdict, TheCheckRunsBeforeEverySnapshotAndEveryNSteps) {
  EXPECT_TRUE(SdcCheckDue(6, 6, false));
  EXPECT_TRUE(SdcCheckDue(12, 6, false));
  EXPECT_FALSE(SdcCheckDue(8, 6, false)) << "no snapshot, not a multiple: no check";
  EXPECT_TRUE(SdcCheckDue(8, 6, true)) << "a memory (or disk) snapshot follows";
  EXPECT_TRUE(SdcCheckDue(7, 100, true)) << "a time-based snapshot at any step";
  EXPECT_FALSE(SdcCheckDue(8, 0, true)) << "guard.sdc_every_steps = 0: off";
}

TEST(SdcVerdict, AgreeingReplicasAreOk) {
  const SdcVerdict v =
      JudgeReplicas(Rows({{0, 0, 0, 7}, {1, 1, 0, 9}, {2, 0, 1, 7}, {3, 1, 1, 9}}), kHosts);
  EXPECT_TRUE(v.ok);
  EXPECT_TRUE(v.suspects.empty());
  EXPECT_EQ(v.replicas, 2);
  EXPECT_TRUE(v.summary.empty());
}

TEST(SdcVerdict, MajorityNamesTheMinorityRankAndItsHost) {
  // no_shard over 4 ranks on 2 nodes: rank 2 differs.
  const SdcVerdict v =
      JudgeReplicas(Rows({{0, 0, 0, 7}, {1, 0, 0, 7}, {2, 0, 1, 8}, {3, 0, 1, 7}}), kHosts);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(v.by_majority);
  ASSERT_EQ(v.suspects.size(), 1u);
  EXPECT_EQ(v.suspects[0].rank, 2);
  EXPECT_EQ(v.suspects[0].node, 1);
  EXPECT_EQ(v.suspects[0].host, "h1");
  EXPECT_EQ(v.replicas, 4);
  EXPECT_NE(v.summary.find("rank 2 (node 1, host h1) disagrees with the majority of 4"),
            std::string::npos)
      << v.summary;
}

TEST(SdcVerdict, TwoReplicasNameBothAsSuspects) {
  // hybrid_shard, 2 nodes x 2: shard 1's replicas (ranks 1 and 3) differ; shard 0 agrees.
  const SdcVerdict v =
      JudgeReplicas(Rows({{3, 1, 1, 5}, {0, 0, 0, 7}, {1, 1, 0, 9}, {2, 0, 1, 7}}), kHosts);
  EXPECT_FALSE(v.ok);
  EXPECT_FALSE(v.by_majority);
  ASSERT_EQ(v.suspects.size(), 2u);
  EXPECT_EQ(v.suspects[0].rank, 1);
  EXPECT_EQ(v.suspects[0].host, "h0");
  EXPECT_EQ(v.suspects[1].rank, 3);
  EXPECT_EQ(v.suspects[1].host, "h1");
  EXPECT_EQ(v.suspects[1].shard, 1);
  EXPECT_NE(v.summary.find("cannot be told from 2 replicas of shard 1"), std::string::npos)
      << v.summary;
}

TEST(SdcVerdict, NoStrictMajorityNamesEveryReplicaOfThatShard) {
  // 4 replicas split 2-2: nobody can be outvoted; 3 replicas all different likewise.
  const SdcVerdict even =
      JudgeReplicas(Rows({{0, 0, 0, 1}, {1, 0, 0, 1}, {2, 0, 1, 2}, {3, 0, 1, 2}}), kHosts);
  EXPECT_FALSE(even.ok);
  EXPECT_FALSE(even.by_majority);
  EXPECT_EQ(even.suspects.size(), 4u);
  const SdcVerdict three = JudgeReplicas(Rows({{0, 0, 0, 1}, {2, 0, 1, 2}, {4, 0, 2, 3}}), kHosts);
  EXPECT_EQ(three.suspects.size(), 3u);
  EXPECT_EQ(three.suspects[2].host, "h2");
}

TEST(SdcVerdict, SeveralShardsAndUnknownHosts) {
  // Two shards each with one bad replica out of three; a rank beyond the host list is "?".
  const SdcVerdict v = JudgeReplicas(
      Rows({{0, 0, 0, 1}, {1, 1, 0, 2}, {2, 0, 1, 1}, {3, 1, 1, 2}, {4, 0, 2, 6}, {9, 1, 2, 4}}),
      kHosts);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(v.by_majority);
  ASSERT_EQ(v.suspects.size(), 2u);
  EXPECT_EQ(v.suspects[0].rank, 4);
  EXPECT_EQ(v.suspects[0].host, "h2");
  EXPECT_EQ(v.suspects[1].rank, 9);
  EXPECT_EQ(v.suspects[1].host, "?");
}

TEST(SdcVerdict, ASingleHolderIsNotCompared) {
  // full_shard-like input: every shard has one holder; nothing to compare, nothing named.
  const SdcVerdict v = JudgeReplicas(Rows({{0, 0, 0, 1}, {1, 1, 0, 2}}), kHosts);
  EXPECT_TRUE(v.ok);
  EXPECT_EQ(v.replicas, 1);
}

}  // namespace
}  // namespace ftrain::train
