// The job controller under deterministic simulation (orch/sim.h): thousands of seeds, each a
// random fault schedule over a simulated run driving the real JobPolicy, must keep every
// invariant; a seed replays exactly; and each invariant's checker is shown to fail on a
// hand-made run that breaks it. kKnownBroken names the invariants today's policy is known to
// break (fixed on other branches): the campaign prints them with a seed to replay, and fails
// on any other.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "orch/sim.h"

namespace ftrain::orch {
namespace {

// Empty this once the fix below is merged: (d), found by this simulator, is fixed but for one
// case.
// Empty since the room question is asked again while sinfo is silent (room.ask_again): every
// invariant holds in every seed of the campaign.
const std::set<std::string> kKnownBroken = {};

constexpr uint64_t kSeeds = 2000;
constexpr double kDays = 1;

// The last lines of a seed's event trace (observation -> rule -> actions), replayed.
std::string TraceTail(uint64_t seed) {
  SimOptions o;
  o.seed = seed;
  o.days = kDays;
  o.trace = true;
  const SimFacts f = RunSeed(o);
  std::string s;
  for (size_t i = f.trace.size() > 60 ? f.trace.size() - 60 : 0; i < f.trace.size(); ++i) {
    s += "  " + f.trace[i] + "\n";
  }
  return s;
}

TEST(OrchSim, ASeedReplaysExactly) {
  for (uint64_t seed : {1, 7, 12345}) {
    SimOptions o;
    o.seed = seed;
    o.days = kDays;
    o.trace = true;
    const SimFacts a = RunSeed(o), b = RunSeed(o);
    EXPECT_EQ(a.trace, b.trace) << "seed " << seed;
    EXPECT_EQ(a.decisions, b.decisions);
    EXPECT_EQ(a.end_t, b.end_t);
    EXPECT_EQ(a.steps_done, b.steps_done);
    o.trace = false;  // tracing changes nothing of the run
    const SimFacts c = RunSeed(o);
    EXPECT_EQ(c.decisions, a.decisions);
    EXPECT_EQ(c.end_t, a.end_t);
    EXPECT_FALSE(a.trace.empty());
  }
}

TEST(OrchSim, CampaignKeepsEveryInvariant) {
  std::map<std::string, std::pair<int, uint64_t>> broken;  // name -> count, first seed
  int finished = 0, faults = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    SimOptions o;
    o.seed = seed;
    o.days = kDays;
    const SimFacts f = RunSeed(o);
    finished += f.outcome == SimOutcome::kFinished;
    faults += static_cast<int>(f.faults.size());
    for (const auto& v : CheckInvariants(f)) {
      auto& b = broken[v.invariant];
      if (b.first++ == 0) b.second = seed;
      if (b.first == 1 && !kKnownBroken.count(v.invariant)) {
        ADD_FAILURE() << "seed " << seed << ": " << v.invariant << ": " << v.detail << "\n"
                      << TraceTail(seed) << "replay: ftrain sim --seed " << seed << " --days "
                      << kDays << " --trace";
      }
    }
  }
  std::cout << kSeeds << " seeds, " << faults << " faults, " << finished << " finished\n";
  for (const auto& name : kKnownBroken) {
    auto it = broken.find(name);
    if (it == broken.end()) {
      std::cout << "known broken " << name << ": held in these seeds (fixed? then drop it)\n";
    } else {
      std::cout << "known broken " << name << ": " << it->second.first << " seeds; replay: "
                << "ftrain sim --seed " << it->second.second << " --days " << kDays << " --trace\n";
    }
  }
  EXPECT_GT(finished, static_cast<int>(kSeeds / 2)) << "most runs must finish";
}

// A run that keeps every invariant; each test below breaks one thing of it.
SimFacts Clean() {
  SimFacts f;
  f.outcome = SimOutcome::kFinished;
  f.steps_done = f.total_steps = 1000;
  f.injob_budget = 4;
  f.rollback_budget = 9;
  f.requeue_budget = 4;
  f.ckpt_interval_s = 600;
  f.recovery_budget_s = 1000;
  SimStart s;
  s.exits = 1;
  f.starts = {s};
  SimLaunch l;
  l.rc = 0;
  l.stopped = true;
  f.launches = {l};
  return f;
}

void ExpectOnly(const SimFacts& f, const std::string& name) {
  const auto v = CheckInvariants(f);
  ASSERT_EQ(v.size(), 1u) << (v.empty() ? "none failed" : v[0].invariant + ", ...");
  EXPECT_EQ(v[0].invariant, name) << v[0].detail;
}

TEST(OrchSimCheck, ACleanRunKeepsEveryInvariant) { EXPECT_TRUE(CheckInvariants(Clean()).empty()); }

TEST(OrchSimCheck, NoFalseComplete) {
  SimFacts f = Clean();
  f.outcome = SimOutcome::kCompleted;
  f.steps_done = 400;
  ExpectOnly(f, "no_false_complete");
  f.cancelled = true;  // a user's scancel: fine
  EXPECT_TRUE(CheckInvariants(f).empty());
}

TEST(OrchSimCheck, NoFailOnToleratedFault) {
  SimFacts f = Clean();
  f.outcome = SimOutcome::kFailed;
  f.exit_code = 1;
  SimFault x;
  x.kind = "slurmctld_outage";
  x.duration = 5;
  f.faults = {x};
  ExpectOnly(f, "no_fail_on_tolerated_fault");
  f.faults[0].may_fail = true;  // beyond its tolerance: may fail
  EXPECT_TRUE(CheckInvariants(f).empty());
}

TEST(OrchSimCheck, OneExitPerStart) {
  SimFacts f = Clean();
  f.starts[0].exits = 2;
  ExpectOnly(f, "one_exit_per_start");
}

TEST(OrchSimCheck, InjobLoopBounded) {
  SimFacts f = Clean();
  SimLaunch l;
  l.rc = 1;
  f.launches.assign(5, l);
  ExpectOnly(f, "injob_loop_bounded");
  f.launches[2].progressed = true;  // a new checkpoint in between: two short runs
  EXPECT_TRUE(CheckInvariants(f).empty());
}

TEST(OrchSimCheck, RollbackLoopBounded) {
  SimFacts f = Clean();
  SimLaunch l;
  l.rc = 79;
  f.launches.assign(10, l);
  ExpectOnly(f, "rollback_loop_bounded");
}

TEST(OrchSimCheck, RequeueLoopBounded) {
  SimFacts f = Clean();
  SimStart s;
  s.exits = 1;
  s.requeued = true;
  s.last_stop = "node_failure";
  f.starts.assign(5, s);
  f.starts.push_back(Clean().starts[0]);
  f.launches[0].start = 5;
  ExpectOnly(f, "requeue_loop_bounded");
  for (auto& x : f.starts) x.last_stop = "preempted";  // stops (time limits) are no loop
  EXPECT_TRUE(CheckInvariants(f).empty());
}

TEST(OrchSimCheck, QuarantineHasRecord) {
  SimFacts f = Clean();
  f.exclusions = {{10, "node003", "exclude", true}, {20, "node004", "quarantine hang", false}};
  ExpectOnly(f, "quarantine_has_record");
}

TEST(OrchSimCheck, KeptOutStaysOut) {
  SimFacts f = Clean();
  f.readmitted = {"node004 at t=500 s"};
  ExpectOnly(f, "kept_out_stays_out");
}

TEST(OrchSimCheck, LostWorkBounded) {
  SimFacts f = Clean();
  SimInterruption x;
  x.t = 100;
  x.lost_s = 1700;  // more than 600 + 1000
  f.interruptions = {x};
  ExpectOnly(f, "lost_work_bounded");
  f.interruptions[0].faults = 2;  // two faults: twice the bound
  EXPECT_TRUE(CheckInvariants(f).empty());
}

TEST(OrchSimCheck, CancelIsFinal) {
  SimFacts f = Clean();
  f.requeued_cancelled = true;
  ExpectOnly(f, "cancel_is_final");
}

TEST(OrchSimCheck, RunEnds) {
  SimFacts f = Clean();
  f.outcome = SimOutcome::kUnfinished;
  f.steps_done = 10;
  f.starts[0].exits = 0;  // the simulation stopped it: no exit expected
  ExpectOnly(f, "run_ends");
}

// Each invariant has a test above that makes it fail.
TEST(OrchSimCheck, EveryInvariantIsShownToFail) {
  const std::set<std::string> tested = {"no_false_complete",     "no_fail_on_tolerated_fault",
                                        "one_exit_per_start",    "injob_loop_bounded",
                                        "rollback_loop_bounded", "requeue_loop_bounded",
                                        "quarantine_has_record", "lost_work_bounded",
                                        "cancel_is_final",       "run_ends",
                                        "kept_out_stays_out"};
  for (const auto& name : SimInvariants()) EXPECT_TRUE(tested.count(name)) << name;
  for (const auto& name : kKnownBroken) {
    EXPECT_NE(std::find(SimInvariants().begin(), SimInvariants().end(), name),
              SimInvariants().end())
        << name;
  }
}

}  // namespace
}  // namespace ftrain::orch
