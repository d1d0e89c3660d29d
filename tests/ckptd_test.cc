// ckptd end to end with real processes, sockets and shared memory: handoff and commit, a
// trainer SIGKILLed after SUBMIT, the daemon SIGKILLed at many points of its pipeline, two
// daemons ("nodes") sharing one checkpoint root, and the security checks (0700 socket dir,
// 0600 slots, SO_PEERCRED uid, malformed messages). Label: multiproc.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckptd_client.h"
#include "ckpt/ckptd_protocol.h"
#include "ckpt/filename.h"
#include "ckpt/store.h"
#include "ckpt_fixture.h"
#include "test_util.h"

namespace ftrain {
namespace {

namespace fs = std::filesystem;
namespace proto = ckpt::proto;
using testing::BinDir;
using testing::RunCommand;
using testing::SignalAndReap;

class CkptdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A short name: the daemon's socket path (under run_) must fit sockaddr_un.
    tmp_ = std::make_unique<testing::TempDir>("ckptd-test");
    base_ = tmp_->path();
    fs::create_directories(base_ + "/run");
    root_ = base_ + "/ckpt";
    run_ = base_ + "/run";
  }
  void TearDown() override {
    for (pid_t p : daemons_) Kill(p, SIGKILL);
    // What the SIGKILLed daemons could not unlink (a real node would reboot; tests share one).
    for (const auto& node : nodes_) {
      for (const auto& e : fs::directory_iterator("/dev/shm")) {
        if (e.path().filename().string().rfind(proto::ShmPrefix(run_, node), 0) == 0) {
          std::error_code ec;
          fs::remove(e.path(), ec);
        }
      }
    }
    // tmp_ (base_) goes with the fixture.
  }

