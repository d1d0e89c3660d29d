// The trainer end to end through real processes: `ftrain launch` with 4 ranks (hybrid 2 x 2)
// trains the tiny model on a real packed corpus; ranks are SIGKILLed from outside at several
// steps and inside a checkpoint write (a crash point in the Env), or stopped with SIGUSR1;
// relaunching with resume=auto until done must give a final checkpoint bit-identical to an
// uninterrupted run (`ckptctl diff` exits 0) and exactly the same loss at every step.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace ftrain::testing {
namespace {

class TrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("ftrain-train-test");
    root_ = dir_->path();
    data_ = root_ + "/data";
    auto r = PackLicenses(data_, "--shard-rows 256");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  // Command line of one training launch.
  static std::string TrainCmd(const std::string& run, int nproc, int nodes,
                              const std::string& extra = "") {
    return Ftrain() + " launch --nproc " + std::to_string(nproc) + " --nodes " +
           std::to_string(nodes) + " --grace-s 2 -- train --config " + FTRAIN_SOURCE_DIR +
           "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + run +
           " --train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 "
           "--dist.sharding=hybrid_shard " +
           extra;
  }

  // The uninterrupted reference (computed once per configuration).
  static const std::string& Reference(const std::string& extra) {
    // Keyed by the suite's root too: every suite (TrainTest, TrainFallbackTest) makes and
    // removes its own root, so a reference from an earlier suite is gone.
    static std::map<std::string, std::string> refs;
    auto it = refs.find(root_ + "\n" + extra);
    if (it != refs.end()) return it->second;
    const std::string run = root_ + "/ref" + std::to_string(refs.size());
    auto r = RunCommand(TrainCmd(run, 4, 2, extra), 600);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return refs[root_ + "\n" + extra] = run;
  }

  // Relaunches until the run finishes (exit 0), at most `max_launches` times.
  static std::string FinishRun(const std::string& run, const std::string& extra, int max_launches) {
    for (int i = 0; i < max_launches; ++i) {
      auto r = RunCommand(TrainCmd(run, 4, 2, extra), 600);
      if (r.exit_code == 0) {
        EXPECT_TRUE(Contains(r.output, "resume: restored step")) << r.output;
        return r.output;
      }
      ADD_FAILURE() << "relaunch " << i << " exited " << r.exit_code << "\n" << r.output;
    }
    return "";
  }

  static void ExpectSameAsReference(const std::string& run, const std::string& ref) {
    ExpectSameBits(StepDir(ref, 60), StepDir(run, 60), ref, run, 60);
    auto verify = RunCommand(BinDir() + "/ckptctl verify " + run + "/checkpoints --all", 120);
    EXPECT_EQ(verify.exit_code, 0) << verify.output;
    ExpectSinksMatchMetrics(run);
  }

  // However many launches and crashes it took, TensorBoard (its own EventAccumulator) shows
  // one loss per step, equal to metrics.jsonl's, and the Prometheus textfile the final step.
  static void ExpectSinksMatchMetrics(const std::string& run) {
    auto tb = RunCommand(std::string("PYTHONPATH=") + FTRAIN_TENSORBOARD_PYTHONPATH +
                             " /usr/bin/python3 " + FTRAIN_SOURCE_DIR +
                             "/tests/read_tensorboard.py " + run + "/tensorboard 2>/dev/null",
                         120);
    ASSERT_EQ(tb.exit_code, 0) << tb.output;
    std::map<int, float> want, got;
    for (const auto& [step, text] : Losses(run)) want[step] = std::strtof(text.c_str(), nullptr);
    const nlohmann::json scalars = nlohmann::json::parse(tb.output);
    for (const auto& e : scalars.value("train/loss", nlohmann::json::array())) {
      EXPECT_EQ(got.count(e[0].get<int>()), 0u) << "step " << e[0] << " twice in TensorBoard";
      got[e[0].get<int>()] = static_cast<float>(e[1].get<double>());
    }
    EXPECT_EQ(got, want) << "TensorBoard's losses differ from metrics.jsonl";
    const std::string prom = ReadFile(run + "/prometheus/ftrain-rank0.prom");
    EXPECT_TRUE(Contains(prom, "ftrain_step{node=")) << prom;
    EXPECT_TRUE(std::regex_search(prom, std::regex("\nftrain_step\\{[^}]*\\} 60\n"))) << prom;
    EXPECT_TRUE(
        std::regex_search(prom, std::regex("\nftrain_last_checkpoint_step\\{[^}]*\\} 60\n")))
        << prom;
    // A CPU run: no GPU fields, no MFU (no peak given).
    const std::string jsonl = ReadFile(run + "/metrics.jsonl");
    EXPECT_FALSE(Contains(jsonl, "gpu_") || Contains(jsonl, "\"mfu\"")) << jsonl.substr(0, 400);
  }

  static std::unique_ptr<TempDir> dir_;
  static std::string root_;
  static std::string data_;
};

std::unique_ptr<TempDir> TrainTest::dir_;
std::string TrainTest::root_;
std::string TrainTest::data_;

