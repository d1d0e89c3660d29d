// The node agent's decisions (orch/agent_policy.h): the daemon's supervision (exit 2 is never
// restarted), the ring and the watchers (chosen apart from the batch host: hole 5), and the
// batch-host watcher's transitions (claim, lease, resubmission, the claim's take-over from a
// dead claimant only, the Slurm-view requeue). Milliseconds, no processes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "orch/agent_policy.h"
#include "orch/dry_run.h"
#include "orch/topology.h"
#include "rules_fired.h"

namespace ftrain::orch {
namespace {

TEST(Daemon, Exit2IsNeverRestarted) {
  const DaemonDecision d = OnDaemonExit(2, false, 0, 3, 1);
  EXPECT_EQ(d.kind, DaemonDecision::Kind::kRefused);
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_NE(d.log.find("not restarting it"), std::string::npos);
}

TEST(Daemon, ADeadDaemonIsCleanedUpAndRestartedWithBackoffThenGivenUp) {
  DaemonDecision d = OnDaemonExit(137, false, 0, 3, 1);
  EXPECT_EQ(d.kind, DaemonDecision::Kind::kRestart);
  EXPECT_TRUE(d.cleanup);  // its shared-memory slots are left behind
  EXPECT_EQ(d.log, "ckptd died (exit 137); restart 1/3 in 1 s");
  d = OnDaemonExit(137, false, 3, 3, 8);
  EXPECT_EQ(d.kind, DaemonDecision::Kind::kGiveUp);
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.log.find("the trainer saves synchronously"), std::string::npos);
}

TEST(Daemon, AStopIsAStopWhateverTheExitCode) {
  DaemonDecision d = OnDaemonExit(0, true, 0, 3, 1);
  EXPECT_EQ(d.kind, DaemonDecision::Kind::kStopped);
  EXPECT_EQ(d.exit_code, 0);
  EXPECT_FALSE(d.cleanup);
  d = OnDaemonExit(2, true, 0, 3, 1);
  EXPECT_EQ(d.kind, DaemonDecision::Kind::kStopped);
}

std::vector<std::string> Ring(int n) {
  std::vector<std::string> r;
  for (int i = 0; i < n; ++i) r.push_back("n" + std::to_string(i));
  return r;
}

// Hole 12: the buddy is the far side of the ring (i + N/2), not the next host name (its rack
// neighbour); one shift for the ring, so every node holds exactly one replica.
TEST(Ring, TheBuddyIsTheFarSideOfTheRingForOneToNineNodes) {
  EXPECT_EQ(BuddyOf(Ring(1), "n0"), "");  // alone: no replication
  for (int n = 2; n <= 9; ++n) {
    const auto ring = Ring(n);
    std::map<std::string, int> held;  // buddy -> replicas it holds
    for (int i = 0; i < n; ++i) {
      const std::string b = BuddyOf(ring, ring[i]);
      EXPECT_EQ(b, ring[(i + n / 2) % n]) << "N=" << n << " i=" << i;
      EXPECT_NE(b, ring[i]);
      ++held[b];
    }
    EXPECT_EQ(held.size(), static_cast<size_t>(n)) << "N=" << n;  // one replica per node
    if (n >= 4) {  // never the next node nor the one before it
      for (int i = 0; i < n; ++i) {
        EXPECT_NE(BuddyOf(ring, ring[i]), ring[(i + 1) % n]) << "N=" << n;
        EXPECT_NE(BuddyOf(ring, ring[i]), ring[(i + n - 1) % n]) << "N=" << n;
      }
    }
  }
  EXPECT_EQ(BuddyOf(Ring(2), "n0"), "n1");  // N = 2: each the other's
  EXPECT_EQ(BuddyOf(Ring(2), "n1"), "n0");
  EXPECT_EQ(BuddyOf(Ring(3), "n2"), "n0");  // odd N: (N-1)/2 on; n2 holds n1's replica
  EXPECT_EQ(BuddyOf(Ring(5), "n4"), "n1");
  EXPECT_EQ(BuddyOf({"n1", "n2"}, "n9"), "");  // not in the ring
  EXPECT_EQ(RingOf("42 n1 n3", "42", {"n1", "n2", "n3"}), (std::vector<std::string>{"n1", "n3"}));
  EXPECT_EQ(RingOf("41 n1 n3", "42", {"n1", "n2"}), (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(RingOf("", "42", {"n1"}), (std::vector<std::string>{"n1"}));
}

// With Slurm's topology the shift puts every buddy under another leaf switch when one can.
TEST(Ring, WithATopologyTheBuddyIsUnderAnotherLeafSwitch) {
  // Two racks interleaved in name order: N/2 = 2 would pair n0 with n2, same switch; shift 1
  // (nearest to N/2 among the shifts that separate all) pairs every node across.
  const auto ring = Ring(4);
  const std::map<std::string, std::string> sw = {
      {"n0", "s0"}, {"n1", "s1"}, {"n2", "s0"}, {"n3", "s1"}};
  EXPECT_EQ(BuddyShift(ring, sw), 3u);  // ties 1 and 3; N/2+1 is tried before N/2-1
  for (const auto& n : ring) EXPECT_NE(sw.at(BuddyOf(ring, n, sw)), sw.at(n)) << n;
  // Racks in blocks (the usual case): the far side is already across.
  const auto six = Ring(6);
  const std::map<std::string, std::string> blocks = {{"n0", "a"}, {"n1", "a"}, {"n2", "a"},
                                                     {"n3", "b"}, {"n4", "b"}, {"n5", "b"}};
  EXPECT_EQ(BuddyShift(six, blocks), 3u);
  // Three racks of 3, 3, 3 in blocks: N/2 = 4 separates all of them.
  const auto nine = Ring(9);
  std::map<std::string, std::string> three;
  for (int i = 0; i < 9; ++i) three["n" + std::to_string(i)] = "s" + std::to_string(i / 3);
  for (const auto& n : nine) EXPECT_NE(three.at(BuddyOf(nine, n, three)), three.at(n)) << n;
  // One switch, or none known: the far side of the ring.
  EXPECT_EQ(BuddyShift(six, {{"n0", "a"}, {"n3", "a"}}), 3u);
  EXPECT_EQ(BuddyShift(six, {}), 3u);
  // Unbalanced (five nodes on one switch, one on another): the most pairs apart, N/2 first.
  std::map<std::string, std::string> lop = {{"n0", "a"}, {"n1", "a"}, {"n2", "a"},
                                            {"n3", "a"}, {"n4", "a"}, {"n5", "b"}};
  EXPECT_EQ(BuddyShift(six, lop), 3u);
  EXPECT_EQ(BuddyShift({"x"}, lop), 0u);
}

TEST(Topology, LeafSwitchesAreTheLinesThatListNodes) {
  const auto leaves = ParseLeafSwitches(
      "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[0-3]\n"
      "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[4-7]\n"
      "SwitchName=top Level=1 LinkSpeed=1 Switches=s[0-1]\n");
  ASSERT_EQ(leaves.size(), 2u);
  EXPECT_EQ(leaves[0], (std::pair<std::string, std::string>{"s0", "n[0-3]"}));
  EXPECT_EQ(leaves[1], (std::pair<std::string, std::string>{"s1", "n[4-7]"}));
  EXPECT_TRUE(ParseLeafSwitches("No topology information available").empty());
  EXPECT_TRUE(ParseLeafSwitches("").empty());
}

// Hole 5: the watchers are a third and two thirds of the ring away from the batch host, never
// its neighbours (which usually share its rack) when the ring is large enough.
TEST(Ring, WatchersAreChosenApartFromTheBatchHost) {
  std::vector<std::string> ring;
  for (int i = 0; i < 64; ++i) ring.push_back("n" + std::to_string(i));
  std::vector<std::string> watchers(3);
  for (const auto& n : ring) {
    const int r = WatcherRank(ring, "n0", n);
    if (r > 0) watchers[r] = n;
  }
  EXPECT_EQ(watchers[1], "n22");                // 63 others: o[21] = n22
  EXPECT_EQ(watchers[2], "n43");                // o[42] = n43
  EXPECT_EQ(WatcherRank(ring, "n0", "n1"), 0);  // not the neighbours
  EXPECT_EQ(WatcherRank(ring, "n0", "n63"), 0);
  // Small jobs: every other node watches (3 nodes), the only other one (2 nodes).
  EXPECT_EQ(WatcherRank({"n1", "n2", "n3"}, "n1", "n2"), 1);
  EXPECT_EQ(WatcherRank({"n1", "n2", "n3"}, "n1", "n3"), 2);
  EXPECT_EQ(WatcherRank({"n1", "n4"}, "n1", "n4"), 1);
  EXPECT_EQ(WatcherRank({"n1", "n2", "n3", "n4"}, "n1", "n3"), 1);
  EXPECT_EQ(WatcherRank({"n1", "n2", "n3", "n4"}, "n1", "n4"), 2);
  EXPECT_EQ(WatcherRank({"n1", "n2"}, "n1", "n1"), 0);
  EXPECT_EQ(WatcherRank({"n1", "n2"}, "", "n2"), 0);
}

// ---- the watcher ----------------------------------------------------------------------------

AgentSettings Watcher(const std::string& node, int spares = 1, int resubmits = 0) {
  AgentSettings s;
  s.node = node;
  s.batch_host = "n1";
  s.spare_nodes = spares;
  s.resubmits = resubmits;
  return s;
}

WatcherObs Obs(WatcherObs::Kind k, double now = 0) {
  WatcherObs o;
  o.kind = k;
  o.now = now;
  o.wall = 1.7e9 + now;
  return o;
}

using testing::Fired;

// The decision's rule counts as fired; its actions pass on.
std::vector<WatcherAct> Acts(const WatcherDecision& d) {
  if (!d.rule.empty()) Fired().insert(d.rule);
  return d.acts;
}

std::string Kinds(const std::vector<WatcherAct>& acts) {
  std::string s;
  for (const auto& a : acts) {
    switch (a.kind) {
      case WatcherAct::Kind::kLog:
        s += "log ";
        break;
      case WatcherAct::Kind::kRecord:
        s += "record:" + a.record.event + " ";
        break;
      case WatcherAct::Kind::kClaim:
        s += "claim ";
        break;
      case WatcherAct::Kind::kWatchClaim:
        s += "watch_claim ";
        break;
      case WatcherAct::Kind::kTakeOverClaim:
        s += "take_over ";
        break;
      case WatcherAct::Kind::kTakeLease:
        s += "lease ";
        break;
      case WatcherAct::Kind::kSubmit:
        s += "submit ";
        break;
      case WatcherAct::Kind::kCancelNewJob:
        s += "cancel_new ";
        break;
      case WatcherAct::Kind::kMarkReplaced:
        s += "mark ";
        break;
      case WatcherAct::Kind::kNotifyAndCancel:
        s += "notify_cancel ";
        break;
      case WatcherAct::Kind::kQueryRestarts:
        s += "restarts ";
        break;
      case WatcherAct::Kind::kRequeue:
        s += "requeue ";
        break;
    }
  }
  return s;
}

std::string Kinds(const WatcherDecision& d) { return Kinds(Acts(d)); }

WatcherObs Declared() {
  WatcherObs o = Obs(WatcherObs::Kind::kDeclared);
  o.fields = {records::Str("detected_by", "ftrain"), records::Str("evidence", "heartbeat silent")};
  o.log = "node n1 declared dead: heartbeat silent";
  return o;
}

TEST(WatcherPolicy, TheFirstWatcherClaimsLeasesRecordsSubmitsAndCancels) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  EXPECT_EQ(Kinds(w.On(Declared())), "log claim ");
  WatcherObs claim = Obs(WatcherObs::Kind::kClaim);
  claim.ok = true;
  EXPECT_EQ(Kinds(w.On(claim)), "lease ");
  WatcherObs lease = Obs(WatcherObs::Kind::kLease);
  lease.ok = true;
  auto acts = Acts(w.On(lease));
  EXPECT_EQ(Kinds(acts), "record:step_failed submit ");
  EXPECT_EQ(records::EncodeLine(acts[0].record).substr(0, 0), "");
  std::string line = records::EncodeLine(acts[0].record);
  EXPECT_NE(line.find("\"event\":\"step_failed\",\"cause\":\"node_failure\",\"node\":\"n1\","
                      "\"batch_host\":true,\"watcher\":\"n2\",\"detected_by\":\"ftrain\""),
            std::string::npos)
      << line;
  WatcherObs sub = Obs(WatcherObs::Kind::kSubmitted);
  sub.job = "4242";
  sub.options = "--nodes=2 --exclude=n1";
  acts = Acts(w.On(sub));
  // The marker before the record, the record before the cancel.
  EXPECT_EQ(Kinds(acts), "mark record:resubmitted notify_cancel ");
  EXPECT_NE(records::EncodeLine(acts[1].record)
                .find("\"new_job\":\"4242\",\"excluded\":\"n1\","
                      "\"resubmits\":1"),
            std::string::npos);
  EXPECT_TRUE(w.done());
}

TEST(WatcherPolicy, TheSecondWatcherActsFiveSecondsLater) {
  WatcherPolicy w(Watcher("n3"), "42", 0);
  w.SetRank(2);
  EXPECT_EQ(Kinds(w.On(Declared())), "log ");
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 4.9))), "");
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 5.0))), "claim ");
}

