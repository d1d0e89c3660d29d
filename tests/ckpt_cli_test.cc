// `ckptctl` end to end on real checkpoint directories, HDF5/h5py interoperability with no
// ftrain code (our plugin, and hdf5plugin's own zstd filter), and crash tests: a real writer
// process SIGKILLed before every file-system operation of save/commit/rotation and at random
// times; after every kill `ckptctl latest` names a checkpoint that verifies.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "ckpt/store.h"
#include "ckpt_fixture.h"
#include "test_util.h"

namespace ftrain::testing {
namespace {

std::string Ckptctl() { return BinDir() + "/ckptctl"; }
std::string PluginDir() { return BinDir() + "/../lib/hdf5-plugins"; }

class CkptctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = tmp_.path() + "/ckpt";
    ckpt::CheckpointStore store(root_, Env::Default());
    ckpt::WriteOptions o;
    o.zstd_level = 3;
    o.chunk_bytes = 2048;
    for (int step : {10, 20, 30}) ASSERT_TRUE(SaveFixture(&store, step, 2, o, 4).ok());
  }
  TempDir tmp_;
  std::string root_;
};

TEST_F(CkptctlTest, ListLatestInspect) {
  auto r = RunCommand(Ckptctl() + " list " + root_, 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("30 +complete .*LATEST"))) << r.output;
  EXPECT_LT(r.output.find("30 "), r.output.find("10 ")) << "newest first";
  r = RunCommand(Ckptctl() + " list " + root_ + " --json", 30);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output, "\"compression_ratio\"")) << r.output;
  r = RunCommand(Ckptctl() + " latest " + root_, 30);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, root_ + "/step-00000030\n");
  r = RunCommand(Ckptctl() + " inspect " + root_ + "/step-00000020", 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "model.layers.0.mlp.up_proj.weight")) << r.output;
  EXPECT_TRUE(Contains(r.output, "bfloat16")) << r.output;
  EXPECT_TRUE(Contains(r.output, "data-abc")) << r.output;
}

TEST_F(CkptctlTest, VerifyGoodAndBad) {
  auto r = RunCommand(Ckptctl() + " verify " + root_ + " --all", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "MB/s")) << r.output;
  // Flip one byte in the middle of a shard of step 20.
  const std::string shard = root_ + "/step-00000020/shard-00001.h5";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto size = f.tellg();
  f.seekp(size / 2);
  f.put('\x7f');
  f.close();
  r = RunCommand(Ckptctl() + " verify " + root_ + "/step-00000020", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, shard)) << r.output;
  r = RunCommand(Ckptctl() + " verify " + root_ + " --all --json", 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.output, "\"ok\": false")) << r.output;
  // --verified skips nothing here (30 is fine) but must check.
  r = RunCommand(Ckptctl() + " latest " + root_ + " --verified", 60);
  EXPECT_EQ(r.exit_code, 0);
}

TEST_F(CkptctlTest, LatestVerifiedSkipsACorruptNewest) {
  const std::string shard = root_ + "/step-00000030/shard-00000.h5";
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  f.seekp(f.tellg() / 3);
  f.put('\x01');
  f.close();
  auto r = RunCommand(Ckptctl() + " latest " + root_ + " --verified 2>/dev/null", 60);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, root_ + "/step-00000020\n");
}

TEST_F(CkptctlTest, DiffPruneExport) {
  auto r =
      RunCommand(Ckptctl() + " diff " + root_ + "/step-00000020 " + root_ + "/step-00000020", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "bit-identical")) << r.output;
  r = RunCommand(Ckptctl() + " diff " + root_ + "/step-00000020 " + root_ + "/step-00000030", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "max abs difference")) << r.output;
  r = RunCommand(Ckptctl() + " prune " + root_ + " --keep 1 --dry-run", 30);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output, "would delete " + root_ + "/step-00000010")) << r.output;
  r = RunCommand(Ckptctl() + " prune " + root_ + " --keep 2", 30);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "deleted " + root_ + "/step-00000010")) << r.output;
  r = RunCommand(Ckptctl() + " export " + root_ + " --format safetensors -o " + tmp_.path() +
                     "/m.safetensors --dtype fp32",
                 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "exported 5 tensors")) << r.output;
}