// Starts `cmd` in the background (output to `log`, or discarded), runs `action` once
// metrics.jsonl has `at_step` lines, and waits for the command to end. Returns its exit code.
int LaunchAndActAt(const std::string& cmd, const std::string& run, int at_step,
                   const std::function<void()>& action, const std::string& tag,
                   const std::string& log = "/dev/null") {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("FTRAIN_TEST_TAG", tag.c_str(), 1);
    int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(out, 2);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  bool acted = false;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!acted && static_cast<int>(Losses(run).size()) >= at_step) {
      action();
      acted = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// The step a resume restored from the memory tier, by restarts.jsonl's "resumed" record
// (-1: none did).
int MemoryRestoredStep(const std::string& records) {
  std::smatch m;
  if (!std::regex_search(records, m, std::regex("\"step\":([0-9]+)[^\n]*\"tier\":\"memory\""))) {
    return -1;
  }
  return std::stoi(m[1]);
}

// The step ROOT/MEMORY_TIER.json records as restorable from memory (-1: none yet).
int MemoryRecordStep(const std::string& path) {
  std::smatch m;
  const std::string text = ReadFile(path);
  if (!std::regex_search(text, m, std::regex("\"step\": *([0-9]+)"))) return -1;
  return std::stoi(m[1]);
}

// SIGKILLs rank `rank` once metrics.jsonl has `at_step` lines.
int LaunchAndKillAt(const std::string& cmd, const std::string& run, int at_step, int rank,
                    const std::string& tag) {
  return LaunchAndActAt(
      cmd, run, at_step,
      [&] {
        for (pid_t p : RankPids(tag, rank)) kill(p, SIGKILL);
      },
      tag);
}

// One ckptd per simulated node of `ftrain launch --nodes 2` (launch-node0, launch-node1),
// writing into RUN/checkpoints (or `root`). Stopped (SIGTERM, then waited for) on destruction.
class Daemons {
 public:
  // `ring`: buddy replication between the two (node0 <-> node1), as slurm/agent.sh sets it up.
  explicit Daemons(const std::string& run, const std::string& root = "", bool ring = false)
      : run_(run), root_(root.empty() ? run + "/checkpoints" : root) {
    ::mkdir(run.c_str(), 0755);
    const std::string secret = run + "/job-secret";
    if (ring) {
      const int fd = ::open(secret.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const std::string text = "memory-tier-test-secret-0123456789\n";
      EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
      ::close(fd);
    }
    for (int n = 0; n < 2; ++n) {
      const std::string node = "launch-node" + std::to_string(n);
      const std::string buddy = run + "/ckptd-launch-node" + std::to_string(1 - n) + "/peer-addr";
      pid_t pid = fork();
      if (pid == 0) {
        int out = open((run + "/" + node + ".log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(out, 1);
        dup2(out, 2);
        const std::string r = root.empty() ? run + "/checkpoints" : root;
        if (ring) {
          execl((BinDir() + "/ckptd").c_str(), "ckptd", "--root", r.c_str(), "--run-dir",
                run.c_str(), "--node", node.c_str(), "--threads", "1", "--keep", "3",
                "--peer-listen", "127.0.0.1:0", "--buddy-file", buddy.c_str(), "--job-id",
                "memtier", "--job-secret-file", secret.c_str(), static_cast<char*>(nullptr));
        }
        execl((BinDir() + "/ckptd").c_str(), "ckptd", "--root", r.c_str(), "--run-dir", run.c_str(),
              "--node", node.c_str(), "--threads", "1", "--keep", "3", static_cast<char*>(nullptr));
        _exit(127);
      }
      pids_.push_back(pid);
    }
    for (int n = 0; n < 2; ++n) WaitUp(n);
  }
  ~Daemons() {
    for (pid_t p : pids_) {
      if (p > 0) kill(p, SIGTERM);
    }
    for (pid_t p : pids_) {
      if (p > 0) waitpid(p, nullptr, 0);
    }
    // A SIGKILLed daemon leaves its shared memory behind: what `ckptd --cleanup` is for.
    for (int n = 0; n < 2; ++n) {
      auto r = RunCommand(BinDir() + "/ckptd --cleanup --root " + root_ + " --run-dir " + run_ +
                              " --node launch-node" + std::to_string(n),
                          30);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      if (killed_[n]) {
        EXPECT_TRUE(std::regex_search(r.output, std::regex("[1-9][0-9]* shared-memory segment")))
            << r.output;
      }
    }
  }
  void WaitUp(int n) {
    const std::string log = run_ + "/launch-node" + std::to_string(n) + ".log";
    for (int i = 0; i < 400 && !Contains(ReadFile(log), "serving node"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(Contains(ReadFile(log), "serving node")) << ReadFile(log);
  }
  void Kill(int n) {
    kill(pids_[n], SIGKILL);
    waitpid(pids_[n], nullptr, 0);
    pids_[n] = -1;
    killed_[n] = true;
  }
  std::string Log(int n) const {
    return ReadFile(run_ + "/launch-node" + std::to_string(n) + ".log");
  }

 private:
  std::string run_, root_;
  std::vector<pid_t> pids_;
  bool killed_[2] = {false, false};
};

TEST_F(TrainTest, SigkillAtManyStepsResumesBitExactly) {
  const std::string& ref = Reference("");
  // Rank and step of each kill; several kills in one run, landing at different steps.
  const std::vector<std::pair<int, int>> kills = {{1, 7}, {3, 23}, {0, 38}, {2, 51}};
  const std::string run = root_ + "/killed";
  int launches = 0;
  for (size_t i = 0; i < kills.size(); ++i) {
    const int rc = LaunchAndKillAt(TrainCmd(run, 4, 2), run, kills[i].second, kills[i].first,
                                   "kill" + std::to_string(i));
    ++launches;
    EXPECT_NE(rc, 0) << "kill " << i << " did not stop the job";
  }
  FinishRun(run, "", 3);
  ExpectSameAsReference(run, ref);
  EXPECT_GE(launches, 4);
}

TEST_F(TrainTest, KilledDuringACheckpointWriteResumesBitExactly) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/ckptkill";
  // Rank 1 dies inside its file-system steps of the 2nd and the 4th checkpoint (after HDF5
  // wrote the shard, before or while its receipt lands); rank 0 dies inside a commit.
  for (const char* point :
       {"FTRAIN_CRASH_RANK=1 FTRAIN_CRASH_AT=11", "FTRAIN_CRASH_RANK=1 FTRAIN_CRASH_AT=14",
        "FTRAIN_CRASH_RANK=0 FTRAIN_CRASH_AT=12"}) {
    auto r = RunCommand(std::string(point) + " " + TrainCmd(run, 4, 2), 600);
    EXPECT_EQ(r.exit_code, 137) << point << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, "FTRAIN_CRASH_AT: SIGKILL")) << r.output;
    auto latest = RunCommand(BinDir() + "/ckptctl latest " + run + "/checkpoints", 30);
    if (latest.exit_code == 0) {
      auto v = RunCommand(
          BinDir() + "/ckptctl verify " + latest.output.substr(0, latest.output.size() - 1), 60);
      EXPECT_EQ(v.exit_code, 0) << v.output;
    }
  }
  FinishRun(run, "", 3);
  ExpectSameAsReference(run, ref);
}

TEST_F(TrainTest, Sigusr1CheckpointsExitsForRequeueAndResumesBitExactly) {
  const std::string extra = "--train.grad_accum=2";
  const std::string& ref = Reference(extra);
  const std::string run = root_ + "/usr1";
  // Deliver SIGUSR1 to the launcher (it forwards to every rank) after a few steps, twice.
  for (int at : {9, 33}) {
    const std::string log = root_ + "/usr1-" + std::to_string(at) + ".log";
    pid_t pid = fork();
    const std::string cmd = TrainCmd(run, 4, 2, extra);
    if (pid == 0) {
      int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(out, 2);
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    bool sent = false;
    for (int i = 0; i < 60000 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
      if (!sent && static_cast<int>(Losses(run).size()) >= at) {
        kill(pid, SIGUSR1);
        sent = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(sent) << "the run ended before step " << at;
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 75) << "the graceful stop must exit with 75 (requeue me)";
    // The stop checkpoint is at or after the step the signal came at (a trainer that replayed
    // an older checkpoint would pass the bit-identity check below), and the run stopped there.
    std::smatch m;
    const std::string out = ReadFile(log);
    ASSERT_TRUE(std::regex_search(out, m, std::regex("checkpointed step ([0-9]+)"))) << out;
    const int stopped = std::stoi(m[1]);
    EXPECT_GE(stopped, at);
    EXPECT_LT(stopped, 60);
    EXPECT_EQ(static_cast<int>(Losses(run).size()), stopped);
  }
  FinishRun(run, extra, 2);
  ExpectSameAsReference(run, ref);
}

TEST_F(TrainTest, ResumeOnFewerRanksReshardsAndStaysClose) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/reshard";
  // First part on 4 ranks (2 x 2), stopped by killing a rank after step 30 (checkpoint at
  // 30); the rest on 2 ranks with twice the micro-batch: the same global batch and samples.
  EXPECT_NE(LaunchAndKillAt(TrainCmd(run, 4, 2), run, 31, 2, "reshard"), 0)
      << "the first part must end by the kill";
  const size_t first_part = Losses(run).size();
  ASSERT_GE(first_part, 31u);
  ASSERT_LT(first_part, 60u) << "the kill did not land: the first part ran to the end";
  auto r = RunCommand(Ftrain() + " launch --nproc 2 -- train --config " + FTRAIN_SOURCE_DIR +
                          "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + run +
                          " --train.steps=60 --ckpt.every_steps=5 --ckpt.every_minutes=0 "
                          "--dist.sharding=hybrid_shard --train.micro_batch=8 "
                          "--train.allow_resume_mismatch=true",
                      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "no longer bit-comparable")) << r.output;
  EXPECT_TRUE(Contains(r.output, "resharding")) << r.output;
  EXPECT_TRUE(Contains(r.output, "resume: restored step 30 ")) << r.output;
  auto a = Losses(ref), b = Losses(run);
  ASSERT_EQ(b.size(), 60u);
  const int resumed_at = 30;
  for (int s = 1; s <= resumed_at; ++s) EXPECT_EQ(a[s], b[s]) << "step " << s;
  // Documented tolerance after resharding: 1% per step (only the reduction shapes differ).
  for (int s = resumed_at + 1; s <= 60; ++s) {
    const double x = std::stod(a[s]), y = std::stod(b[s]);
    EXPECT_NEAR(x, y, 0.01 * x) << "step " << s;
  }
}

TEST_F(TrainTest, BadInputIsOneClearLineAndExit2) {
  const std::string base = Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                           "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + root_ +
                           "/bad --train.steps=2 ";
  struct Case {
    std::string args;
    std::string expect;
  } cases[] = {
      {"--train.stepz=3", "unknown config key 'train.stepz'"},
      {"--train.micro_batch=abc", "train.micro_batch = 'abc' is not an integer"},
      {"--train.resume=" + root_ + "/nope/step-00000005", "is not a complete checkpoint"},
      {"--train.init=" + std::string(FTRAIN_SOURCE_DIR) +
           "/tests/fixtures/llama_golden.safetensors --model.hidden_size=32",
       "shape"},
      {"--dist.sharding=zero9", "dist.sharding"},
      {"--ckpt.memory_every_seconds=-3", "ckpt.memory_every_seconds must be in [0, 1e9]"},
      {"--ckpt.memory_every_seconds=later", "ckpt.memory_every_seconds = 'later'"},
      {"--train.device=tpu", "train.device"},
      {"--train.device=cuda", "train.device = cuda needs dist.backend = nccl"},
      {"--dist.backend=nccl", "dist.backend = nccl needs train.device = cuda"},
      // A 70B shape on this host: refused by the plan before anything is allocated, not
      // killed by the OOM killer at step 1.
      {"--model.hidden_size=8192 --model.intermediate_size=28672 --model.num_layers=80 "
       "--model.num_heads=64 --model.num_kv_heads=8",
       "memory: dist.sharding = full_shard needs"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(base + c.args, 120);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.expect)) << c.args << "\n" << r.output;
  }
  auto r = RunCommand(Ftrain() + " train", 30);
  EXPECT_EQ(r.exit_code, 2);
  // This machine has no GPU (the CUDA LibTorch is linked; CUDA is unavailable at run time):
  // this node's fault, not the configuration's: exit 76 and a line in RUN/node_faults.jsonl
  // naming the host (the job controller moves the ranks), no RUN/.config_error.
  const std::string nogpu = root_ + "/nogpu";
  std::filesystem::create_directories(nogpu);
  r = RunCommand(Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                     "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + nogpu +
                     " --train.steps=2 --train.device=cuda --dist.backend=nccl",
                 120);
  EXPECT_EQ(r.exit_code, 76) << r.output;
  EXPECT_TRUE(Contains(r.output, "no usable GPU")) << r.output;
  std::ifstream faults(nogpu + "/node_faults.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(faults, line)) << "no line in node_faults.jsonl";
  EXPECT_TRUE(Contains(line, "\"reason\":\"train.device = cuda, but no usable GPU")) << line;
  EXPECT_TRUE(Contains(line, "\"host\":")) << line;
  EXPECT_FALSE(std::filesystem::exists(nogpu + "/.config_error"));
  // A local data path this node cannot read (a mount missing here) is the node's too: 76
  // naming the path (on every node at once `ftrain job` fails the job as a config error).
  r = RunCommand(Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                     "/configs/tiny.cfg --data.path=/nonexistent/data --run.dir=" + nogpu +
                     " --train.steps=2",
                 120);
  EXPECT_EQ(r.exit_code, 76) << r.output;
  EXPECT_TRUE(Contains(r.output, "data.path '/nonexistent/data' is not readable on this node"))
      << r.output;
  // Data tokenized with a larger vocabulary than the model's: one line, exit 2 (not an abort).
  const std::string big = root_ + "/vocab2000";
  ASSERT_EQ(RunCommand(Ftrain() +
                           " pack --train-tokenizer --vocab-size 2000 --seq-len 32 "
                           "--progress none --out " +
                           big + " /usr/share/common-licenses",
                       300)
                .exit_code,
            0);
  r = RunCommand(Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                     "/configs/tiny.cfg --data.path=" + big + " --run.dir=" + root_ +
                     "/bad2 --train.steps=2",
                 120);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "model.vocab_size")) << r.output;
}

TEST_F(TrainTest, ResumeRefusesADifferentConfigUnlessAllowed) {
  const std::string run = root_ + "/mismatch";
  ASSERT_EQ(RunCommand(TrainCmd(run, 4, 2, "--train.steps=10"), 600).exit_code, 0);
  auto r = RunCommand(TrainCmd(run, 4, 2, "--train.steps=20 --train.lr=0.01"), 600);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "refusing to resume")) << r.output;
  EXPECT_TRUE(Contains(r.output, "config hash")) << r.output;
}

