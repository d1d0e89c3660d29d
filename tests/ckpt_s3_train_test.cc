// The object-store tier end to end: `ftrain launch` trains the tiny model with ckpt.mirror on
// the moto server; a rank is SIGKILLed once the mirror holds a checkpoint, the file-system
// checkpoint root is deleted (scratch purged), and the relaunch restores the mirror's newest
// checkpoint and finishes bit-identical to an uninterrupted run (`ckptctl diff`, every loss).
// Bad mirror settings exit 2 before step 1.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "moto_server.h"
#include "test_util.h"

namespace ftrain::testing {
namespace {

namespace fs = std::filesystem;
const bool kMoto = RegisterMotoEnvironment();

class S3TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("ftrain-s3-train");
    data_ = dir_->path() + "/data";
    auto r = PackLicenses(data_, "--shard-rows 256");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::string TrainCmd(const std::string& run, const std::string& extra = "",
                              const std::string& daemon = "off") {
    return Ftrain() + " launch --nproc 2 --nodes 1 --grace-s 2 -- train --config " +
           FTRAIN_SOURCE_DIR + "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + run +
           " --train.steps=40 --ckpt.every_steps=5 --ckpt.every_minutes=0 --ckpt.daemon=" + daemon +
           " " + extra;
  }
  // The uninterrupted file-system run every test compares with, made once.
  static const std::string& Reference() {
    static const std::string ref = [] {
      const std::string r = dir_->path() + "/ref";
      auto out = RunCommand(TrainCmd(r), 600);
      EXPECT_EQ(out.exit_code, 0) << out.output;
      return r;
    }();
    return ref;
  }
  static std::unique_ptr<TempDir> dir_;
  static std::string data_;
};
std::unique_ptr<TempDir> S3TrainTest::dir_;
std::string S3TrainTest::data_;

// The newest committed step in the mirror (-1: none), by ckptctl.
int MirrorLatest(const std::string& url) {
  auto r = RunCommand(BinDir() + "/ckptctl latest " + url + " 2>/dev/null", 30);
  const size_t at = r.output.rfind("step-");
  return r.exit_code == 0 && at != std::string::npos ? std::stoi(r.output.substr(at + 5)) : -1;
}

TEST_F(S3TrainTest, ScratchPurgedRunResumesFromTheMirrorBitExactly) {
  const std::string& ref = Reference();
  CommandResult r;

  const std::string run = dir_->path() + "/run";
  const std::string url = std::string("s3://") + kS3Bucket + "/train";
  const std::string mirror = "--ckpt.mirror=" + url + " --ckpt.mirror_every_s=0.2";
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("FTRAIN_TEST_TAG", "mirror", 1);
    execl("/bin/sh", "sh", "-c", (TrainCmd(run, mirror) + " >" + run + ".log 2>&1").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int mirrored = -1;
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 6000 && mirrored < 10; ++i) {  // up to 10 minutes
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    mirrored = MirrorLatest(url);
  }
  ASSERT_FALSE(exited) << "the run ended before the mirror held step 10: "
                       << ReadFile(run + ".log");
  for (pid_t p : RankPids("mirror", 1)) kill(p, SIGKILL);
  waitpid(pid, &status, 0);
  ASSERT_GE(mirrored, 10) << ReadFile(run + ".log");
  ASSERT_LT(mirrored, 40) << "the run finished before the kill";

  // The scratch space is purged: the file-system root is gone, only the mirror is left.
  fs::remove_all(run + "/checkpoints");
  r = RunCommand(TrainCmd(run, mirror), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "ckpt.mirror: restored step")) << r.output;
  EXPECT_TRUE(Contains(r.output, "resume: restored step")) << r.output;
  ExpectSameBits(StepDir(ref, 40), StepDir(run, 40), ref, run);
  EXPECT_EQ(MirrorLatest(url), 40);  // the final checkpoint went to the mirror too
  // ftrain report shows each checkpoint's tiers.
  auto report = RunCommand(Ftrain() + " report " + run + " 2>&1", 120);
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_TRUE(Contains(report.output, "committed in " + url)) << report.output;
  EXPECT_TRUE(Contains(report.output, "tiers          step 40: file+mirror")) << report.output;
}