// --corrupt --dry-run lists the set-aside and the writer leftovers and removes nothing (it
// once removed the leftovers for real); without --dry-run both go.
TEST_F(CkptctlTest, PruneCorruptDryRunRemovesNothing) {
  const std::string corrupt = root_ + "/step-00000005.corrupt", claim = root_ + "/.claim-9-9-9";
  ASSERT_EQ(RunCommand("cp -r " + root_ + "/step-00000010 " + corrupt + " && mkdir " + claim, 30)
                .exit_code,
            0);
  auto r = RunCommand(Ckptctl() + " prune " + root_ + " --keep 3 --corrupt --dry-run", 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "would delete " + claim)) << r.output;
  EXPECT_TRUE(Contains(r.output, "would delete " + corrupt)) << r.output;
  EXPECT_EQ(RunCommand("test -d " + claim + " && test -d " + corrupt, 5).exit_code, 0);
  r = RunCommand(Ckptctl() + " prune " + root_ + " --keep 3 --corrupt", 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "deleted " + claim)) << r.output;
  EXPECT_NE(RunCommand("test -e " + claim + " || test -e " + corrupt, 5).exit_code, 0);
}

// Writes step `step` of the fixture (2 ranks) into `root`, with `change` applied to each
// rank's contents first (its tensor bytes may be repointed at `scratch`).
void SaveChanged(
    const std::string& root, int64_t step,
    const std::function<void(int rank, ckpt::ShardContents*, std::vector<uint8_t>*)>& change) {
  ckpt::CheckpointStore store(root, Env::Default());
  const auto meta = FixtureMeta(step, 2);
  for (int r = 0; r < 2; ++r) {
    RankState state(step, r, 2, 4);
    ckpt::ShardContents c = state.contents();
    std::vector<uint8_t> scratch;
    change(r, &c, &scratch);
    ASSERT_TRUE(store.WriteShard(meta, r, c, {}).ok());
  }
  auto outcome = store.TryCommit(meta);
  ASSERT_TRUE(outcome.ok() && *outcome == ckpt::CommitOutcome::kCommitted);
}

// ckptctl diff is the oracle of every bit-identity test: it must see the smallest change.
TEST_F(CkptctlTest, DiffCatchesOneFlippedElementInOneTensor) {
  const std::string a = tmp_.path() + "/a", b = tmp_.path() + "/b";
  SaveChanged(a, 20, [](int, ckpt::ShardContents*, std::vector<uint8_t>*) {});
  std::string flipped;
  SaveChanged(b, 20, [&](int rank, ckpt::ShardContents* c, std::vector<uint8_t>* scratch) {
    if (rank != 1) return;
    // The lowest mantissa bit of one fp32 AdamW moment element in the middle of rank 1's piece.
    for (auto& t : c->tensors) {
      if (t.kind != "optim/exp_avg_sq" || t.length < 8) continue;
      const size_t bytes = static_cast<size_t>(t.length) * 4;
      scratch->assign(static_cast<const uint8_t*>(t.data),
                      static_cast<const uint8_t*>(t.data) + bytes);
      (*scratch)[(t.length / 2) * 4] ^= 1;
      t.data = scratch->data();
      flipped = t.kind + "/" + t.name;
      return;
    }
  });
  ASSERT_FALSE(flipped.empty());
  auto same =
      RunCommand(Ckptctl() + " diff " + a + "/step-00000020 " + root_ + "/step-00000020", 60);
  EXPECT_EQ(same.exit_code, 0) << "the unchanged copy must equal the fixture: " << same.output;
  auto r = RunCommand(Ckptctl() + " diff " + a + "/step-00000020 " + b + "/step-00000020", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "differs: " + flipped + ": 1 of ")) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1)
      << "exactly one difference: " << r.output;
}