// The list: a watcher's claim dies and another takes it over; a live claimant keeps it.
TEST(WatcherPolicy, AClaimIsTakenOverOnlyFromADeadClaimant) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  Acts(w.On(Declared()));
  WatcherObs held = Obs(WatcherObs::Kind::kClaim);
  held.by = "n3";
  EXPECT_EQ(Kinds(w.On(held)), "watch_claim ");
  WatcherObs dead = Obs(WatcherObs::Kind::kClaimWatch);
  dead.by = "n3";
  dead.dead = true;
  auto acts = Acts(w.On(dead));
  EXPECT_EQ(Kinds(acts), "log take_over ");
  EXPECT_EQ(acts[0].text,
            "the other watcher n3 claimed job 42's resubmission and died: taking it over");
  WatcherObs ok = Obs(WatcherObs::Kind::kClaim);
  ok.ok = true;
  EXPECT_EQ(Kinds(w.On(ok)), "lease ");

  WatcherPolicy live(Watcher("n2"), "42", 0);
  live.SetRank(1);
  Acts(live.On(Declared()));
  Acts(live.On(held));
  WatcherObs done = Obs(WatcherObs::Kind::kClaimWatch);
  done.by = "n3";
  done.done = true;
  acts = Acts(live.On(done));
  EXPECT_EQ(Kinds(acts), "log ");
  EXPECT_NE(acts[0].text.find("is being submitted again by the other watcher (n3)"),
            std::string::npos);
  EXPECT_TRUE(live.done());
}