// ---- with ckptd: one daemon per simulated node; checkpoints are handed over through shared
// memory and persisted in the background. The final checkpoint must still be bit-identical to
// the synchronous reference.

TEST_F(TrainTest, WithCkptdSigkilledRanksResumeBitExactlyAndFromMemory) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/daemon-kill";
  Daemons daemons(run);
  const std::string extra = "--ckpt.daemon=require";
  // The first kill lands right after the handoff of step 5 (its metrics line is written
  // after the handoff): the daemons must still commit step 5.
  const std::vector<std::pair<int, int>> kills = {{1, 5}, {3, 23}, {0, 38}, {2, 51}};
  for (size_t i = 0; i < kills.size(); ++i) {
    const int rc = LaunchAndKillAt(TrainCmd(run, 4, 2, extra), run, kills[i].second, kills[i].first,
                                   "dkill" + std::to_string(i));
    EXPECT_NE(rc, 0) << "kill " << i << " did not stop the job";
    if (i == 0) {
      std::string latest;
      for (int t = 0; t < 400 && latest.empty(); ++t) {
        auto l = RunCommand(BinDir() + "/ckptctl latest " + run + "/checkpoints", 30);
        if (l.exit_code == 0) latest = l.output;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      EXPECT_TRUE(Contains(latest, "step-0000000")) << "the handed-over step 5 never committed\n"
                                                    << daemons.Log(0) << daemons.Log(1);
    }
  }
  const std::string out = FinishRun(run, extra, 3);
  ExpectSameAsReference(run, ref);
  // The relaunch after the last kill found its snapshot in the daemons' memory (the shard
  // owners, ranks 0 and 1, restore their pieces from it; hash-checked against the manifest).
  EXPECT_TRUE(std::regex_search(out, std::regex("restored [1-9][0-9]* bytes from ckptd memory")))
      << out;
  EXPECT_FALSE(Contains(out, "did not match the manifest")) << out;
  EXPECT_TRUE(Contains(out, "handed to ckptd")) << out;
  // ... and said so in restarts.jsonl, where ftrain report reads where the state came from.
  const std::string records = ReadFile(run + "/restarts.jsonl");
  EXPECT_TRUE(
      std::regex_search(records, std::regex("\"source\":\"ckptd memory on [1-4] of 4 ranks")))
      << records;
  auto report = RunCommand(Ftrain() + " report " + run, 30);
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_TRUE(Contains(report.output, "state from             ckptd memory on")) << report.output;
}

