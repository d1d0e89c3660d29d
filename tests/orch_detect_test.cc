// Detection (orch/detect.h) with a fake clock and fake probes: silence is measured on the
// monotonic clock only (a wall-clock step is no silence), a refused slurmd convicts, a probe
// timeout convicts only past the blip window while other nodes still answer (hole 4: one
// network or file-system blip, or a watcher cut off itself, convicts nobody), a paused node is
// late and then hung, a late node is noted once per silence. Milliseconds, no processes.
#include <gtest/gtest.h>

#include <map>

#include "core/clock.h"
#include "core/fake_clock_env.h"
#include "orch/detect.h"

namespace ftrain::orch {
namespace {

class FakeProber : public Prober {
 public:
  std::string ReadHeartbeat(const std::string& node) override { return beats[node]; }
  bool HeartbeatExists(const std::string& node) override { return beats.count(node) > 0; }
  std::string ProbeTcp(const std::string& node) override {
    ++tcp_probes;
    return tcp.count(node) ? tcp[node] : "open";
  }
  std::string SlurmdAddress(const std::string&) override { return "10.0.0.2:6818"; }
  bool ProbeTask(const std::string& node) override {
    ++task_probes;
    return !task_fails.count(node);
  }
  bool OthersAnswer(const std::vector<std::string>&, const std::string&) override {
    return others_answer;
  }
  std::map<std::string, std::string> beats, tcp;
  std::map<std::string, bool> task_fails;
  bool others_answer = true;
  int tcp_probes = 0, task_probes = 0;
};

DetectSettings Defaults() { return DetectSettings{}; }

TEST(Heartbeat, ParsesOldAndNewLinesAndFormatsBack) {
  auto old = ParseHeartbeat("5 1 42");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->counter, "5");
  EXPECT_EQ(old->job, "42");
  EXPECT_EQ(old->ckptd, "");
  auto h = ParseHeartbeat("17 4242 43 start=1 ckptd=up\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->start, "1");
  EXPECT_EQ(h->ckptd, "up");
  EXPECT_EQ(FormatHeartbeat(*h), "17 4242 43 start=1 ckptd=up");
  EXPECT_FALSE(ParseHeartbeat("garbage"));
}

// Hole 3: the controller learns that a node's daemon serves from that node's agent (a plain
// file), only for this start: a stale file of the previous start of the same job says nothing.
TEST(Heartbeat, ReadinessIsThisStartsAgentSayingItsDaemonAnswers) {
  EXPECT_TRUE(DaemonReady("9 77 42 start=1 ckptd=up", "42", 1));
  EXPECT_FALSE(DaemonReady("9 77 42 start=0 ckptd=up", "42", 1));  // the previous start's
  EXPECT_FALSE(DaemonReady("9 77 41 start=1 ckptd=up", "42", 1));  // another job's
  EXPECT_FALSE(DaemonReady("9 77 42 start=1 ckptd=starting", "42", 1));
  EXPECT_FALSE(DaemonReady("5 1 42", "42", 0));  // an agent that says nothing
  EXPECT_FALSE(DaemonReady("", "42", 0));
}

// The fake time every time-dependent test runs on (core/fake_clock_env.h): time passing moves
// both clocks, a step of the host's clock only the wall clock, a sleep returns at once and moves
// both by its length.
TEST(FakeClockEnv, AdvanceStepWallAndASleepMoveTheClocksTheyName) {
  FakeClockEnv clock(Env::Default());
  EXPECT_DOUBLE_EQ(NowSeconds(&clock), 1000);
  EXPECT_DOUBLE_EQ(UnixSeconds(&clock), 1.7e9);
  clock.Advance(2.5);
  EXPECT_DOUBLE_EQ(NowSeconds(&clock), 1002.5);
  EXPECT_DOUBLE_EQ(UnixSeconds(&clock), 1.7e9 + 2.5);
  clock.StepWall(-3600);  // NTP sets it back an hour
  EXPECT_DOUBLE_EQ(NowSeconds(&clock), 1002.5);
  EXPECT_DOUBLE_EQ(UnixSeconds(&clock), 1.7e9 + 2.5 - 3600);
  clock.SleepForMicroseconds(500000);
  EXPECT_DOUBLE_EQ(NowSeconds(&clock), 1003);
  EXPECT_DOUBLE_EQ(UnixSeconds(&clock), 1.7e9 + 3 - 3600);
}

// The real Env's wall clock is unix time (system_clock), what records are stamped with.
TEST(PosixEnv, TheWallClockIsUnixTime) {
  const double before = UnixSeconds();
  const double t = UnixSeconds(Env::Default());
  EXPECT_LE(before - 1e-6, t);
  EXPECT_LE(t, UnixSeconds() + 1e-6);
}

TEST(HeartbeatMonitor, SilenceIsMonotonicAndAnyChangeIsLife) {
  FakeClockEnv clock(Env::Default());
  HeartbeatMonitor m;
  m.Reset({"n2"}, NowSeconds(&clock));
  EXPECT_EQ(m.Observe("n2", "1 9 42", NowSeconds(&clock)), 0);
  clock.Advance(2.5);
  EXPECT_DOUBLE_EQ(m.Observe("n2", "1 9 42", NowSeconds(&clock)), 2.5);
  clock.Advance(1);
  EXPECT_EQ(m.Observe("n2", "", NowSeconds(&clock)), 0);  // unreadable is a change too
  // A step of the wall clock (NTP, `date -s`) is no silence: only the monotonic clock counts.
  clock.StepWall(3600);
  EXPECT_EQ(m.Observe("n2", "", NowSeconds(&clock)), 0);
}

TEST(Judge, TheVerdictRules) {
  const DetectSettings s = Defaults();  // timeout 3, blip 10, hung 60
  Evidence e;
  e.silent_s = 2.9;
  e.tcp = "refused";
  EXPECT_EQ(Judge(s, e), Verdict::kAlive);  // not silent long enough to look
  e.silent_s = 3;
  EXPECT_EQ(Judge(s, e), Verdict::kDead);  // its kernel: nothing listens
  e.tcp = "timeout";
  EXPECT_EQ(Judge(s, e), Verdict::kLate);  // hole 4: a 7 s blip convicts nobody
  e.silent_s = 7;
  EXPECT_EQ(Judge(s, e), Verdict::kLate);
  e.silent_s = 10;
  EXPECT_TRUE(NeedsOthersProbe(s, e));
  EXPECT_EQ(Judge(s, e), Verdict::kDead);  // past the blip window, others answer
  e.others_answer = false;
  EXPECT_EQ(Judge(s, e), Verdict::kLate);  // this watcher is the one cut off
  e = Evidence{};
  e.tcp = "open";
  e.silent_s = 59;
  EXPECT_FALSE(NeedsTaskProbe(s, e));
  EXPECT_EQ(Judge(s, e), Verdict::kLate);  // paused, not dead
  e.silent_s = 60;
  EXPECT_TRUE(NeedsTaskProbe(s, e));
  e.task_started = true;
  EXPECT_EQ(Judge(s, e), Verdict::kLate);
  e.task_started = false;
  EXPECT_EQ(Judge(s, e), Verdict::kHung);
}

TEST(Detector, ALateNodeIsNotedOnceThenADeadOneDeclaredWithItsEvidence) {
  FakeClockEnv clock(Env::Default());
  FakeProber p;
  Detector d(Defaults(), &p, &clock);
  p.beats = {{"n1", "1"}, {"n2", "1"}};
  d.Reset({"n1", "n2"});
  EXPECT_TRUE(d.Look({"n1", "n2"}).empty());
  EXPECT_EQ(p.tcp_probes, 0);  // nobody silent: no probe at all
  clock.Advance(3.5);
  p.beats["n1"] = "2";
  p.tcp["n2"] = "open";
  auto late = d.Look({"n1", "n2"});
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].node, "n2");
  EXPECT_EQ(late[0].verdict, Verdict::kLate);
  EXPECT_NE(late[0].log.find("heartbeat silent 3.5 s but its slurmd answers (open)"),
            std::string::npos);
  clock.Advance(0.5);
  EXPECT_TRUE(d.Look({"n1", "n2"}).empty());  // said once per silence
  p.tcp["n2"] = "refused";
  auto dead = d.Look({"n1", "n2"});
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].verdict, Verdict::kDead);
  EXPECT_NE(dead[0].log.find("node n2 declared dead: heartbeat silent 4.0 s (limit 3 s); slurmd "
                             "10.0.0.2:6818 refused"),
            std::string::npos)
      << dead[0].log;
  std::string fields;
  for (const auto& f : dead[0].fields) fields += f.key + "=" + f.json + ",";
  EXPECT_EQ(fields.rfind("detected=1700000004.000000,", 0), 0u) << fields;  // the wall clock
  EXPECT_NE(fields.find("detected_by=\"ftrain\",verdict=\"dead\",heartbeat_silent_s=4.0,"
                        "slurmd=\"refused\",probe_s="),
            std::string::npos)
      << fields;
}