TEST(WatcherPolicy, NoResubmissionPastTheLimitOrWhenSbatchFails) {
  WatcherPolicy w(Watcher("n2", 1, 3), "42", 0);
  w.SetRank(1);
  Acts(w.On(Declared()));
  WatcherObs claim = Obs(WatcherObs::Kind::kClaim);
  claim.ok = true;
  Acts(w.On(claim));
  WatcherObs lease = Obs(WatcherObs::Kind::kLease);
  lease.ok = true;
  auto acts = Acts(w.On(lease));
  EXPECT_EQ(Kinds(acts), "record:step_failed log record:not_resubmitted ");
  EXPECT_FALSE(w.watching_heartbeat());  // Slurm decides now

  WatcherPolicy f(Watcher("n2"), "42", 0);
  f.SetRank(1);
  Acts(f.On(Declared()));
  Acts(f.On(claim));
  Acts(f.On(lease));
  WatcherObs failed = Obs(WatcherObs::Kind::kSubmitted);
  failed.error = "sbatch --nodes=2 failed (exit 1: invalid partition)";
  EXPECT_EQ(Kinds(f.On(failed)), "log record:not_resubmitted ");
  EXPECT_FALSE(f.watching_heartbeat());
}

// Hole 6: the old job is not cancelled for a new one that can never run.
TEST(WatcherPolicy, ANewJobThatCanNeverRunIsCancelledAndTheOldOneKept) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  Acts(w.On(Declared()));
  WatcherObs claim = Obs(WatcherObs::Kind::kClaim);
  claim.ok = true;
  Acts(w.On(claim));
  WatcherObs lease = Obs(WatcherObs::Kind::kLease);
  lease.ok = true;
  Acts(w.On(lease));
  WatcherObs sub = Obs(WatcherObs::Kind::kSubmitted);
  sub.job = "4242";
  sub.can_run = false;
  sub.error = "PENDING, BadConstraints";
  auto acts = Acts(w.On(sub));
  EXPECT_EQ(Kinds(acts), "cancel_new log record:not_resubmitted ");
  EXPECT_EQ(acts[0].text, "4242");
}

