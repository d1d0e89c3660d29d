// The hang guard's decisions without processes (train/verdicts/hang_verdict.h): the threshold a
// phase gets (the I/O allowance), the judge's ages on its own clock (a fake one), which rank
// the others wait for, the [guard] hang keys and the stall fault's parsing. Then the watchdog
// itself (train/hang_watch.h) in real processes with real files: ranks of two "nodes" sharing
// progress node-locally, one file per node in RUN/progress, a hang named and recorded, an I/O
// wait not named. The trainer's end-to-end runs are in tests/guard_run_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "comm/launch_count.h"
#include "core/config.h"
#include "core/env.h"
#include "core/fake_clock_env.h"
#include "core/fault_inject.h"
#include "core/run_layout.h"
#include "records/hangs.h"
#include "test_util.h"
#include "tiny_config.h"
#include "train/config/train_config.h"
#include "train/hang_local.h"
#include "train/hang_watch.h"
#include "train/verdicts/guard.h"
#include "train/verdicts/hang_verdict.h"

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
  std::vector<RankProgress> all = {Rank(0, 41, 3.5), Rank(1, 41, 3.4), Rank(2, 40, 4.1),
                                   Rank(3, 41, 3.5)};
  HangVerdict v = JudgeHang(all, 4, 0);
  ASSERT_EQ(v.hung.size(), 1u);
  EXPECT_EQ(v.hung[0].rank, 2);
  EXPECT_DOUBLE_EQ(v.hung[0].stuck_s, 4.1);
  EXPECT_EQ(v.recorder, 0);
  EXPECT_FALSE(v.me_hung);
  EXPECT_TRUE(JudgeHang(all, 4, 2).me_hung);
  EXPECT_EQ(DescribeHung(v.hung[0]),
            "rank 2 (node 1, host h1) hung in compute of step 7 for 4.1 s");
  // Rank 0 hung: rank 1 records it.
  all[0].launched = 39;
  v = JudgeHang(all, 4, 3);
  ASSERT_EQ(v.hung.size(), 1u);
  EXPECT_EQ(v.hung[0].rank, 0);
  EXPECT_EQ(v.recorder, 1);
}

TEST(JudgeHang, NoVerdictBeforeTheThresholdWithAMissingRankOrWhenAllWaitTogether) {
  // Behind but not yet past its threshold (a slow step): no verdict, and when one could come.
  const HangVerdict slow = JudgeHang({Rank(0, 41, 9), Rank(1, 40, 1.0)}, 2, 0);
  EXPECT_TRUE(slow.hung.empty());
  EXPECT_DOUBLE_EQ(slow.wait_s, 2.0);
  // A rank without an entry: nothing is judged.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 9), Rank(1, 40, 9)}, 3, 0).hung.empty());
  // Every rank inside the same collective: a network fault, left to the collective timeout.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 99), Rank(1, 41, 99)}, 2, 0).hung.empty());
  // A rank number outside the world (a stray entry): nothing is judged.
  EXPECT_TRUE(JudgeHang({Rank(0, 41, 9), Rank(5, 40, 9)}, 2, 0).hung.empty());
}

TEST(JudgeHang, TwoStuckRanksAreBothNamedAndTheLowestOtherRecords) {
  HangVerdict v = JudgeHang({Rank(0, 40, 5), Rank(1, 40, 5), Rank(2, 41, 5), Rank(3, 41, 5)}, 4, 3);
  ASSERT_EQ(v.hung.size(), 2u);
  EXPECT_EQ(v.hung[0].rank, 0);
  EXPECT_EQ(v.hung[1].rank, 1);
  EXPECT_EQ(v.recorder, 2);
}