TEST_F(CkptctlTest, DiffCatchesAPerRankBlobDifferenceAndNamesTheRank) {
  for (const std::string group : {"rng", "data"}) {
    const std::string a = tmp_.path() + "/a-" + group, b = tmp_.path() + "/b-" + group;
    SaveChanged(a, 20, [](int, ckpt::ShardContents*, std::vector<uint8_t>*) {});
    std::string changed;
    SaveChanged(b, 20, [&](int rank, ckpt::ShardContents* c, std::vector<uint8_t>*) {
      if (rank != 1) return;
      for (auto& blob : c->blobs) {
        if (blob.group != group) continue;
        blob.bytes.back() ^= 1;  // one bit of rank 1's RNG state or data cursor
        changed = "state " + blob.group + "/" + blob.name + " of rank 1";
      }
    });
    ASSERT_FALSE(changed.empty()) << group;
    auto r = RunCommand(Ckptctl() + " diff " + a + "/step-00000020 " + b + "/step-00000020", 60);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, "differs: " + changed + "\n") << group;
  }
}

TEST_F(CkptctlTest, UsageAndEnvironmentErrorsExit2) {
  const std::vector<std::string> cases = {"",
                                          "bogus",
                                          "list",
                                          "list " + root_ + " --nope",
                                          "list /nonexistent/root",
                                          "prune " + root_ + " --keep 0",
                                          "export " + root_ + " --format npz -o x",
                                          "verify /nonexistent",
                                          "latest /nonexistent"};
  for (const std::string& args : cases) {
    auto r = RunCommand(Ckptctl() + " " + args, 30);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << args;
  }
  TempDir empty;
  auto r = RunCommand(Ckptctl() + " latest " + empty.path(), 30);
  EXPECT_EQ(r.exit_code, 1) << r.output;  // a valid root with nothing complete: "bad"
}

TEST_F(CkptctlTest, ReadableWithoutFtrainCode) {
  const std::string weights = tmp_.path() + "/w.safetensors";
  ASSERT_EQ(RunCommand(Ckptctl() + " export " + root_ + "/step-00000030 --format safetensors -o " +
                           weights + " --dtype fp32",
                       60)
                .exit_code,
            0);
  const std::string shard = root_ + "/step-00000030/shard-00001.h5";
  // h5dump with our plugin decompresses a zstd dataset.
  auto r = RunCommand(
      "HDF5_PLUGIN_PATH=" + PluginDir() + " h5dump -d /master/model.norm.weight " + shard, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "DATA")) << r.output;
  EXPECT_FALSE(Contains(r.output, "error")) << r.output;
  // h5py through our plugin, and an independent decoder of the raw chunks (python-zstandard
  // + numpy unshuffle): same bytes, and equal to the exported weights.
  const std::string script = std::string(FTRAIN_SOURCE_DIR) + "/tests/h5_interop.py";
  auto ours = RunCommand("HDF5_PLUGIN_PATH=" + PluginDir() + " /usr/bin/python3 " + script +
                             " read " + shard + " " + weights,
                         120);
  ASSERT_EQ(ours.exit_code, 0) << ours.output;
  auto theirs =
      RunCommand("/usr/bin/python3 " + script + " read-raw " + shard + " " + weights, 120);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
  EXPECT_EQ(ours.output, theirs.output);
  // The other direction: chunks compressed by python-zstandard decode with our filter.
  const std::string foreign = tmp_.path() + "/foreign.h5";
  // (HDF5 insists that a declared filter is loadable even when every chunk is written raw.)
  auto w = RunCommand(
      "HDF5_PLUGIN_PATH=" + PluginDir() + " /usr/bin/python3 " + script + " write-raw " + foreign,
      60);
  ASSERT_EQ(w.exit_code, 0) << w.output;
  auto rd = RunCommand("HDF5_PLUGIN_PATH=" + PluginDir() + " /usr/bin/python3 " + script +
                           " read-foreign " + foreign,
                       60);
  ASSERT_EQ(rd.exit_code, 0) << rd.output;
  EXPECT_EQ(w.output.substr(6), rd.output.substr(5));
}

// ---- crash tests -------------------------------------------------------------------------------

std::string Writer() { return BinDir() + "/ckpt_crash_writer"; }