// Memory tier (issue 35): a disk checkpoint only every 50 steps, a memory snapshot every 3
// (to the node's ckptd and its buddy's). A rank SIGKILLed at step ~40 (no disk checkpoint
// yet): the relaunch restores the newest step restorable from memory, a few steps back, not
// from scratch, and the run ends bit-identical to the uninterrupted one.
TEST_F(TrainTest, MemoryTierKilledRankRestoresFromMemoryBitExactly) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/memtier";
  Daemons daemons(run, "", /*ring=*/true);
  const int every = 3, kill_at = 40;
  const std::string extra =
      "--ckpt.daemon=require --ckpt.every_steps=50 --ckpt.memory_every_steps=" +
      std::to_string(every);
  const int rc = LaunchAndKillAt(TrainCmd(run, 4, 2, extra), run, kill_at, 1, "memtier");
  EXPECT_NE(rc, 0) << "the kill did not stop the job";
  const int done = static_cast<int>(Losses(run).size());  // steps completed before the crash
  ASSERT_EQ(::access((run + "/checkpoints/MEMORY_TIER.json").c_str(), F_OK), 0)
      << daemons.Log(0) << daemons.Log(1);
  const std::string out = FinishRun(run, extra, 2);
  ExpectSameAsReference(run, ref);
  EXPECT_TRUE(Contains(out, "resume: memory tier: step ")) << out;
  EXPECT_FALSE(Contains(out, "FALLING BACK to the disk tier")) << out;
  const std::string records = ReadFile(run + "/restarts.jsonl");
  const int restored = MemoryRestoredStep(records);
  ASSERT_GE(restored, 0) << "no resume from the memory tier:\n" << records;
  // At most one memory interval behind the crash, plus the step the record lags behind the
  // buddy's acknowledgement (the restorable rule is checked at the next step boundary).
  EXPECT_LE(done - restored, every + 1)
      << "crashed after step " << done << ", restored " << restored << "\n"
      << records;
  EXPECT_EQ(restored % every, 0) << records;
  std::printf("memory tier: crashed after step %d, restored step %d (lost %d steps)\n", done,
              restored, done - restored);
  auto report = RunCommand(Ftrain() + " report " + run, 30);
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_TRUE(Contains(report.output, "memory tier (step " + std::to_string(restored)))
      << report.output;
}