// ckpt.root = s3://: ckptd (its S3 traffic through a proxy that hangs the PUT of step 10's
// manifest) persists and commits step 5 on S3, then is SIGKILLed with the ranks in the
// middle of committing step 10: S3 shows step 10 partial and step 5 as the newest. The staging
// root is lost with its node; the relaunch restores step 5 from S3 (every file checked),
// aborts what the killed upload left, and finishes with step 40 bit-identical to the
// file-system run's (ckptctl diff between the file system and s3://) and the same losses.
TEST_F(S3TrainTest, S3RootKilledUploadIsInvisibleAndTheResumeFallsBackBitExactly) {
  const std::string& ref = Reference();
  const std::string run = dir_->path() + "/s3root";
  const std::string url = std::string("s3://") + kS3Bucket + "/s3root";
  const std::string staging = run + "/ckpt-staging";
  fs::create_directories(run);
  TempDir proxy_dir("s3-hang");
  const auto [hang, proxy] = StartS3Proxy(
      proxy_dir, {"--stall-match", "^PUT .*step-00000010/manifest\\.json", "--stall-s", "600"});
  const int daemon = SpawnChild({"env", "AWS_ENDPOINT_URL=" + hang, BinDir() + "/ckptd", "--root",
                                 staging, "--run-dir", run, "--threads", "1", "--keep", "3"},
                                run + "/ckptd.log");
  for (int i = 0; i < 400 && !Contains(ReadFile(run + "/ckptd.log"), "serving node"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(Contains(ReadFile(run + "/ckptd.log"), "serving node"))
      << ReadFile(run + "/ckptd.log");
  const std::string root = "--ckpt.root=" + url;
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("FTRAIN_TEST_TAG", "s3root", 1);
    execl("/bin/sh", "sh", "-c",
          (TrainCmd(run, root, "require") + " >" + run + ".log 2>&1").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string faults = proxy_dir.path() + "/proxy.port.faults";
  int status = 0;
  for (int i = 0; i < 1200 && !fs::exists(faults); ++i) {  // up to 2 minutes
    if (waitpid(pid, &status, WNOHANG) == pid) break;      // the run ended: it failed
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(fs::exists(faults)) << "step 10's commit never reached S3: " << ReadFile(run + ".log")
                                  << ReadFile(run + "/ckptd.log");
  SignalAndReap(daemon, SIGKILL);
  for (int rank : {0, 1}) {
    for (pid_t p : RankPids("s3root", rank)) kill(p, SIGKILL);
  }
  waitpid(pid, &status, 0);
  SignalAndReap(proxy, SIGTERM);
  // The killed commit is invisible: step 10's shards are there, its manifest is not.
  auto r = RunCommand(BinDir() + "/ckptctl list " + url + " 2>&1", 60);
  EXPECT_TRUE(Contains(r.output, "step-00000010  partial")) << r.output;
  EXPECT_EQ(MirrorLatest(url), 5) << r.output;
  r = RunCommand(BinDir() + "/ckptd --cleanup --root " + staging + " --run-dir " + run, 30);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  fs::remove_all(staging);  // the staging root is lost with its node

  r = RunCommand(TrainCmd(run, root), 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "checkpoint: restored step 5 from " + url)) << r.output;
  EXPECT_TRUE(Contains(r.output, "s3 checkpoints: cleaned up")) << r.output;
  ExpectSameBits(StepDir(ref, 40), url + "/step-00000040", ref, run);
  r = RunCommand(BinDir() + "/ckptctl list " + url + " 2>&1", 60);
  EXPECT_FALSE(Contains(r.output, "partial")) << r.output;  // the killed upload is cleaned up
  EXPECT_TRUE(Contains(r.output, "step-00000030  complete")) << r.output;  // ckpt.keep = 3
  EXPECT_FALSE(Contains(r.output, "step-00000025")) << r.output;
}

// ckptd for `run`'s staging root with its S3 traffic through a proxy that answers 503 to
// everything while `down` exists (made here: the store starts down). Returns {ckptd, proxy}.
std::pair<int, int> CkptdBehindAnOutage(const std::string& run, const TempDir& proxy_dir,
                                        const std::string& down) {
  fs::create_directories(run);
  std::ofstream(down) << "down\n";
  const auto [proxied, proxy] = StartS3Proxy(proxy_dir, {"--down-file", down});
  const int daemon =
      SpawnChild({"env", "AWS_ENDPOINT_URL=" + proxied, BinDir() + "/ckptd", "--root",
                  run + "/ckpt-staging", "--run-dir", run, "--threads", "1", "--keep", "3"},
                 run + "/ckptd.log");
  for (int i = 0; i < 400 && !Contains(ReadFile(run + "/ckptd.log"), "serving node"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return {daemon, proxy};
}

// ckpt.root = s3://, an outage while training goes on: every step ckptd persists is staged,
// not committed, and the run (its last checkpoint not a durable one) ends with nothing on S3.
// Once the store is back, ckptd's retry thread commits the newest staged step on its own.
TEST_F(S3TrainTest, S3RootUploadThatMeetsAnOutageIsRetriedByCkptd) {
  const std::string run = dir_->path() + "/outage";
  const std::string url = std::string("s3://") + kS3Bucket + "/outage";
  TempDir proxy_dir("s3-down");
  const std::string down = proxy_dir.path() + "/DOWN";
  const auto [daemon, proxy] = CkptdBehindAnOutage(run, proxy_dir, down);
  auto r = RunCommand(
      TrainCmd(run, "--ckpt.root=" + url + " --train.steps=22 --ckpt.save_final=false", "require"),
      600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int i = 0; i < 1200 && !Contains(ReadFile(run + "/ckptd.log"), "trying again in"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(Contains(ReadFile(run + "/ckptd.log"), "trying again in"))
      << ReadFile(run + "/ckptd.log");
  EXPECT_EQ(MirrorLatest(url), -1) << "committed through a store that was down";
  fs::remove(down);  // the store is back
  int latest = -1;
  for (int i = 0; i < 1200 && latest < 20; ++i) {  // up to 2 minutes
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    latest = MirrorLatest(url);
  }
  EXPECT_EQ(latest, 20) << ReadFile(run + "/ckptd.log");
  EXPECT_TRUE(Contains(ReadFile(run + "/ckpt-staging/S3_LATEST"), "step-00000020"));
  SignalAndReap(daemon, SIGTERM);
  SignalAndReap(proxy, SIGTERM);
}

// The same outage at a durable save (the final checkpoint): ckptd commits the step in the
// staging root but cannot upload it, and the rank, which reaches S3, uploads it itself (a
// rewrite of its shard would be refused: the step is committed there). The run succeeds only
// because S3 holds step 20.
TEST_F(S3TrainTest, S3RootDurableSaveUploadsWhatCkptdCouldNot) {
  const std::string run = dir_->path() + "/durable";
  const std::string url = std::string("s3://") + kS3Bucket + "/durable";
  TempDir proxy_dir("s3-down");
  const auto [daemon, proxy] = CkptdBehindAnOutage(run, proxy_dir, proxy_dir.path() + "/DOWN");
  auto r = RunCommand(TrainCmd(run, "--ckpt.root=" + url + " --train.steps=20", "require"), 600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "uploads step 20 to " + url + " itself")) << r.output;
  EXPECT_EQ(MirrorLatest(url), 20) << r.output;
  SignalAndReap(daemon, SIGTERM);
  SignalAndReap(proxy, SIGTERM);
}

// The same at a durable save without ckptd (ckpt.daemon = off): the committing rank's upload
// of step 20 meets 503 on its manifest's HEAD 14 times, more than two rounds of the HTTP
// client's own retries (6 each: the periodic save of step 20, then the final one), so
// CommitStaged fails as an outage; the final save tries again and the run ends with step 20
// on S3 (before, the final save failed and so did the run).
TEST_F(S3TrainTest, S3RootDurableSyncSaveRetriesAnOutage) {
  const std::string run = dir_->path() + "/sync-outage";
  const std::string url = std::string("s3://") + kS3Bucket + "/sync-outage";
  TempDir proxy_dir("s3-fail-match");
  const auto [proxied, proxy] = StartS3Proxy(
      proxy_dir,
      {"--fail-match", "^HEAD .*step-00000020/manifest\\.json", "--fail-match-count", "14"});
  auto r = RunCommand("AWS_ENDPOINT_URL=" + proxied + " " +
                          TrainCmd(run, "--ckpt.root=" + url + " --train.steps=20"),
                      600);
  SignalAndReap(proxy, SIGTERM);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "step 20 is staged, not committed")) << r.output;
  EXPECT_TRUE(Contains(r.output, "trying again in")) << r.output;
  EXPECT_EQ(MirrorLatest(url), 20) << r.output;
}

// ckpt.root = s3:// with its upload settings: the trainer records them in the staging root's
// S3_ROOT for every writer, and `ftrain report` shows each checkpoint's tiers: the staged
// copy on the file system and the commit on S3 (a staged copy removed leaves "s3" alone).
TEST_F(S3TrainTest, S3RootRunReportsEachCheckpointsTiers) {
  const std::string run = dir_->path() + "/tiers";
  const std::string url = std::string("s3://") + kS3Bucket + "/tiers";
  auto r = RunCommand(TrainCmd(run, "--ckpt.root=" + url +
                                        " --train.steps=20 --ckpt.s3_part_mb=5 "
                                        "--ckpt.s3_threads=2 --ckpt.s3_max_mb_s=500"),
                      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string staging = run + "/ckpt-staging";
  const std::string marker = ReadFile(staging + "/S3_ROOT");
  EXPECT_TRUE(Contains(marker, url + "\n")) << marker;
  EXPECT_TRUE(Contains(marker, "part_bytes=5242880\n")) << marker;
  EXPECT_TRUE(Contains(marker, "threads=2\n")) << marker;
  EXPECT_TRUE(Contains(marker, "max_bytes_per_s=500000000\n")) << marker;
  fs::remove_all(staging + "/step-00000015");  // only S3 holds step 15 now
  r = RunCommand(
      Ftrain() + " report " + run +
          " --json | python3 -c \"import json,sys; c=json.load(sys.stdin)['checkpoints']; "
          "print(c['s3_root'], c['committed_in_s3'], json.dumps(c['tiers'], "
          "separators=(',', ':')))\" 2>&1",
      120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, url + " 3 [{\"step\":20,\"tiers\":[\"staged\",\"s3\"]},"
                                       "{\"step\":15,\"tiers\":[\"s3\"]},"
                                       "{\"step\":10,\"tiers\":[\"staged\",\"s3\"]}]"))
      << r.output;
  r = RunCommand(Ftrain() + " report " + run + " 2>&1", 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "s3 root        3 committed in " + url)) << r.output;
  EXPECT_TRUE(Contains(r.output, "tiers          step 20: staged+s3, step 15: s3")) << r.output;
}

TEST_F(S3TrainTest, BadMirrorAndS3RootSettingsExitTwoBeforeStepOne) {
  const std::string run = dir_->path() + "/bad";
  TempDir proxy_dir("s3-nocond");  // a store that ignores If-None-Match
  const auto [nocond, proxy] = StartS3Proxy(proxy_dir, {"--strip-if-none-match"});
  struct Case {
    std::string extra, env, expect;
  } cases[] = {
      {"--ckpt.mirror=http://x/y", "", "ckpt.mirror must be s3://"},
      {"--ckpt.mirror=s3://b/p --ckpt.mirror_keep=0", "", "ckpt.mirror_keep"},
      {"--ckpt.mirror=s3://b/p --ckpt.mirror_part_mb=1", "", "ckpt.mirror_part_mb"},
      {"--ckpt.root=s3://", "", "no bucket; set ckpt.root = s3://BUCKET/PREFIX"},
      {"--ckpt.root=s3://b/p --ckpt.mirror=s3://b/q", "", "unset ckpt.mirror"},
      {"--ckpt.root=s3://b/p --ckpt.s3_part_mb=4", "", "ckpt.s3_part_mb must be in [5, 5120]"},
      {"--ckpt.root=s3://b/p --ckpt.s3_threads=0", "", "ckpt.s3_threads must be in [1, 64]"},
      {"--ckpt.root=s3://b/p --ckpt.s3_max_mb_s=-1", "", "ckpt.s3_max_mb_s must be in"},
      {"--ckpt.root=s3://no-such-bucket/p", "", "no-such-bucket"},
      {"--ckpt.root=s3://" + std::string(kS3Bucket) + "/p",
       "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME=/nonexistent ", "AWS_ACCESS_KEY_ID"},
      {"--ckpt.root=s3://" + std::string(kS3Bucket) + "/nocond", "AWS_ENDPOINT_URL=" + nocond + " ",
       "If-None-Match"},
      {"--ckpt.mirror=s3://no-such-bucket/p", "", "no-such-bucket"},
      {"--ckpt.mirror=s3://" + std::string(kS3Bucket) + "/p",
       "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME=/nonexistent ", "AWS_ACCESS_KEY_ID"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(c.env + TrainCmd(run, c.extra), 300);
    EXPECT_EQ(r.exit_code, 2) << c.extra << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.expect)) << c.extra << "\n" << r.output;
    EXPECT_TRUE(Losses(run).empty()) << c.extra;  // no step ran
  }
  SignalAndReap(proxy, SIGTERM);
}

}  // namespace
}  // namespace ftrain::testing