TEST(WatcherPolicy, ALeaseHeldByAnotherJobStopsTheResubmission) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  Acts(w.On(Declared()));
  WatcherObs claim = Obs(WatcherObs::Kind::kClaim);
  claim.ok = true;
  Acts(w.On(claim));
  WatcherObs lease = Obs(WatcherObs::Kind::kLease);
  lease.error = "the run is held by job 43";
  EXPECT_EQ(Kinds(w.On(lease)), "log ");
  EXPECT_FALSE(w.watching_heartbeat());
}

TEST(WatcherPolicy, SlurmsViewRequeuesOnceAfterTwoLooks) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  WatcherObs gone = Obs(WatcherObs::Kind::kHostView);
  gone.left = true;
  WatcherObs back = Obs(WatcherObs::Kind::kHostView);
  WatcherObs unknown = Obs(WatcherObs::Kind::kHostView);
  unknown.known = false;
  Acts(w.On(gone));
  Acts(w.On(back));  // a blip: not confirmed
  Acts(w.On(gone));
  Acts(w.On(unknown));  // slurmctld did not answer: no news
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 1))), "");
  Acts(w.On(gone));
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 2))), "restarts ");
  WatcherObs r = Obs(WatcherObs::Kind::kRestarts);
  r.count = -1;  // slurmctld did not answer: look again later
  EXPECT_EQ(Kinds(w.On(r)), "");
  Acts(w.On(gone));
  Acts(w.On(gone));
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 3))), "restarts ");
  r.count = 0;
  auto acts = Acts(w.On(r));
  EXPECT_EQ(Kinds(acts), "log record:step_failed log requeue ");
  EXPECT_NE(records::EncodeLine(acts[1].record).find("\"watcher\":\"n2\",\"detected\":"),
            std::string::npos);
  WatcherObs ok = Obs(WatcherObs::Kind::kRequeued);
  ok.ok = true;
  Acts(w.On(ok));
  EXPECT_TRUE(w.done());
  EXPECT_EQ(Kinds(w.On(gone)), "");
}