// ckpt.memory_every_seconds (no step interval): rank 0's clock decides, every rank takes the
// snapshot at the step the boundary agreed. A rank killed at step ~30 with no disk checkpoint
// yet: the relaunch restores a memory step (not from scratch) and ends bit-identical.
TEST_F(TrainTest, MemoryTierBySecondsKilledRankRestoresFromMemoryBitExactly) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/memtier-seconds";
  Daemons daemons(run, "", /*ring=*/true);
  const std::string extra =
      "--ckpt.daemon=require --ckpt.every_steps=50 --ckpt.memory_every_seconds=0.3";
  const int rc = LaunchAndKillAt(TrainCmd(run, 4, 2, extra), run, 30, 2, "memsecs");
  EXPECT_NE(rc, 0) << "the kill did not stop the job";
  const int done = static_cast<int>(Losses(run).size());
  ASSERT_EQ(::access((run + "/checkpoints/MEMORY_TIER.json").c_str(), F_OK), 0)
      << daemons.Log(0) << daemons.Log(1);
  const std::string out = FinishRun(run, extra, 2);
  ExpectSameAsReference(run, ref);
  EXPECT_TRUE(Contains(out, "resume: memory tier: step ")) << out;
  const std::string records = ReadFile(run + "/restarts.jsonl");
  const int restored = MemoryRestoredStep(records);
  ASSERT_GE(restored, 0) << "no resume from the memory tier:\n" << records;
  EXPECT_GT(restored, 0) << records;
  EXPECT_LE(restored, done) << records;
  std::printf("memory tier by seconds: crashed after step %d, restored step %d\n", done, restored);
}