TEST(Detector, APausedNodeIsDeclaredHungWhenNoTaskStarts) {
  FakeClockEnv clock(Env::Default());
  FakeProber p;
  Detector d(Defaults(), &p, &clock);
  p.beats = {{"n2", "1"}};
  p.tcp["n2"] = "open";
  d.Reset({"n2"});
  d.Look({"n2"});
  clock.Advance(30);
  d.Look({"n2"});
  EXPECT_EQ(p.task_probes, 0);
  clock.Advance(30);
  p.task_fails["n2"] = true;
  auto hung = d.Look({"n2"});
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].verdict, Verdict::kHung);
  EXPECT_NE(hung[0].log.find("a task on it did not start within 5 s (silent over 60 s)"),
            std::string::npos);
}

TEST(Detector, ConfirmingAFailureWaitsForTheHeartbeatOnlyOfNodesThatDoNotAnswer) {
  FakeClockEnv clock(Env::Default());
  FakeProber p;
  Detector d(Defaults(), &p, &clock);
  p.beats = {{"n1", "1"}, {"n2", "1"}};
  std::vector<std::string> logs;
  auto sleep = [&clock](double s) {
    clock.Advance(s);
    return true;
  };
  auto log = [&logs](const std::string& l) { logs.push_back(l); };
  EXPECT_FALSE(d.ConfirmAfterFailure({"n1", "n2"}, sleep, log));  // both answer: a rank failure
  EXPECT_TRUE(logs.empty());
  p.tcp["n2"] = "refused";
  auto f = d.ConfirmAfterFailure({"n1", "n2"}, sleep, log);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->node, "n2");
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("the slurmd of n2 does not answer: confirming by heartbeat"),
            std::string::npos);
}

// Hole 11: a signal during the confirmation ends it at once (the runner's sleep reads the
// signalfd and says stop): nothing declared, the signal handled right after the answer.
TEST(Detector, ASignalEndsTheConfirmationAtOnce) {
  FakeClockEnv clock(Env::Default());
  FakeProber p;
  Detector d(Defaults(), &p, &clock);
  p.beats = {{"n1", "1"}, {"n2", "1"}};
  p.tcp["n2"] = "timeout";  // confirmed only after the blip window: 12 s of sleeps
  int sleeps = 0;
  auto signalled = [&](double s) {
    ++sleeps;
    clock.Advance(s);
    return false;  // a TERM came
  };
  EXPECT_FALSE(d.ConfirmAfterFailure({"n1", "n2"}, signalled, [](const std::string&) {}));
  EXPECT_EQ(sleeps, 1);
}

}  // namespace
}  // namespace ftrain::orch