// Hole 6 of issue 44: a judge whose wall clock is 10 min ahead of a rank's host named that
// rank, 30 s into a checkpoint, hung (it added the difference of the two hosts' wall clocks to
// the rank's age). Ages are now the judge's own monotonic clock's (a fake one here): the file's
// wall-clock time is never used.
TEST(ProgressAges, AJudgeWhoseWallClockIsAheadDoesNotNameARankInACheckpoint) {
  FakeClockEnv clock(Env::Default());
  auto now = [&clock] { return static_cast<double>(clock.NowMicros()) / 1e6; };
  const double judge_wall = 1.7e9;
  RankProgress saving = Rank(0, 40, 30, judge_wall - 600);  // its host's clock: 10 min behind
  saving.phase = "checkpoint";
  saving.threshold_s = 600;
  std::vector<RankProgress> all = {saving, Rank(1, 41, 90, judge_wall), Rank(2, 41, 90, judge_wall),
                                   Rank(3, 41, 90, judge_wall)};
  ProgressAges ages;
  HangVerdict v = JudgeHang(ages.Aged(all, now()), 4, 1);
  EXPECT_TRUE(v.hung.empty()) << DescribeHung(v.hung[0]);
  EXPECT_DOUBLE_EQ(v.wait_s, 570);  // 30 s into a 600 s allowance
  // Its files keep saying the same (its node froze): it ages on the judge's clock, and is
  // named once 600 s of it have passed since it began.
  clock.Advance(569);
  EXPECT_TRUE(JudgeHang(ages.Aged(all, now()), 4, 1).hung.empty());
  clock.Advance(2);
  v = JudgeHang(ages.Aged(all, now()), 4, 1);
  ASSERT_EQ(v.hung.size(), 1u);
  EXPECT_EQ(v.hung[0].rank, 0);
  EXPECT_NEAR(v.hung[0].stuck_s, 601, 1e-6);
  // A rank that moves on starts again from its new value's own stuck_s.
  all[0].launched = 41;
  all[0].stuck_s = 0.5;
  EXPECT_NEAR(ages.Aged(all, now())[0].stuck_s, 0.5, 1e-6);
}

// Hole 6 of issue 44: rank 0's metrics/TensorBoard/Prometheus writes and data reads ran under
// the compute threshold, so a 2-minute storage recovery named rank 0 hung. They are the kIo
// phase now, with their own allowance (guard.hang_io_s, default dist.timeout_s; the deprecated
// FTRAIN_HANG_IO_S overrides it).
TEST(HangThreshold, IoWaitsHaveTheirOwnAllowance) {
  HangSettings s;
  s.floor_s = 60;
  s.startup_s = 600;
  s.io_s = 900;
  EXPECT_EQ(HangThreshold(s, {1.0, 1.0}, HangPhase::kIo), 900);
  EXPECT_EQ(HangThreshold(s, {}, HangPhase::kIo), 900);
  EXPECT_STREQ(HangPhaseName(HangPhase::kIo), "io");
  // Rank 0 two minutes into a metrics write while the others wait: not named.
  RankProgress writing = Rank(0, 40, 120);
  writing.phase = "io";
  writing.threshold_s = HangThreshold(s, {1.0}, HangPhase::kIo);
  std::vector<RankProgress> all = {writing, Rank(1, 41, 120), Rank(2, 41, 120), Rank(3, 41, 120)};
  EXPECT_TRUE(JudgeHang(all, 4, 1).hung.empty());
  // The same two minutes in compute are a hang.
  all[0].phase = "compute";
  all[0].threshold_s = HangThreshold(s, {1.0}, HangPhase::kCompute);
  EXPECT_EQ(JudgeHang(all, 4, 1).hung.size(), 1u);
  // The variable: unset or empty is the configured guard.hang_io_s; set, it overrides it; a bad
  // value names the variable.
  EXPECT_EQ(*HangIoAllowance(nullptr, 600), 600);
  EXPECT_EQ(*HangIoAllowance("", 450), 450);
  EXPECT_EQ(*HangIoAllowance("1800", 600), 1800);
  for (const char* bad : {"0", "-5", "abc", "12s", "nan"}) {
    auto r = HangIoAllowance(bad, 600);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find("FTRAIN_HANG_IO_S"), std::string::npos);
  }
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

// issue 45: the io phase's allowance is a config key; unset, it is dist.timeout_s, as it was
// when only FTRAIN_HANG_IO_S could set it.
TEST(HangConfig, TheIoAllowanceIsAKeyThatDefaultsToTheCollectiveTimeout) {
  auto a = LoadWith("");
  auto b = LoadWith("[dist]\ntimeout_s = 300\n");
  auto c = LoadWith("[guard]\nhang_io_s = 1800\n");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(a->guard.hang_io_s, static_cast<double>(a->dist.timeout_s));
  EXPECT_EQ(b->guard.hang_io_s, 300);
  EXPECT_EQ(c->guard.hang_io_s, 1800);  // above the timeout: allowed, the timeout ends it first
  EXPECT_EQ(a->ConfigHash(), c->ConfigHash());  // operational
}