// The memory tier's record outlives the daemons' memory (a requeue onto new nodes, or daemons
// restarted): MEMORY_TIER.json names a step no daemon holds any more, every rank finds that
// out (its own daemon, then the peers), nothing is written, and the resume takes the disk
// tier, says so, and still ends bit-identical.
TEST_F(TrainTest, MemoryTierWithItsMemoryGoneFallsBackToDiskBitExactly) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/memtier-gone";
  const std::string extra =
      "--ckpt.daemon=require --ckpt.every_steps=20 --ckpt.memory_every_steps=3";
  {
    Daemons daemons(run, "", /*ring=*/true);
    // Killed once the memory tier records a step newer than the disk's 20 (its buddy may lag
    // a few steps behind the snapshot on a loaded machine).
    const std::string record = run + "/checkpoints/MEMORY_TIER.json";
    const int rc = LaunchAndActAt(
        TrainCmd(run, 4, 2, extra), run, 22,
        [&] {
          for (int i = 0; i < 2000 && MemoryRecordStep(record) <= 20; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          for (pid_t p : RankPids("memgone", 2)) kill(p, SIGKILL);
        },
        "memgone");
    EXPECT_NE(rc, 0) << "the kill did not stop the job";
    ASSERT_GT(MemoryRecordStep(record), 20) << ReadFile(record);
  }  // the daemons stop: their memory is gone
  Daemons fresh(run, "", /*ring=*/true);
  const std::string out = FinishRun(run, extra, 2);
  ExpectSameAsReference(run, ref);
  EXPECT_TRUE(Contains(out, "FALLING BACK to the disk tier")) << out;
  const std::string records = ReadFile(run + "/restarts.jsonl");
  EXPECT_TRUE(Contains(records, "\"tier\":\"disk\"")) << records;
  EXPECT_TRUE(Contains(records, "\"memory_fallback\"")) << records;
  auto report = RunCommand(Ftrain() + " report " + run, 30);
  EXPECT_TRUE(Contains(report.output, "memory tier fell back to disk")) << report.output;
}

// Issue 44, hole 7: silent data corruption under the memory tier. Hybrid 2 x 2, a memory
// snapshot every 2 steps (disk every 50), the replica check every 6; a bit of rank 1's master
// shard flips after step 7 (node 0: the replica whose pieces a restore writes out). Before,
// the snapshots of steps 8 and 10 became restorable unchecked; the check after step 12 exited
// 77, the restart restored step 10 from memory, every replica loaded the flipped shard and the
// check never fired again. Now the check runs before every memory snapshot: it fires after
// step 8, nothing newer than step 6 (checked) is restorable, and the restart ends
// bit-identical to a clean run.
TEST_F(TrainTest, SdcUnderTheMemoryTierRestartsFromACheckedSnapshotOnly) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/memtier-sdc";
  Daemons daemons(run, "", /*ring=*/true);
  const std::string extra =
      "--ckpt.daemon=require --ckpt.every_steps=50 --ckpt.memory_every_steps=2 "
      "--guard.sdc_every_steps=6";
  auto a = RunCommand("FTRAIN_FAULT=bitflip@7:1 " + TrainCmd(run, 4, 2, extra), 600);
  ASSERT_EQ(a.exit_code, 77) << a.output;
  EXPECT_TRUE(Contains(a.output, "silent data corruption after step 8")) << a.output;
  EXPECT_LE(MemoryRecordStep(run + "/checkpoints/MEMORY_TIER.json"), 7)
      << "a snapshot taken after the flip is restorable: "
      << ReadFile(run + "/checkpoints/MEMORY_TIER.json");
  // (On a loaded machine the buddies may not have confirmed step 6 yet: then an older step,
  // or a fresh start; either way a checked state.)
  auto b = RunCommand(TrainCmd(run, 4, 2, extra), 600);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_FALSE(Contains(b.output, "silent data corruption")) << b.output;
  ExpectSameAsReference(run, ref);
}

