// The guard end to end through real processes: `ftrain launch` with 4 Gloo ranks on 2 "nodes"
// trains the tiny model while FTRAIN_FAULT injects a NaN loss, a NaN gradient element or a
// gradient spike at a chosen step and rank. The run must finish, no committed checkpoint may
// hold a non-finite value (`ckptctl verify` scans every value), and the final checkpoint
// must be bit-identical (`ckptctl diff`) to a clean run given the same data.skip list.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"

namespace ftrain::testing {
namespace {

// The JSON lines of a file (restarts.jsonl, quarantine.jsonl, rollbacks.jsonl).
std::vector<nlohmann::json> JsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

class GuardRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("ftrain-guard-test");
    data_ = dir_->path() + "/data";
    auto r = PackLicenses(data_, "--shard-rows 256");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  // One launch of 4 ranks (2 nodes x 2), 20 steps, a checkpoint every 5 (all kept);
  // `env` goes before the command (FTRAIN_FAULT=...).
  static CommandResult Train(const std::string& run, const std::string& extra,
                             const std::string& env = "") {
    return RunCommand(
        env + " " + Ftrain() + " launch --nproc 4 --nodes 2 --grace-s 2 -- train --config " +
            FTRAIN_SOURCE_DIR + "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + run +
            " --train.steps=20 --ckpt.every_steps=5 --ckpt.every_minutes=0 "
            "--ckpt.keep=10 --ckpt.daemon=off " +
            extra,
        600);
  }

  static std::string Path(const std::string& name) { return dir_->path() + "/" + name; }
  static std::string Final(const std::string& run) { return run + "/checkpoints/step-00000020"; }

  static int Diff(const std::string& a, const std::string& b) {
    auto r = RunCommand(BinDir() + "/ckptctl diff " + a + " " + b, 120);
    return r.exit_code;
  }