TEST(HangConfig, ContradictoryValuesNameTheKey) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"[guard]\nhang_timeout_s = 10\nhang_floor_s = 30\n",
       "guard.hang_timeout_s = 10.000000 is below guard.hang_floor_s = 30.000000"},
      {"[guard]\nhang_timeout_s = -1\n", "guard.hang_timeout_s must be 0 (automatic)"},
      {"[guard]\nhang_floor_s = 0\n", "guard.hang_floor_s must be >= 1 second"},
      {"[guard]\nhang_io_s = 0\n", "guard.hang_io_s must be a number of seconds > 0"},
      {"[guard]\nhang_io_s = -5\n", "guard.hang_io_s must be a number of seconds > 0"},
      {"[guard]\nhang_io_s = abc\n", "guard.hang_io_s"},
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

// ---- The watchdog in real processes: 4 ranks on 2 "nodes" (2 each), a temporary run
// directory and node-local root, intervals in tens of milliseconds. ----

struct Scenario {
  int stop_step = 10;  // every rank stops launching after this many steps
  int victim = -1;     // this rank stops one collective short of the others
  int io_rank = -1;    // this rank spends io_pause_s in kIo at stop_step, then goes on
  double io_pause_s = 0;
  int steps = 10;  // without a victim: the steps every rank runs, then a clean end
  // >= 0: the harness acts like srun with --kill-on-bad-exit: once a rank exits non-zero it
  // sends the others SIGTERM, and SIGKILL this many seconds later (Slurm's KillWait).
  double kill_wait_s = -1;
};

volatile sig_atomic_t g_term = 0;
void OnTerm(int) { g_term = 1; }