// After a crash: the latest is one of the expected steps and it verifies; then a new writer
// process recovers and continues to `next_last`.
void CheckAfterCrash(const std::string& root, const std::set<std::string>& allowed,
                     int64_t next_last, const std::string& where) {
  auto latest = RunCommand(Ckptctl() + " latest " + root, 30);
  ASSERT_EQ(latest.exit_code, 0) << where << "\n" << latest.output;
  std::string path = latest.output.substr(0, latest.output.size() - 1);
  ASSERT_TRUE(allowed.count(path.substr(path.size() - 13))) << where << ": latest " << path;
  auto verify = RunCommand(Ckptctl() + " verify " + path, 60);
  ASSERT_EQ(verify.exit_code, 0) << where << "\n" << verify.output;
  // The next job start recovers first (it may finish a commit the dead writer had begun).
  auto recover = RunCommand(Writer() + " " + root + " 1 0 2 2", 60);
  ASSERT_EQ(recover.exit_code, 0) << where << "\n" << recover.output;
  latest = RunCommand(Ckptctl() + " latest " + root, 30);
  path = latest.output.substr(0, latest.output.size() - 1);
  ASSERT_TRUE(allowed.count(path.substr(path.size() - 13))) << where << ": latest " << path;
  verify = RunCommand(Ckptctl() + " verify " + path, 60);
  ASSERT_EQ(verify.exit_code, 0) << where << " after recovery\n" << verify.output;
  const int64_t step = std::stoll(path.substr(path.size() - 8));
  auto resume = RunCommand(Writer() + " " + root + " " + std::to_string(step + 1) + " " +
                               std::to_string(next_last) + " 2 2",
                           60);
  ASSERT_EQ(resume.exit_code, 0) << where << "\n" << resume.output;
  auto final_latest = RunCommand(Ckptctl() + " latest " + root, 30);
  EXPECT_TRUE(Contains(final_latest.output, "step-0000000" + std::to_string(next_last)))
      << where << "\n"
      << final_latest.output;
  auto all = RunCommand(Ckptctl() + " verify " + root + " --all", 60);
  EXPECT_EQ(all.exit_code, 0) << where << "\n" << all.output;
}

TEST(CkptCrash, KilledBeforeEveryFileSystemOperation) {
  // Count the operations of saving steps 2 and 3 (with rotation) after a base step 1.
  TempDir probe;
  ASSERT_EQ(RunCommand(Writer() + " " + probe.path() + " 1 1 2 2", 60).exit_code, 0);
  auto traced = RunCommand(
      "FTRAIN_CRASH_AT=1000000 FTRAIN_CRASH_TRACE=1 " + Writer() + " " + probe.path() + " 2 3 2 2",
      60);
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  int ops = 0;
  std::istringstream in(traced.output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("env-op ", 0) == 0) ++ops;
  }
  ASSERT_GE(ops, 40) << traced.output;
  int kills = 0;
  for (int k = 1; k <= ops; ++k) {
    TempDir tmp;
    ASSERT_EQ(RunCommand(Writer() + " " + tmp.path() + " 1 1 2 2", 60).exit_code, 0);
    auto r = RunCommand(
        "FTRAIN_CRASH_AT=" + std::to_string(k) + " " + Writer() + " " + tmp.path() + " 2 3 2 2",
        60);
    ASSERT_EQ(r.exit_code, 137) << "op " << k << " did not kill the writer\n" << r.output;
    ++kills;
    CheckAfterCrash(tmp.path(), {"step-00000001", "step-00000002", "step-00000003"}, 5,
                    "crash before op " + std::to_string(k));
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(kills, 20);
}

TEST(CkptCrash, KilledAtRandomTimesDuringLargeWrites) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 12; ++i) {
    TempDir tmp;
    ASSERT_EQ(RunCommand(Writer() + " " + tmp.path() + " 1 1 2 2", 60).exit_code, 0);
    // A larger state so the kill often lands inside HDF5's own writes.
    pid_t pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      execl(Writer().c_str(), "ckpt_crash_writer", tmp.path().c_str(), "2", "6", "2", "400",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const int delay_ms = 5 + static_cast<int>(rng() % 400);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    // The writer died of the kill (mid-write), not of its own end or of an error.
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "random kill " << i << " at " << delay_ms << " ms came after the writer ended "
        << "(status " << status << "): the case tested nothing";
    CheckAfterCrash(tmp.path(),
                    {"step-00000001", "step-00000002", "step-00000003", "step-00000004",
                     "step-00000005", "step-00000006"},
                    8, "random kill " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace ftrain::testing