TEST(WatcherPolicy, ARequeueBySomeoneElseIsNotRepeated) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  WatcherObs gone = Obs(WatcherObs::Kind::kHostView);
  gone.left = true;
  Acts(w.On(gone));
  Acts(w.On(gone));
  Acts(w.On(Obs(WatcherObs::Kind::kTick, 1)));
  WatcherObs r = Obs(WatcherObs::Kind::kRestarts);
  r.count = 1;
  EXPECT_EQ(Kinds(w.On(r)), "");
  EXPECT_TRUE(w.done());
}

TEST(WatcherPolicy, WithoutSparesSlurmsViewIsNotConsultedAndNonWatchersDoNothing) {
  WatcherPolicy w(Watcher("n2", 0), "42", 0);
  w.SetRank(1);
  WatcherObs gone = Obs(WatcherObs::Kind::kHostView);
  gone.left = true;
  Acts(w.On(gone));
  Acts(w.On(gone));
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 9))), "");
  WatcherPolicy none(Watcher("n4"), "42", 0);
  none.SetRank(0);
  EXPECT_EQ(Kinds(none.On(Declared())), "");
  WatcherObs late = Obs(WatcherObs::Kind::kLate);
  late.log = "late";
  w.SetRank(1);
  EXPECT_EQ(Kinds(w.On(late)), "log record:heartbeat_late ");
}

// A requeue slurmctld refused: the watcher says so and watches again, two looks in a row
// before it tries again (a blip after the refusal convicts nobody).
TEST(WatcherPolicy, AFailedRequeueIsLoggedAndTriedAgainAfterTwoMoreLooks) {
  WatcherPolicy w(Watcher("n2"), "42", 0);
  w.SetRank(1);
  WatcherObs gone = Obs(WatcherObs::Kind::kHostView);
  gone.left = true;
  Acts(w.On(gone));
  Acts(w.On(gone));
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 1))), "restarts ");
  WatcherObs r = Obs(WatcherObs::Kind::kRestarts);
  EXPECT_EQ(Kinds(w.On(r)), "log record:step_failed log requeue ");
  WatcherObs failed = Obs(WatcherObs::Kind::kRequeued);
  failed.error = "Requested operation is presently disabled";
  const WatcherDecision d = w.On(failed);
  EXPECT_EQ(d.rule, "watch.requeue_failed");
  EXPECT_EQ(Kinds(d), "log ");
  EXPECT_EQ(w.state(), WatcherPolicy::State::kWatching);
  Acts(w.On(gone));
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 2))), "") << "one look is not enough";
  Acts(w.On(gone));
  // The step_failed record is not written twice for one failure.
  EXPECT_EQ(Kinds(w.On(Obs(WatcherObs::Kind::kTick, 3))), "restarts ");
  EXPECT_EQ(Kinds(w.On(r)), "log requeue ");
}