TEST_F(TrainTest, WithCkptdKilledMidRunTheTrainerFallsBackToSynchronousSaves) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/daemon-dies";
  Daemons daemons(run);
  const std::string log = root_ + "/daemon-dies.log";
  // The daemon of node 1 is SIGKILLed after step 12; the run must go on, save every later
  // checkpoint synchronously on node 1's ranks, and finish bit-identical.
  const int rc = LaunchAndActAt(
      TrainCmd(run, 4, 2, "--ckpt.daemon=auto"), run, 12, [&] { daemons.Kill(1); }, "ddies", log);
  const std::string out = ReadFile(log);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(Contains(out, "falls back to SYNCHRONOUS checkpoints")) << out;
  EXPECT_TRUE(Contains(out, "handed to ckptd")) << out;
  ExpectSameAsReference(run, ref);
}

TEST_F(TrainTest, WithCkptdDiskFullFailsLoudlyKeepsOlderCheckpointsAndRetries) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/daemon-enospc";
  const std::string small = root_ + "/small-fs";
  ::mkdir(run.c_str(), 0755);
  ::mkdir(small.c_str(), 0755);
  // A real file system that fills up: a 24 MiB tmpfs for the checkpoint root (each
  // checkpoint of the tiny model is ~2 MB; keep 3).
  if (std::system(("mount -t tmpfs -o size=24m ftrain-test " + small + " 2>/dev/null").c_str()) !=
      0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): the disk-full test needs one";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { std::system(("umount " + dir).c_str()); }
  } unmount{small};
  const std::string root = small + "/ckpt";
  Daemons daemons(run, root);
  const std::string filler = small + "/filler";
  const std::string log = root_ + "/daemon-enospc.log";
  // Fill the disk after step 12 (checkpoints 15, 20 and 25 hit ENOSPC in the daemons), free
  // it again after step 27: the run keeps training and the later checkpoints commit.
  pid_t freer = -1;
  const int rc = LaunchAndActAt(
      TrainCmd(run, 4, 2, "--ckpt.daemon=require --ckpt.root=" + root), run, 12,
      [&] {
        std::system(("dd if=/dev/zero of=" + filler + " bs=1M 2>/dev/null; true").c_str());
        freer = fork();
        if (freer == 0) {
          while (Losses(run).size() < 27) usleep(5000);
          unlink(filler.c_str());
          _exit(0);
        }
      },
      "denospc", log);
  if (freer > 0) waitpid(freer, nullptr, 0);
  const std::string out = ReadFile(log);
  ASSERT_EQ(rc, 0) << out;
  const std::string dlogs = daemons.Log(0) + daemons.Log(1);
  EXPECT_TRUE(Contains(dlogs, "persist FAILED")) << dlogs;
  EXPECT_TRUE(Contains(dlogs, "No space left on device")) << dlogs;
  EXPECT_TRUE(Contains(out, "CHECKPOINT FAILED in ckptd at step")) << out;
  auto diff = RunCommand(
      BinDir() + "/ckptctl diff " + ref + "/checkpoints/step-00000060 " + root + "/step-00000060",
      120);
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_EQ(Losses(ref), Losses(run));
  auto verify = RunCommand(BinDir() + "/ckptctl verify " + root + " --all", 120);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

}  // namespace
// A hung peer (SIGSTOPped, as a wedged GPU or a frozen node would look) never hangs the others:
// their next collective fails after dist.timeout_s with a message, the launcher stops the job,
// and a relaunch resumes bit-exactly.
TEST_F(TrainTest, AHungPeerTimesOutInsteadOfHangingTheJob) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/hung";
  const std::string extra = "--dist.timeout_s=5";
  const int rc = LaunchAndActAt(
      TrainCmd(run, 4, 2, extra), run, 17,
      [&] {
        for (pid_t p : RankPids("hung", 2)) kill(p, SIGSTOP);
      },
      "hung", run + ".log");
  for (pid_t p : RankPids("hung", 2)) kill(p, SIGKILL);  // if the launcher left it stopped
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "the job hung (no timeout)";
  // The evidence that the timeout ended it (not how long it took): a collective's timeout,
  // then the launcher stopping the rest.
  const std::string out = ReadFile(run + ".log");
  EXPECT_TRUE(Contains(out, "imed out") || Contains(out, "imeout")) << out;
  EXPECT_TRUE(Contains(out, "; stopping the other")) << out;
  FinishRun(run, "", 2);
  ExpectSameAsReference(run, ref);
}