  // Starts ckptd and waits until its socket answers STATUS.
  pid_t StartDaemon(const std::string& node, const std::vector<std::string>& extra = {},
                    const std::string& env = "") {
    std::vector<std::string> args = {
        BinDir() + "/ckptd", "--root", root_,    "--run-dir", run_, "--node", node,
        "--threads",         "1",      "--keep", "10"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string log = base_ + "/ckptd-" + node + ".log";
    fs::remove(log);  // before fork: the wait below reads it
    pid_t pid = fork();
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      if (!env.empty()) putenv(const_cast<char*>(env.c_str()));
      std::vector<char*> av;
      for (auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
      av.push_back(nullptr);
      execv(av[0], av.data());
      _exit(127);
    }
    daemons_.push_back(pid);
    nodes_.insert(node);
    const std::string sock = proto::SocketPath(run_, node);
    for (int i = 0; i < 200; ++i) {
      // "serving" is logged once the socket listens (a daemon of another uid refuses STATUS).
      if (fs::exists(sock) && ReadLog(node).find("serving node") != std::string::npos) return pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ADD_FAILURE() << "ckptd did not come up; log:\n" << ReadLog(node);
    return pid;
  }
  std::string ReadLog(const std::string& node) {
    std::ifstream f(base_ + "/ckptd-" + node + ".log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static int Kill(pid_t pid, int sig) { return SignalAndReap(pid, sig); }
  void Stop(pid_t pid) {
    int status = Kill(pid, SIGTERM);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    daemons_.erase(std::remove(daemons_.begin(), daemons_.end(), pid), daemons_.end());
  }
  testing::CommandResult Client(const std::string& node, int rank, int world,
                                const std::string& steps, const std::string& extra = "") {
    return RunCommand(BinDir() + "/ckptd_fake_trainer " + run_ + " " + node + " " +
                          std::to_string(rank) + " " + std::to_string(world) + " " + steps + " " +
                          extra,
                      60);
  }
  // The newest complete step in the root (-1 when none), waiting up to `timeout_s` for `want`.
  int64_t WaitLatest(int64_t want, double timeout_s = 20) {
    ckpt::CheckpointStore store(root_, Env::Default());
    int64_t got = -1;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    do {
      auto l = store.Latest();
      got = l.ok() && l->has_value() ? (*l)->step : -1;
      if (got >= want) return got;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    return got;
  }
  // Waits until the daemon of `node` reports `step` as the snapshot it holds in memory (its
  // status is updated when the persist result is drained, a moment after the commit shows on
  // disk). Returns the last status text.
  std::string WaitInMemory(const std::string& node, int64_t step, double timeout_s = 20) {
    const std::string want = "\"in_memory_step\":" + std::to_string(step);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::string st;
    do {
      auto q = ckpt::QueryCkptdStatus(proto::SocketPath(run_, node));
      st = q.ok() ? *q : q.status().ToString();
      if (st.find(want) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    return st;
  }
  int Ckptctl(const std::string& args, std::string* out = nullptr) {
    auto r = RunCommand(BinDir() + "/ckptctl " + args, 60);
    if (out) *out = r.output;
    return r.exit_code;
  }

  std::unique_ptr<testing::TempDir> tmp_;
  std::string base_, root_, run_;
  std::vector<pid_t> daemons_;
  std::set<std::string> nodes_;
};

TEST_F(CkptdTest, HandoffCommitsVerifiesAndMatchesTheSynchronousSave) {
  pid_t d = StartDaemon("n0");
  auto r0 = Client("n0", 0, 2, "1,2");
  auto r1 = Client("n0", 1, 2, "1,2");
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  ASSERT_EQ(WaitLatest(2), 2) << ReadLog("n0");
  std::string out;
  EXPECT_EQ(Ckptctl("verify " + root_ + " --all", &out), 0) << out;
  // Bit-identical to the same state saved synchronously through the library.
  ckpt::CheckpointStore sync(base_ + "/sync", Env::Default());
  ASSERT_TRUE(testing::SaveFixture(&sync, 2, 2).ok());
  EXPECT_EQ(Ckptctl("diff " + root_ + "/step-00000002 " + base_ + "/sync/step-00000002", &out), 0)
      << out;
  EXPECT_EQ(Ckptctl("status " + run_, &out), 0) << out;
  EXPECT_NE(out.find("n0"), std::string::npos) << out;
  EXPECT_NE(out.find("last_committed_step 2"), std::string::npos) << out;
  Stop(d);
  // Slots are unlinked and the socket removed on a clean exit.
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    EXPECT_NE(e.path().filename().string().rfind(proto::ShmPrefix(run_, "n0"), 0), 0u) << e.path();
  }
  EXPECT_FALSE(fs::exists(proto::SocketPath(run_, "n0")));
}

// A GPU rank's snapshot goes device -> host straight into its registered slots. No GPU here:
// the fake trainer's DeviceMemory copies with memcpy, through exactly the client code a GPU
// rank runs; the checkpoint must be the same bits as the synchronous save.
TEST_F(CkptdTest, DeviceTensorsGoStraightIntoRegisteredSlots_FakeGpu) {
  pid_t d = StartDaemon("g0");
  auto r = Client("g0", 0, 1, "1,2", "--fake-gpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" 0 outside the "), std::string::npos) << r.output;
  ASSERT_EQ(WaitLatest(2), 2) << ReadLog("g0");
  ckpt::CheckpointStore sync(base_ + "/sync", Env::Default());
  ASSERT_TRUE(testing::SaveFixture(&sync, 2, 1).ok());
  std::string out;
  EXPECT_EQ(Ckptctl("diff " + root_ + "/step-00000002 " + base_ + "/sync/step-00000002", &out), 0)
      << out;
  Stop(d);
}

// --prom-dir: ckptd-<job>-<node>.prom, a valid Prometheus text file (prometheus_client's
// parser) that follows the persists and the commit within a second or two.
TEST_F(CkptdTest, PrometheusTextfileFollowsPersistAndCommit) {
  const std::string prom_dir = base_ + "/prom";
  pid_t d = StartDaemon("n0", {"--prom-dir", prom_dir}, "SLURM_JOB_ID=4242");
  auto r0 = Client("n0", 0, 2, "1,2");
  auto r1 = Client("n0", 1, 2, "1,2");
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  ASSERT_EQ(WaitLatest(2), 2) << ReadLog("n0");
  const std::string file = prom_dir + "/ckptd-4242-n0.prom";
  std::map<std::string, nlohmann::json> by_name;
  for (int i = 0; i < 100; ++i) {  // rewritten once a second
    auto r = RunCommand("/usr/bin/python3 " + std::string(FTRAIN_SOURCE_DIR) +
                            "/tests/parse_prom.py " + file + " 2>/dev/null",
                        30);
    if (r.exit_code == 0) {
      for (const auto& sample : nlohmann::json::parse(r.output)) by_name[sample["name"]] = sample;
      if (by_name["ckptd_last_committed_step"].value("value", -1.0) == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const nlohmann::json labels = {{"node", "n0"}, {"slurm_job_id", "4242"}};
  auto value = [&](const std::string& name, const char* type) {
    const nlohmann::json& s = by_name[name];
    EXPECT_EQ(s.value("type", ""), type) << name;
    EXPECT_EQ(s.value("labels", nlohmann::json()), labels) << name;
    return s.value("value", -1.0);
  };
  EXPECT_EQ(value("ckptd_last_committed_step", "gauge"), 2);
  EXPECT_EQ(value("ckptd_last_persisted_step", "gauge"), 2);
  EXPECT_EQ(value("ckptd_snapshots_in_flight", "gauge"), 0);
  EXPECT_EQ(value("ckptd_persisted_snapshots_total", "counter"), 4);  // 2 ranks x 2 steps
  EXPECT_GT(value("ckptd_persist_bytes_total", "counter"), 0);
  EXPECT_GT(value("ckptd_persist_raw_bytes_total", "counter"), 0);
  EXPECT_GT(value("ckptd_persist_bytes_per_second", "gauge"), 0);
  Stop(d);
  // A directory that cannot be made is a configuration error (exit 2), before serving.
  std::ofstream(base_ + "/plainfile") << "x";
  auto bad = RunCommand(BinDir() + "/ckptd --root " + root_ + " --run-dir " + run_ +
                            " --node n1 --prom-dir " + base_ + "/plainfile/sub",
                        10);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--prom-dir"), std::string::npos) << bad.output;
}

TEST_F(CkptdTest, TrainerKilledRightAfterSubmitStillCommits) {
  StartDaemon("n0");
  auto r = Client("n0", 0, 1, "5", "--scale 20 --kill-after-submit");
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_NE(r.output.find("submitted step 5"), std::string::npos) << r.output;
  ASSERT_EQ(WaitLatest(5), 5) << ReadLog("n0");
  std::string out;
  EXPECT_EQ(Ckptctl("verify " + root_ + "/step-00000005", &out), 0) << out;
  // The restarted trainer reconnects as the same rank and goes on.
  auto again = Client("n0", 0, 1, "6", "--scale 20");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(WaitLatest(6), 6);
}

TEST_F(CkptdTest, PersistedSnapshotStaysInMemoryForARestartedTrainer) {
  StartDaemon("n0");
  // Nothing persisted yet: nothing to restore.
  auto none = Client("n0", 0, 1, "-", "--restore");
  EXPECT_EQ(none.exit_code, 3) << none.output;
  ASSERT_EQ(Client("n0", 0, 1, "1,2").exit_code, 0);
  ASSERT_EQ(WaitLatest(2), 2) << ReadLog("n0");
  const std::string held = WaitInMemory("n0", 2);
  EXPECT_NE(held.find("\"in_memory_step\":2"), std::string::npos) << held;
  // A new trainer process of the same rank gets the newest persisted snapshot, byte for byte.
  auto r = Client("n0", 0, 1, "-", "--restore");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("restored step 2 "), std::string::npos) << r.output;
  // Retention never blocks: with 2 slots, one retained, five more snapshots go through and
  // the newest persisted one is what a restart sees.
  auto more = Client("n0", 0, 1, "3,4,5,6,7");
  EXPECT_EQ(more.exit_code, 0) << more.output;
  ASSERT_EQ(WaitLatest(7), 7) << ReadLog("n0");
  const std::string st = WaitInMemory("n0", 7);
  EXPECT_NE(st.find("\"in_memory_step\":7"), std::string::npos) << st;
  EXPECT_NE(st.find("\"in_memory_steps\":[6,7]"), std::string::npos) << st;
  r = Client("n0", 0, 1, "-", "--restore");
  EXPECT_NE(r.output.find("restored step 7 "), std::string::npos) << r.output;
  // A restart resumes from the newest COMMITTED checkpoint, which need not be the newest
  // snapshot (ranks that got further than a dead one hand over one that never commits): the
  // trainer names the step, and gets that one, or nothing.
  r = Client("n0", 0, 1, "-", "--restore-step 6");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("restored step 6 "), std::string::npos) << r.output;
  r = Client("n0", 0, 1, "-", "--restore-step 5");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(ReadLog("n0").find("asks for step 5; it is not in memory (newest held: 7)"),
            std::string::npos)
      << ReadLog("n0");
  // A new generation with another world size is accepted once the old one is idle.
  auto w2 = Client("n0", 1, 2, "8");
  EXPECT_EQ(w2.exit_code, 0) << w2.output << ReadLog("n0");
}

TEST_F(CkptdTest, CleanupUnlinksWhatAKilledDaemonLeftButNeverALiveOnesSlots) {
  auto slots = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().rfind(proto::ShmPrefix(run_, "c"), 0) == 0;
    }
    return n;
  };
  pid_t d = StartDaemon("c");
  ASSERT_EQ(Client("c", 0, 1, "1").exit_code, 0);
  ASSERT_EQ(slots(), 2);
  const std::string cleanup =
      BinDir() + "/ckptd --cleanup --root " + root_ + " --run-dir " + run_ + " --node c";
  auto r = RunCommand(cleanup, 30);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("still serves"), std::string::npos) << r.output;
  EXPECT_EQ(slots(), 2) << "cleanup must not touch a live daemon's slots";
  Kill(d, SIGKILL);
  daemons_.clear();
  EXPECT_EQ(slots(), 2) << "a SIGKILLed daemon cannot unlink its slots";
  r = RunCommand(cleanup, 30);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 shared-memory segment(s) unlinked"), std::string::npos) << r.output;
  EXPECT_EQ(slots(), 0);
}

TEST_F(CkptdTest, TwoNodesCommitEveryStepExactlyOnce) {
  StartDaemon("a");
  StartDaemon("b");
  const std::string fake = BinDir() + "/ckptd_fake_trainer " + run_ + " ";
  auto r = RunCommand("set -e; " + fake + "a 0 4 1,2,3 & p0=$!; " + fake + "a 1 4 1,2,3 & p1=$!; " +
                          fake + "b 2 4 1,2,3 & p2=$!; " + fake + "b 3 4 1,2,3 & p3=$!; " +
                          "wait $p0; wait $p1; wait $p2; wait $p3",
                      90);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(WaitLatest(3), 3) << ReadLog("a") << ReadLog("b");
  // Each step: committed once (one COMMIT marker, by one writer), all four receipts. A daemon
  // counts its commit when its persist worker reports back, which can come a moment after
  // the rename made the step visible: wait until both daemons have nothing in flight or
  // queued (every worker reported back), and only then count: a late second commit of a
  // step shows as 4 or more.
  int64_t commits_won = 0;
  bool idle = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  do {
    commits_won = 0;
    idle = true;
    for (const std::string node : {"a", "b"}) {
      auto st = ckpt::QueryCkptdStatus(proto::SocketPath(run_, node));
      ASSERT_TRUE(st.ok());
      const auto j = nlohmann::json::parse(*st);
      commits_won += j.at("commits_won").get<int64_t>();
      idle = idle && j.at("snapshots_in_flight").get<int64_t>() == 0 &&
             j.at("queue_depth").get<int64_t>() == 0;
    }
    if (idle && commits_won >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(idle) << "the daemons still persist after every step was committed";
  EXPECT_EQ(commits_won, 3);
  for (int step = 1; step <= 3; ++step) {
    const std::string dir = root_ + "/" + ckpt::StepDirName(step);
    EXPECT_TRUE(fs::exists(dir + "/COMMIT")) << dir;
    for (int rank = 0; rank < 4; ++rank)
      EXPECT_TRUE(fs::exists(dir + "/" + ckpt::ReceiptFileName(rank)));
  }
  std::string out;
  EXPECT_EQ(Ckptctl("verify " + root_ + " --all", &out), 0) << out;
  EXPECT_EQ(Ckptctl("status " + run_, &out), 0) << out;
  EXPECT_NE(out.find("node a"), std::string::npos) << out;
  EXPECT_NE(out.find("node b"), std::string::npos) << out;
}

// ckptd SIGKILLed before its Nth file-system operation (FTRAIN_CRASH_AT) while persisting and
// committing step 2 of a 2-rank world: `latest` is step 1 or a complete, verifying step 2,
// never anything else; a restarted daemon recovers and commits step 3.
TEST_F(CkptdTest, DaemonKilledAtManyPipelinePointsKeepsTheLastCompleteCheckpoint) {
  int crashed = 0;
  for (int n = 2; n <= 31; n += 2) {
    SCOPED_TRACE("FTRAIN_CRASH_AT=" + std::to_string(n));
    fs::remove_all(root_);
    ckpt::CheckpointStore store(root_, Env::Default());
    ASSERT_TRUE(testing::SaveFixture(&store, 1, 2).ok());
    const std::string env = "FTRAIN_CRASH_AT=" + std::to_string(n);
    pid_t d = StartDaemon("c", {}, env);
    auto a = Client("c", 0, 2, "2");
    auto b = Client("c", 1, 2, "2");
    int status = 0;
    bool died = false;
    for (int i = 0; i < 400 && !died; ++i) {
      died = ::waitpid(d, &status, WNOHANG) == d;
      if (!died && WaitLatest(2, 0) == 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (died) {
      daemons_.erase(std::remove(daemons_.begin(), daemons_.end(), d), daemons_.end());
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
      ++crashed;
    } else {
      Kill(d, SIGKILL);
      daemons_.erase(std::remove(daemons_.begin(), daemons_.end(), d), daemons_.end());
    }
    const int64_t latest = WaitLatest(1, 0);
    EXPECT_TRUE(latest == 1 || latest == 2) << latest;
    std::string out;
    EXPECT_EQ(Ckptctl("verify " + root_ + "/" + ckpt::StepDirName(latest), &out), 0) << out;
    // Restart: recovery, then the next checkpoint commits.
    pid_t d2 = StartDaemon("c");
    auto c0 = Client("c", 0, 2, "3");
    EXPECT_EQ(c0.exit_code, 0) << c0.output;
    auto c1 = Client("c", 1, 2, "3");
    EXPECT_EQ(c1.exit_code, 0) << c1.output;
    EXPECT_EQ(WaitLatest(3), 3) << ReadLog("c");
    EXPECT_EQ(Ckptctl("verify " + root_ + "/step-00000003", &out), 0) << out;
    Stop(d2);
    fs::remove(base_ + "/ckptd-c.log");
  }
  EXPECT_GE(crashed, 10);
}

TEST_F(CkptdTest, SocketDirIs0700AndSlotsAre0600) {
  StartDaemon("s");
  auto c = ckpt::CkptdClient::Connect(run_, "s", 0, 1, 1 << 20);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(proto::SocketDir(run_, "s").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (int slot = 0; slot < 2; ++slot) {
    const std::string shm = "/dev/shm" + proto::ShmName(run_, "s", 0, slot);
    ASSERT_EQ(::stat(shm.c_str(), &st), 0) << shm;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << shm;
  }
}

TEST_F(CkptdTest, OtherUidIsRefused) {
  // SO_PEERCRED: this daemon only accepts uid 65534, and we are someone else.
  StartDaemon("u", {"--test-allowed-uid", "65534"});
  auto c = ckpt::CkptdClient::Connect(run_, "u", 0, 1, 1 << 20);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(ReadLog("u").find("refused a connection from uid"), std::string::npos) << ReadLog("u");
  // A process of another user cannot even reach the socket of a normal daemon (0700 dir).
  StartDaemon("v");
  pid_t pid = fork();
  if (pid == 0) {
    if (getuid() == 0 && setuid(65534) != 0) _exit(3);
    auto cc = ckpt::CkptdClient::ConnectRaw(proto::SocketPath(run_, "v"));
    _exit(cc.ok() ? 1 : 0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// Each hostile message gets its connection closed; a well-behaved client is served after.
TEST_F(CkptdTest, MalformedMessagesDisconnectOnlyTheOffender) {
  StartDaemon("m");
  const std::string sock = proto::SocketPath(run_, "m");
  auto expect_closed = [&](ckpt::CkptdClient* c, const std::string& what) {
    auto r = c->Receive(5);
    EXPECT_FALSE(r.ok()) << what;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kUnavailable) << what << r.status().ToString();
    }
  };
  {
    auto c = ckpt::CkptdClient::ConnectRaw(sock);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->SendRaw(proto::EncodeHeader(static_cast<proto::MsgType>(77), 0)).ok());
    expect_closed(c->get(), "unknown type");
  }
  {
    auto c = ckpt::CkptdClient::ConnectRaw(sock);
    ASSERT_TRUE((*c)->SendRaw(proto::EncodeHeader(proto::MsgType::kHello, 0xffffffffu)).ok());
    expect_closed(c->get(), "oversized length");
  }
  {
    auto c = ckpt::CkptdClient::ConnectRaw(sock);
    ASSERT_TRUE((*c)->SendRaw(std::string("GET / HTTP/1.1\r\n\r\n")).ok());
    expect_closed(c->get(), "bad magic");
  }
  {
    auto c = ckpt::CkptdClient::ConnectRaw(sock);
    proto::Hello h{5, 2, 1, 4096};
    ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kHello, proto::EncodeHello(h))).ok());
    expect_closed(c->get(), "rank out of range");
  }
  {
    auto c = ckpt::CkptdClient::ConnectRaw(sock);
    proto::Submit s;
    ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kSubmit, proto::EncodeSubmit(s))).ok());
    expect_closed(c->get(), "SUBMIT before HELLO");
  }
  {
    auto c = ckpt::CkptdClient::ConnectRaw(sock);
    ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kRestore, "")).ok());
    expect_closed(c->get(), "RESTORE before HELLO");
  }
  {
    auto c = ckpt::CkptdClient::Connect(run_, "m", 2, 4, 1 << 16);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kRestore, "x")).ok());
    expect_closed(c->get(), "malformed RESTORE");
  }
  {
    // A daemon-to-client message type sent to the daemon.
    auto c = ckpt::CkptdClient::Connect(run_, "m", 2, 4, 1 << 16);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kRestoreOk, std::string(1, '\0'))).ok());
    expect_closed(c->get(), "RESTORE_OK from a client");
  }
  auto submit_on_fresh = [&](int rank, const proto::Submit& s, bool acquire,
                             const std::string& what) {
    auto c = ckpt::CkptdClient::Connect(run_, "m", rank, 4, 1 << 16);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (acquire) {
      ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kAcquire, "")).ok());
      auto a = (*c)->Receive(5);
      ASSERT_TRUE(a.ok() && a->first == proto::MsgType::kAcquireOk);
    }
    ASSERT_TRUE((*c)->SendRaw(proto::Frame(proto::MsgType::kSubmit, proto::EncodeSubmit(s))).ok());
    expect_closed(c->get(), what);
  };
  proto::Submit s;
  s.meta.world_size = 4;
  s.step = -1;
  submit_on_fresh(0, s, true, "negative step");
  s.step = 3;
  s.slot = 1;  // slot 0 was acquired, slot 1 was not
  submit_on_fresh(0, s, true, "slot not held");
  s.slot = 0;
  submit_on_fresh(0, s, false, "slot never acquired");
  proto::PieceDesc p;
  p.is_blob = true;
  p.kind = "../../etc";
  p.name = "passwd";
  p.policy = "replicated";
  p.length = 4;
  s.pieces = {p};
  submit_on_fresh(1, s, true, "path-like name");
  s.pieces[0].kind = "rng";
  s.pieces[0].slot_offset = (1 << 16) - 2;
  submit_on_fresh(1, s, true, "piece outside the slot");
  // The daemon is still serving: a real client checkpoints a 1-rank world... of this run's
  // world size 4 it refuses another world size, so use the status query and rank 2.
  auto st = ckpt::QueryCkptdStatus(sock);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto r = Client("m", 2, 4, "7");
  EXPECT_EQ(r.exit_code, 0) << r.output << ReadLog("m");
  EXPECT_NE(ReadLog("m").find("disconnecting"), std::string::npos);
}

TEST_F(CkptdTest, ConfigurationErrorsExit2) {
  for (const std::string& args :
       std::vector<std::string>{"--root " + root_, "--root " + root_ + " --run-dir /nonexistent",
                                "--root " + root_ + " --run-dir " + run_ + " --threads 0",
                                "--root " + root_ + " --run-dir " + run_ + " --zstd-level 40",
                                "--root " + root_ + " --run-dir " + run_ + " --slots-per-rank 1",
                                "--root " + root_ + " --run-dir " + run_ + " --bogus 1"}) {
    auto r = RunCommand(BinDir() + "/ckptd " + args, 10);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("ckptd:"), std::string::npos) << r.output;
  }
  // A second daemon for the same node is refused.
  StartDaemon("x");
  auto r = RunCommand(BinDir() + "/ckptd --root " + root_ + " --run-dir " + run_ + " --node x", 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace ftrain