// The body of one rank: steps of (compute, one collective launched), then what `sc` says.
[[noreturn]] void RankMain(const std::string& run, const std::string& local, int rank,
                           const Scenario& sc) {
  HangWatch::Options o;
  o.run_dir = run;
  o.env = Env::Default();
  o.rank = rank;
  o.world_size = 4;
  o.node = rank / 2;
  o.num_nodes = 2;
  o.host = "h" + std::to_string(rank / 2);
  o.generation = "gen1";
  o.settings.timeout_s = 1;
  o.settings.floor_s = 1;
  o.settings.startup_s = 30;
  o.settings.io_s = 6;
  o.exit_process = [](int code) { _exit(code); };
  signal(SIGTERM, OnTerm);
  o.stop_asked = [] { return g_term != 0; };
  o.poll = std::chrono::milliseconds(50);
  o.local_root = local;
  o.publish_every = std::chrono::milliseconds(200);
  o.judge_every = std::chrono::milliseconds(300);
  {
    HangWatch watch(std::move(o));
    const int steps = sc.victim >= 0 ? sc.stop_step : sc.steps;
    for (int step = 1; step <= steps; ++step) {
      watch.Enter(step, HangPhase::kCompute);
      const auto pause = std::chrono::duration<double>(sc.io_pause_s);
      if (step == sc.stop_step && rank == sc.io_rank) {
        watch.Enter(step, HangPhase::kIo);  // a slow metrics write while the others wait
        std::this_thread::sleep_for(pause);
        watch.Enter(step, HangPhase::kCompute);
        comm::NoteCollectiveLaunched();
      } else if (step == sc.stop_step && sc.io_rank >= 0) {
        comm::NoteCollectiveLaunched();
        std::this_thread::sleep_for(pause);  // inside the collective, waiting for io_rank
      } else {
        comm::NoteCollectiveLaunched();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      watch.StepTook(0.02);
    }
    if (sc.victim >= 0) {
      if (rank != sc.victim) comm::NoteCollectiveLaunched();  // inside the next collective
      std::this_thread::sleep_for(std::chrono::seconds(30));  // the guard must end us first
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  _exit(0);
}

// Forks the 4 ranks and returns their exit codes (-1: killed, by the launcher's SIGKILL or
// after `limit_s`).
std::vector<int> RunRanks(const std::string& run, const std::string& local, const Scenario& sc,
                          double limit_s = 25) {
  using Clock = std::chrono::steady_clock;
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    const pid_t pid = fork();
    if (pid == 0) RankMain(run, local, r, sc);
    pids.push_back(pid);
  }
  std::vector<int> codes(4, -1);
  std::vector<bool> done(4, false);
  const auto secs = [](double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const Clock::time_point until = Clock::now() + secs(limit_s);
  Clock::time_point kill_at = Clock::time_point::max();
  for (size_t left = pids.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || waitpid(pids[i], &status, WNOHANG) == 0) continue;
      done[i] = true;
      --left;
      if (WIFEXITED(status)) codes[i] = WEXITSTATUS(status);
      if (sc.kill_wait_s >= 0 && codes[i] != 0 && kill_at == Clock::time_point::max()) {
        for (size_t j = 0; j < pids.size(); ++j) {
          if (!done[j]) kill(pids[j], SIGTERM);
        }
        kill_at = Clock::now() + secs(sc.kill_wait_s);
      }
    }
    if (Clock::now() > std::min(until, kill_at)) {
      for (size_t j = 0; j < pids.size(); ++j) {
        if (!done[j]) kill(pids[j], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return codes;
}

TEST(HangWatchProcesses, AStuckRankIsNamedOnceAndEveryRankExits78) {
  testing::TempDir run("hang_run"), local("hang_local");
  Scenario sc;
  sc.victim = 3;
  const std::vector<int> codes = RunRanks(run.path(), local.path(), sc);
  EXPECT_EQ(codes, std::vector<int>(4, kExitHang));
  std::vector<std::string> warnings;
  auto hangs = records::ReadHangsFile(RunLayout(run.path()).hangs(), &warnings, Env::Default());
  ASSERT_TRUE(hangs.ok()) << hangs.status().message();
  ASSERT_EQ(hangs->size(), 1u);  // by the lowest rank that is not hung, once
  EXPECT_EQ((*hangs)[0].rank, 3);
  EXPECT_EQ((*hangs)[0].node, 1);
  EXPECT_EQ((*hangs)[0].host, "h1");
  EXPECT_EQ((*hangs)[0].detected_by, 0);
  EXPECT_EQ((*hangs)[0].phase, "compute");
  EXPECT_EQ((*hangs)[0].generation, "gen1");
  EXPECT_GE((*hangs)[0].stuck_s, 1.0);
  // One file per node in the shared directory, none per rank.
  auto names = Env::Default()->ListDir(RunLayout(run.path()).progress_dir());
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, std::vector<std::string>({"node-0.json", "node-1.json"}));
  std::string text;
  NodeProgress n;
  ASSERT_TRUE(Env::Default()->ReadFile(RunLayout(run.path()).node_progress(1), &text).ok());
  ASSERT_TRUE(ParseNodeProgress(text, &n)) << text;
  EXPECT_EQ(n.ranks.size(), 2u);
  // The node-local directories went with the last rank of each node.
  auto left = Env::Default()->ListDir(local.path());
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->front();
}

// Rank 0 spends 2.5 s in a metrics write (kIo, allowance 6 s) while the others wait in a
// collective past their 1 s compute threshold: nobody is named, the run ends cleanly.
// srun with --kill-on-bad-exit: the first rank's exit 78 brings SIGTERM to the others, SIGKILL
// a KillWait later. The hung rank's wait for the record ends at the TERM, so every task ends 78
// (a task killed would make the step's code 137: a crash, not a hang, to the controller).
TEST(HangWatchProcesses, UnderALauncherThatTerminatesOnTheFirstExitEveryRankStillExits78) {
  testing::TempDir run("hang_run"), local("hang_local");
  Scenario sc;
  sc.victim = 3;
  sc.kill_wait_s = 1;  // shorter than the hung rank's own wait (judge interval + 2 s)
  const std::vector<int> codes = RunRanks(run.path(), local.path(), sc);
  EXPECT_EQ(codes, std::vector<int>(4, kExitHang));
  std::vector<std::string> warnings;
  auto hangs = records::ReadHangsFile(RunLayout(run.path()).hangs(), &warnings, Env::Default());
  ASSERT_TRUE(hangs.ok()) << hangs.status().message();
  ASSERT_EQ(hangs->size(), 1u);
  EXPECT_EQ((*hangs)[0].rank, 3);
}

TEST(HangWatchProcesses, ASlowWriteUnderTheIoAllowanceIsNotAHang) {
  testing::TempDir run("hang_io_run"), local("hang_io_local");
  Scenario sc;
  sc.stop_step = 5;
  sc.io_rank = 0;
  sc.io_pause_s = 2.5;
  sc.steps = 8;
  const std::vector<int> codes = RunRanks(run.path(), local.path(), sc);
  EXPECT_EQ(codes, std::vector<int>(4, 0));
  EXPECT_FALSE(Env::Default()->FileExists(RunLayout(run.path()).hangs()));
  // Every rank's node-local entry is gone with it.
  auto left = Env::Default()->ListDir(local.path());
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->front();
}

}  // namespace
}  // namespace ftrain::train