// Sorted entries of a directory ("" when it cannot be read).
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Issue 44, hole 1: the checkpoint storage does not answer while a start resumes (every open,
// stat and listing under RUN/checkpoints fails, through an LD_PRELOAD shim on the real
// processes, as during a Lustre OST failover or an NFS server restart). Before, the resume set
// the good checkpoints aside one by one as damaged and retrained from step 0. Now a long
// outage (ENOENT: an NFS negative entry, the harder face) ends the start with exit 74 and
// leaves every checkpoint and metrics.jsonl as they were; a short one (EIO) is waited out: the
// newest checkpoint is resumed and the run ends bit-identical.
TEST_F(TrainTest, AStorageOutageDuringResumeIsWaitedOutNeverTakenForDamage) {
  const std::string& ref = Reference("");
  const std::string run = root_ + "/outage";
  ASSERT_NE(LaunchAndKillAt(TrainCmd(run, 4, 2), run, 23, 1, "outage"), 0);
  auto latest = RunCommand(BinDir() + "/ckptctl latest " + run + "/checkpoints", 30);
  ASSERT_EQ(latest.exit_code, 0) << latest.output;
  std::string newest = latest.output.substr(0, latest.output.find('\n'));
  newest = newest.substr(newest.find_last_of('/') + 1);
  const std::vector<std::string> before = Entries(run + "/checkpoints");
  const std::string metrics = ReadFile(run + "/metrics.jsonl");
  const std::string flag = run + ".storage-down";
  const std::string shim = std::string("LD_PRELOAD=") + FTRAIN_EIO_SHIM +
                           " FTRAIN_EIO_PREFIX=" + run + "/checkpoints FTRAIN_EIO_WHILE=" + flag;
  {
    std::ofstream(flag) << "down\n";
    auto r = RunCommand(
        "FTRAIN_EIO_ERRNO=ENOENT " + shim + " " + TrainCmd(run, 4, 2, "--ckpt.resume_retry_s=3"),
        300);
    ::unlink(flag.c_str());
    EXPECT_EQ(r.exit_code, 74) << r.output;
    EXPECT_TRUE(Contains(r.output, "nothing was moved aside")) << r.output;
    EXPECT_FALSE(Contains(r.output, "starting fresh")) << r.output;
    EXPECT_EQ(Entries(run + "/checkpoints"), before);
    EXPECT_EQ(ReadFile(run + "/metrics.jsonl"), metrics);
  }
  // A short outage: the storage answers again 4 s into the start.
  std::ofstream(flag) << "down\n";
  std::thread up([&] {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    ::unlink(flag.c_str());
  });
  auto r = RunCommand(shim + " " + TrainCmd(run, 4, 2, "--ckpt.resume_retry_s=120"), 600);
  up.join();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "an outage, not damage")) << r.output;
  EXPECT_TRUE(
      Contains(r.output, "resume: newest complete checkpoint is " + run + "/checkpoints/" + newest))
      << r.output;
  for (const auto& e : Entries(run + "/checkpoints")) {
    EXPECT_FALSE(Contains(e, "corrupt")) << e << " was set aside";
  }
  EXPECT_FALSE(Contains(ReadFile(run + "/restarts.jsonl"), "fell_back"));
  ExpectSameAsReference(run, ref);
}

// The newest checkpoint is damaged after it was committed (one flipped byte inside a master
// weight dataset: the HDF5 structure is intact, only the hash can tell). The resume must
// notice while loading, set the checkpoint aside as step-N.corrupt, fall back to the next
// older one and still end bit-identical to the uninterrupted run. Compressed and level-0.
class TrainFallbackTest : public TrainTest, public ::testing::WithParamInterface<int> {};

TEST_P(TrainFallbackTest, FlippedByteInNewestCheckpointFallsBackAndStaysBitExact) {
  const std::string extra = GetParam() == 0 ? "--ckpt.zstd_level=0" : "";
  // The compression level is not part of the training state: one reference serves both.
  const std::string& ref = Reference("");
  const std::string run = root_ + "/flip" + std::to_string(GetParam());
  const int rc =
      LaunchAndKillAt(TrainCmd(run, 4, 2, extra), run, 23, 1, "flip" + std::to_string(GetParam()));
  ASSERT_NE(rc, 0);
  // The newest complete checkpoint (20 with checkpoints every 5 steps; 25 if the kill came
  // late) loses one byte in the middle of a master tensor of rank 0's shard.
  auto latest = RunCommand(BinDir() + "/ckptctl latest " + run + "/checkpoints", 30);
  ASSERT_EQ(latest.exit_code, 0) << latest.output;
  const std::string newest = latest.output.substr(0, latest.output.find('\n'));
  auto flip = RunCommand("/usr/bin/python3 " + std::string(FTRAIN_SOURCE_DIR) +
                             "/tests/flip_byte.py " + newest + "/shard-00000.h5 master",
                         60);
  ASSERT_EQ(flip.exit_code, 0) << flip.output;
  ASSERT_TRUE(Contains(flip.output, "flipped /master/")) << flip.output;
  // Every file still has the size the manifest says: only a hash check can catch it.
  const std::string out = FinishRun(run, extra, 2);
  EXPECT_TRUE(Contains(out, "FAILED verification")) << out;
  EXPECT_TRUE(Contains(out, "checksum")) << out;  // the manifest's XXH3 or zstd's own
  struct stat st;
  EXPECT_EQ(stat((newest + ".corrupt").c_str(), &st), 0) << newest << ".corrupt is missing";
  EXPECT_TRUE(Contains(ReadFile(run + "/restarts.jsonl"), "\"event\":\"fell_back\""));
  auto list = RunCommand(BinDir() + "/ckptctl list " + run + "/checkpoints", 30);
  EXPECT_TRUE(Contains(list.output, "corrupt")) << list.output;
  auto report = RunCommand(Ftrain() + " report " + run, 30);
  EXPECT_TRUE(Contains(report.output, "failed verification")) << report.output;
  ExpectSameAsReference(run, ref);
}

INSTANTIATE_TEST_SUITE_P(Levels, TrainFallbackTest, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("uncompressed") : std::string("zstd");
                         });

}  // namespace ftrain::testing