// The machine is complete: every state but done has a row, every observation kind but the
// answers nobody waits for has one, no two unguarded rows overlap, and every rule a handler
// can name is in kWatcherRules once.
TEST(WatcherMachine, EveryStateHasARowAndTheRulesAreUnique) {
  std::set<std::string> states, kinds, unguarded;
  for (const auto& r : WatcherPolicy::Machine()) {
    states.insert(r.phases);
    kinds.insert(r.observation);
    if (r.when.empty()) {
      EXPECT_TRUE(unguarded.insert(r.phases + "/" + r.observation).second)
          << r.phases << " " << r.observation << ": a second unguarded row is never reached";
    }
  }
  for (int i = 0; i < WatcherPolicy::kStates; ++i) {
    const auto st = static_cast<WatcherPolicy::State>(i);
    if (st == WatcherPolicy::State::kDone) continue;
    EXPECT_TRUE(states.count(WatcherPolicy::StateName(st))) << WatcherPolicy::StateName(st);
  }
  for (int k = 0; k < kWatcherObsKinds; ++k) {
    const char* name = WatcherKindName(static_cast<WatcherObs::Kind>(k));
    EXPECT_TRUE(kinds.count(name)) << "observation '" << name << "' has no row";
  }
  std::set<std::string> ids;
  for (const auto& r : kWatcherRules) EXPECT_TRUE(ids.insert(r.id).second) << r.id;
  for (const auto& f : Fired())
    EXPECT_TRUE(ids.count(f)) << "rule '" << f << "' not in kWatcherRules";
}

// `ftrain agent --dry-run`: the recorded sequence in tests/fixtures/watcher_dry_run.txt gives
// each decision's rule and state in order; a bad line is refused naming it.
TEST(WatcherDryRun, TheFixtureReplaysRuleByRuleAndBadLinesAreNamed) {
  std::ifstream in(std::string(FTRAIN_SOURCE_DIR) + "/tests/fixtures/watcher_dry_run.txt");
  ASSERT_TRUE(in) << "tests/fixtures/watcher_dry_run.txt";
  std::stringstream text;
  text << in.rdbuf();
  std::ostringstream out;
  Status s = WatcherDryRun(text.str(), out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::string> rules;
  std::istringstream lines(out.str());
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("  -> ", 0) == 0) {
      rules.push_back(l.substr(5));
      Fired().insert(l.substr(5, l.find(' ', 5) - 5));
    }
  }
  EXPECT_EQ(rules, (std::vector<std::string>{"watch.late [watching]", "watch.declared [claiming]",
                                             "watch.claim_held [waiting_claim]",
                                             "watch.claim_taken_over [claiming]",
                                             "watch.claimed [leasing]", "watch.leased [submitting]",
                                             "watch.resubmitted [done]"}))
      << out.str();
  EXPECT_NE(out.str().find("     record resubmitted/node_failure"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("     notify_and_cancel 4242"), std::string::npos) << out.str();
  std::ostringstream bad;
  Status b = WatcherDryRun("0 teleport by=x\n", bad);
  EXPECT_NE(b.message().find("line 1: '0 teleport by=x': unknown kind 'teleport'"),
            std::string::npos)
      << b.message();
  b = WatcherDryRun("rank 3\n", bad);
  EXPECT_NE(b.message().find("line 1: rank must be 1"), std::string::npos) << b.message();
  b = WatcherDryRun("0 claim ok=1\nrank 2\n", bad);
  EXPECT_NE(b.message().find("line 2: rank after the first observation"), std::string::npos)
      << b.message();
}

// Every rule of kWatcherRules fired in some test of this binary (checked after all of them ran).
const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new testing::EveryRuleFired(&kWatcherRules));

}  // namespace
}  // namespace ftrain::orch