  // step -> the metrics.jsonl record.
  static std::map<int, nlohmann::json> Records(const std::string& run) {
    std::map<int, nlohmann::json> out;
    std::istringstream in(ReadFile(run + "/metrics.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line);  // throws on a bare nan
      out[j["step"].get<int>()] = j;
    }
    return out;
  }

  // Every committed checkpoint re-reads to its hashes and holds only finite values.
  static void ExpectAllVerify(const std::string& run) {
    auto v = RunCommand(BinDir() + "/ckptctl verify " + run + "/checkpoints --all", 300);
    EXPECT_EQ(v.exit_code, 0) << v.output;
  }

  static std::unique_ptr<TempDir> dir_;
  static std::string data_;
};
std::unique_ptr<TempDir> GuardRunTest::dir_;
std::string GuardRunTest::data_;

// Hybrid shard: the NaN is in rank 3's loss only, so ranks of the other node learn of it
// through the gradient all-reduce across replicas and the norm all-reduce within the node.
TEST_F(GuardRunTest, NanLossOnOneRankIsSkippedEverywhereLikeTheSkipListAndResumesAlike) {
  const std::string hybrid = "--dist.sharding=hybrid_shard";
  const std::string faulty = Path("nan_loss"), listed = Path("listed"), clean = Path("clean");
  auto a = Train(faulty, hybrid, "FTRAIN_FAULT=nan_loss@7:3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_TRUE(Contains(a.output, "guard: step 7 not applied (nonfinite")) << a.output;
  auto b = Train(listed, hybrid + " --data.skip=7");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto c = Train(clean, hybrid);
  ASSERT_EQ(c.exit_code, 0) << c.output;

  EXPECT_EQ(Diff(Final(faulty), Final(listed)), 0) << "the skip differs from data.skip=7";
  EXPECT_NE(Diff(Final(clean), Final(listed)), 0) << "skipping step 7 changed nothing?";
  auto ra = Records(faulty), rb = Records(listed);
  ASSERT_EQ(ra.size(), 20u);
  EXPECT_EQ(ra[7]["skipped"], "nonfinite");
  EXPECT_TRUE(ra[7]["loss"].is_null());
  EXPECT_EQ(rb[7]["skipped"], "listed");
  for (int s = 1; s <= 20; ++s) {
    EXPECT_EQ(ra[s]["loss"], rb[s]["loss"]) << "step " << s;
    if (s != 7) {
      EXPECT_FALSE(ra[s].contains("skipped")) << "step " << s;
    }
  }
  EXPECT_EQ(Losses(clean).at(6), Losses(faulty).at(6));
  EXPECT_NE(Losses(clean).at(8), Losses(faulty).at(8));
  ExpectAllVerify(faulty);

  // A resume from before the fault replays the skip; one from after it carries it.
  for (const char* from : {"step-00000005", "step-00000010"}) {
    const std::string run = Path(std::string("resumed-") + from);
    auto r = Train(run, hybrid + " --train.resume=" + faulty + "/checkpoints/" + from,
                   "FTRAIN_FAULT=nan_loss@7:3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(Diff(Final(faulty), Final(run)), 0) << "resumed from " << from;
    const auto all = Losses(faulty), resumed = Losses(run);
    EXPECT_GE(resumed.size(), 10u) << "resumed from " << from;
    for (const auto& [step, loss] : resumed) {
      EXPECT_EQ(loss, all.at(step)) << "step " << step << ", resumed from " << from;
    }
  }
}

// No shard (every rank a replica): one NaN gradient element on rank 1 at step 4, and a
// 10^4-times gradient on rank 2 at step 12 caught by the spike rule.
TEST_F(GuardRunTest, NanGradientAndSpikeAreSkippedLikeTheSkipList) {
  const std::string opts = "--dist.sharding=no_shard --guard.spike_window=5";
  const std::string faulty = Path("grad_faults"), listed = Path("grad_listed");
  auto a = Train(faulty, opts, "FTRAIN_FAULT=nan_grad@4:1,spike@12:2 FTRAIN_FAULT_FACTOR=1e4");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = Train(listed, opts + " --data.skip=4,12");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(Diff(Final(faulty), Final(listed)), 0);
  auto ra = Records(faulty);
  EXPECT_EQ(ra[4]["skipped"], "nonfinite");
  EXPECT_TRUE(ra[4]["grad_norm"].is_null());
  EXPECT_EQ(ra[12]["skipped"], "spike");
  EXPECT_GT(ra[12]["grad_norm"].get<double>(), 100 * ra[11]["grad_norm"].get<double>());
  auto la = Losses(faulty), lb = Losses(listed);
  for (int s = 1; s <= 20; ++s) {
    if (s != 4 && s != 12) {
      EXPECT_EQ(la[s], lb[s]) << "step " << s;
    }
  }
  ExpectAllVerify(faulty);
}

// guard.policy = rollback, full shard: a 10^4-times gradient on rank 2 at step 12 is caught
// by the spike rule; the run exits 79 and records the step. Its restart (the same command, the
// same environment) resumes the newest checkpoint (step 10), skips steps 11-12 and ends
// bit-identical to a clean run given --data.skip=11-12.
TEST_F(GuardRunTest, RollbackGoesBackToTheNewestCheckpointAndSkipsToTheSpikeLikeTheSkipList) {
  const std::string opts =
      "--dist.sharding=full_shard --guard.policy=rollback "
      "--guard.spike_window=5";
  const std::string env = "FTRAIN_FAULT=spike@12:2 FTRAIN_FAULT_FACTOR=1e4";
  const std::string run = Path("rollback"), listed = Path("rollback_listed");
  auto a = Train(run, opts, env);
  ASSERT_EQ(a.exit_code, 79) << a.output;
  EXPECT_TRUE(Contains(a.output, "guard: step 12 spike")) << a.output;
  EXPECT_TRUE(Contains(a.output, "ROLLING BACK")) << a.output;
  const auto lines = JsonLines(run + "/rollbacks.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["step"], 12);
  EXPECT_EQ(lines[0]["reason"], "spike");
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/step-00000015"));
  EXPECT_EQ(Records(run).size(), 11u) << "step 12 must not be recorded";

  auto again = Train(run, opts, env);  // the job's restart
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(Contains(again.output, "rolled back to step 10: steps 11-12 are read and not"))
      << again.output;
  auto b = Train(listed, opts + " --data.skip=11-12");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(Diff(Final(run), Final(listed)), 0) << "the rollback differs from data.skip=11-12";
  auto ra = Records(run);
  EXPECT_EQ(ra[11]["skipped"], "rollback");
  EXPECT_EQ(ra[12]["skipped"], "rollback");
  EXPECT_FALSE(ra[13].contains("skipped"));
  ExpectAllVerify(run);
}

// Issue 44, hole 10: skip ranges are recorded as applied and replayed exactly. A NaN loss at
// step 12 rolls back; the first continuation resumes step 10, skips 11-12 and records that
// range. A later start that resumes an OLDER checkpoint (step 5: the newer ones are gone, as
// after damage or a requeue onto another root copy) trains 6-10 again and skips only 11-12, so
// its final checkpoint and losses equal the first continuation's bit for bit. (The old rule
// skipped from whatever the start resumed: 6-12.)
TEST_F(GuardRunTest, ARestartFromAnOlderCheckpointReplaysTheRecordedRollbackExactly) {
  const std::string opts = "--dist.sharding=full_shard --guard.policy=rollback";
  const std::string run = Path("rollback_older"), kept = Path("rollback_older_first");
  auto a = Train(run, opts, "FTRAIN_FAULT=nan_loss@12");
  ASSERT_EQ(a.exit_code, 79) << a.output;
  auto first = Train(run, opts);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(Contains(first.output, "rolled back to step 10: steps 11-12 are read and not"))
      << first.output;
  auto lines = JsonLines(run + "/rollbacks.jsonl");
  ASSERT_GE(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "rollback");
  EXPECT_EQ(lines[0]["step"], 12);
  EXPECT_EQ(lines.size(), 2u) << "the applied range is recorded";
  if (lines.size() >= 2) {
    EXPECT_EQ(lines[1]["kind"], "applied");
    EXPECT_EQ(lines[1]["first"], 11);
    EXPECT_EQ(lines[1]["last"], 12);
    EXPECT_EQ(lines[1]["resumed_from"], 10);
  }
  const auto first_losses = Losses(run);
  ASSERT_EQ(
      RunCommand("mkdir -p " + kept + " && cp -r " + Final(run) + " " + kept + "/", 60).exit_code,
      0);
  ASSERT_EQ(RunCommand("rm -rf " + run + "/checkpoints/step-00000010 " + run +
                           "/checkpoints/step-00000015 " + Final(run),
                       60)
                .exit_code,
            0);
  auto later = Train(run, opts);
  ASSERT_EQ(later.exit_code, 0) << later.output;
  EXPECT_TRUE(Contains(later.output, "rolled back to step 5: steps 11-12 are read and not"))
      << later.output;
  EXPECT_EQ(Diff(Final(run), kept + "/step-00000020"), 0)
      << "the start from step 5 differs from the first continuation";
  EXPECT_EQ(Losses(run), first_losses);
  EXPECT_EQ(Records(run)[8].count("skipped"), 0u) << "step 8 was trained by the recorded run";
  EXPECT_EQ(JsonLines(run + "/rollbacks.jsonl").size(), 2u) << "nothing new to record";
  ExpectAllVerify(run);
}

// A NaN loss at step 4 and at step 8 with guard.max_rollbacks = 1: the first rolls back to
// the start (no checkpoint yet); the second would be one too many, so the run ends with exit 2
// naming both steps instead of looping.
TEST_F(GuardRunTest, TheRollbackBudgetEndsTheRunInsteadOfLooping) {
  const std::string opts =
      "--dist.sharding=full_shard --guard.policy=rollback "
      "--guard.max_rollbacks=1";
  const std::string env = "FTRAIN_FAULT=nan_loss@4,nan_loss@8";
  const std::string run = Path("rollback_budget");
  auto a = Train(run, opts, env);
  ASSERT_EQ(a.exit_code, 79) << a.output;
  auto b = Train(run, opts, env);
  ASSERT_EQ(b.exit_code, 2) << b.output;
  EXPECT_TRUE(Contains(b.output, "rolled back to step 0: steps 1-4")) << b.output;
  EXPECT_TRUE(Contains(b.output,
                       "step 8 would be rollback number 2 within the last 100 steps "
                       "(earlier: 4; guard.max_rollbacks = 1)"))
      << b.output;
  // The rollback of step 4 and the range its restart applied; no rollback of step 8.
  const auto lines = JsonLines(run + "/rollbacks.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["kind"], "rollback");
  EXPECT_EQ(lines[1]["kind"], "applied");
  EXPECT_EQ(lines[1]["first"], 1);
  EXPECT_EQ(lines[1]["last"], 4);
  ExpectAllVerify(run);
}

// The control: with the guard off the NaN is applied, and `ckptctl verify` finds it.
TEST_F(GuardRunTest, WithTheGuardOffTheNanIsAppliedAndVerifyNamesIt) {
  const std::string run = Path("guard_off");
  auto a = Train(run, "--dist.sharding=full_shard --guard.policy=off --train.steps=10",
                 "FTRAIN_FAULT=nan_loss@3:0");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto v = RunCommand(BinDir() + "/ckptctl verify " + run + "/checkpoints/step-00000005", 300);
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_TRUE(Contains(v.output, "non-finite values")) << v.output;
}

TEST_F(GuardRunTest, BadGuardInputExits2BeforeStep1NamingTheKey) {
  struct Case {
    std::string env, args, expect;
  } cases[] = {
      {"", "--data.skip=3,21", "data.skip: '21' names a step that does not exist"},
      {"", "--guard.policy=off --guard.spike_window=5",
       "guard.spike_window is set but guard.policy = off"},
      {"", "--guard.policy=sometimes", "guard.policy = 'sometimes' is not one of"},
      {"FTRAIN_FAULT=bitflop@3", "", "FTRAIN_FAULT: 'bitflop@3' names no known fault"},
      {"", "--guard.sdc_every_steps=-1", "guard.sdc_every_steps must be in [0, 100000000]"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const std::string run = Path("bad" + std::to_string(i++));
    auto r = Train(run, c.args, c.env);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.expect)) << c.args << "\n" << r.output;
    EXPECT_TRUE(ReadFile(run + "/metrics.jsonl").empty()) << "a step ran: " << c.args;
  }
}

// The "sdc" records of a run's restarts.jsonl.
std::vector<nlohmann::json> SdcRecords(const std::string& run) {
  std::vector<nlohmann::json> out;
  for (const auto& j : JsonLines(run + "/restarts.jsonl")) {
    if (j.value("event", "") == "sdc") out.push_back(j);
  }
  return out;
}

// Hybrid shard over 2 nodes x 2: a bit of rank 3's master shard flips after step 7; the
// replicas (ranks 1 and 3, the same local rank on each node) are compared every 3 steps, so
// step 9 finds them apart. Two replicas cannot outvote each other: both are suspects. Nothing
// after step 8 is recorded or saved; a restart without the fault resumes from step 5 and ends
// bit-identical to a clean run, which itself is bit-identical with the check on and off.
TEST_F(GuardRunTest, SdcBitflipInHybridShardStopsTheRunNamesBothReplicasAndRestartsClean) {
  const std::string hybrid = "--dist.sharding=hybrid_shard";
  const std::string run = Path("sdc_hybrid"), on = Path("sdc_clean_on"), off = Path("sdc_off");
  auto a = Train(run, hybrid + " --guard.sdc_every_steps=3", "FTRAIN_FAULT=bitflip@7:3");
  ASSERT_EQ(a.exit_code, 77) << a.output;
  EXPECT_TRUE(Contains(a.output, "silent data corruption after step 9")) << a.output;
  // `ftrain launch --nodes 2` names its nodes launch-node0 and launch-node1.
  EXPECT_TRUE(Contains(a.output, "rank 3 (node 1, host launch-node1)")) << a.output;
  EXPECT_TRUE(Contains(a.output, "rank 1 (node 0, host launch-node0)")) << a.output;
  EXPECT_EQ(Records(run).size(), 8u) << "step 9 must not be recorded";
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/step-00000010"));
  const auto sdc = SdcRecords(run);
  ASSERT_EQ(sdc.size(), 1u) << ReadFile(run + "/restarts.jsonl");
  EXPECT_EQ(sdc[0]["step"], 9);
  EXPECT_EQ(sdc[0]["ranks"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(sdc[0]["nodes"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(sdc[0]["by_majority"], false);
  const auto q = JsonLines(run + "/quarantine.jsonl");
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[1]["rank"], 3);
  EXPECT_EQ(q[1]["node"], 1);
  EXPECT_EQ(q[1]["step"], 9);
  EXPECT_EQ(q[1]["cause"], "sdc");
  EXPECT_EQ(q[1]["host"], "launch-node1");
  EXPECT_EQ(sdc[0]["hosts"], nlohmann::json::array({"launch-node0", "launch-node1"}));

  // The job's restart, in the same environment: the bitflip fired once and fires no more.
  auto again = Train(run, hybrid + " --guard.sdc_every_steps=3", "FTRAIN_FAULT=bitflip@7:3");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_FALSE(Contains(again.output, "FTRAIN_FAULT: flipped")) << again.output;
  EXPECT_EQ(ReadFile(run + "/.faults_fired"), "bitflip@7:3\n");
  auto c = Train(on, hybrid + " --guard.sdc_every_steps=1");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_TRUE(Contains(c.output, "replicas compare their master shards' hashes every 1"))
      << c.output;
  auto d = Train(off, hybrid);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_EQ(Diff(Final(on), Final(off)), 0) << "the check changed bits";
  EXPECT_EQ(Diff(Final(run), Final(off)), 0) << "the restart did not end where a clean run does";
  ExpectAllVerify(run);
}

// No shard over 4 ranks: a majority names the one bad replica. The flip on rank 0 (the rank
// that writes the checkpoints) after step 5, with the check every 7 steps, is still caught at
// step 5: the check runs before every checkpoint, so the corrupted shard is never committed.
TEST_F(GuardRunTest, SdcBitflipInNoShardIsNamedByMajorityBeforeTheCheckpoint) {
  const std::string run = Path("sdc_no_shard");
  auto a =
      Train(run, "--dist.sharding=no_shard --guard.sdc_every_steps=7", "FTRAIN_FAULT=bitflip@5:0");
  ASSERT_EQ(a.exit_code, 77) << a.output;
  EXPECT_TRUE(Contains(a.output, "silent data corruption after step 5")) << a.output;
  EXPECT_TRUE(Contains(a.output, "rank 0 (node 0, host launch-node0)")) << a.output;
  EXPECT_TRUE(Contains(a.output, "disagrees with the majority of 4 replicas")) << a.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/checkpoints/step-00000005"))
      << "a corrupted shard committed";
  const auto sdc = SdcRecords(run);
  ASSERT_EQ(sdc.size(), 1u);
  EXPECT_EQ(sdc[0]["ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(sdc[0]["by_majority"], true);
  EXPECT_EQ(sdc[0]["replicas"], 4);
  const auto q = JsonLines(run + "/quarantine.jsonl");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0]["rank"], 0);
  EXPECT_EQ(q[0]["by_majority"], true);

  // full_shard keeps no replica: the check says so once and the run trains on.
  auto f = Train(Path("sdc_full"),
                 "--dist.sharding=full_shard --guard.sdc_every_steps=1 "
                 "--train.steps=2");
  EXPECT_EQ(f.exit_code, 0) << f.output;
  EXPECT_TRUE(Contains(f.output, "keeps no replica of a shard")) << f.output;
}

// More non-finite steps than guard.max_skips within the window: the run ends with exit 2
// (slurm/train.sh does not restart it), naming the steps.
TEST_F(GuardRunTest, TheSkipBudgetEndsTheRunWithTheSteps) {
  const std::string run = Path("budget");
  auto r = Train(run, "--guard.max_skips=1", "FTRAIN_FAULT=nan_loss@3,nan_loss@4:2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "2 steps skipped within the last 100 (steps 3,4")) << r.output;
}

// The hang guard: a rank stops progressing at the start of a step (FTRAIN_FAULT=stall) while
// the others wait for it in the step's first collective. With guard.hang_floor_s = 3 the
// others name it with its host and every rank exits 78 long before the 600 s collective
// timeout; the rank that records it is the lowest one not hung (rank 1 when rank 0 hangs).
// The job's restart, in the same environment (the stall fired once and fires no more),
// resumes from step 5 and ends bit-identical to a clean run.
TEST_F(GuardRunTest, AStalledRankIsNamedWithItsHostEndedFastAndTheRestartEndsBitIdentical) {
  using Clock = std::chrono::steady_clock;
  const std::string opts = "--dist.sharding=hybrid_shard --guard.hang_floor_s=3";
  const std::string clean = Path("hang_clean");
  const auto c0 = Clock::now();
  auto c = Train(clean, opts);
  const double clean_s = std::chrono::duration<double>(Clock::now() - c0).count();
  ASSERT_EQ(c.exit_code, 0) << c.output;
  struct Case {
    int step, rank, node, recorder;
  } cases[] = {{6, 3, 1, 0}, {8, 0, 0, 1}};
  for (const Case& k : cases) {
    const std::string run = Path("hang_rank" + std::to_string(k.rank));
    const std::string fault =
        "FTRAIN_FAULT=stall@" + std::to_string(k.step) + ":" + std::to_string(k.rank);
    const auto t0 = Clock::now();
    auto a = Train(run, opts, fault);
    const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_EQ(a.exit_code, 78) << a.output;
    const std::string who = "rank " + std::to_string(k.rank) + " (node " + std::to_string(k.node) +
                            ", host launch-node" + std::to_string(k.node) +
                            ") hung in compute of step " + std::to_string(k.step);
    EXPECT_TRUE(Contains(a.output, who)) << a.output;
    EXPECT_TRUE(Contains(a.output, "this rank is the one the others wait for")) << a.output;
    EXPECT_TRUE(Contains(a.output, "hang: stack of the main thread")) << a.output;
    const auto hangs = JsonLines(run + "/hangs.jsonl");
    ASSERT_EQ(hangs.size(), 1u) << ReadFile(run + "/hangs.jsonl");
    const nlohmann::json& h = hangs[0];
    EXPECT_EQ(h["rank"], k.rank);
    EXPECT_EQ(h["node"], k.node);
    EXPECT_EQ(h["host"], "launch-node" + std::to_string(k.node));
    EXPECT_EQ(h["step"], k.step);
    EXPECT_EQ(h["phase"], "compute");
    EXPECT_EQ(h["detected_by"], k.recorder);
    const double threshold = h["threshold_s"].get<double>(), stuck = h["stuck_s"].get<double>();
    EXPECT_GE(threshold, 3);
    EXPECT_GE(stuck, threshold);
    EXPECT_LE(stuck, 3 * threshold) << "named late";
    // The whole faulty launch ran fewer steps than the clean one: it may take the clean run's
    // time plus 3 thresholds, never the 600 s collective timeout.
    EXPECT_LT(wall_s, clean_s + 3 * threshold) << "clean run " << clean_s << " s";
    std::printf(
        "[ measured ] stall@%d:%d: threshold %.2f s, named after %.2f s, launch %.1f s "
        "(clean run %.1f s)\n",
        k.step, k.rank, threshold, stuck, wall_s, clean_s);
    EXPECT_EQ(Records(run).size(), static_cast<size_t>(k.step - 1));

    auto again = Train(run, opts, fault);  // the job's restart
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_FALSE(Contains(again.output, "FTRAIN_FAULT: stalling")) << again.output;
    EXPECT_EQ(Diff(Final(run), Final(clean)), 0)
        << "the restart did not end where a clean run does";
    EXPECT_EQ(JsonLines(run + "/hangs.jsonl").size(), 1u);
  }
}

TEST_F(GuardRunTest, ContradictoryHangSettingsExit2BeforeStep1NamingTheKey) {
  const std::string run = Path("hang_bad");
  auto r = Train(run, "--guard.hang_timeout_s=2 --guard.hang_floor_s=5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "guard.hang_timeout_s = 2.000000 is below guard.hang_floor_s"))
      << r.output;
  EXPECT_TRUE(ReadFile(run + "/metrics.jsonl").empty());
}

}  // namespace
}  // namespace ftrain::testing
