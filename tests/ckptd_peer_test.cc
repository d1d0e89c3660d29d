// Buddy replication between real ckptd processes on localhost (TCP peer ports, shared-memory
// slots, a fake trainer): a ring A <-> B replicates A's snapshots into B's memory, a third
// daemon C (a replacement node) fetches one from B and serves it to a restore that is
// bit-identical and passes the manifest's hash check; newest replica wins, the budget keeps
// the older complete one, a buddy SIGKILLed mid-replication costs the trainer nothing and is
// retried; hostile peers (silence, wrong secret, other job, oversized / garbage / truncated
// frames, another job's snapshot) are disconnected and logged while service goes on.
// Label: multiproc.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckptd_client.h"
#include "ckpt/ckptd_protocol.h"
#include "ckpt/store.h"
#include "ckpt_fixture.h"
#include "daemon/peer_auth.h"
#include "daemon/peer_wire.h"
#include "test_util.h"

namespace ftrain {
namespace {

namespace fs = std::filesystem;
namespace proto = ckpt::proto;
using ckptd::peer::PeerConn;
using ckptd::peer::PeerMsg;
using testing::BinDir;
using testing::RunCommand;
using testing::SignalAndReap;

constexpr char kSecret[] = "0123456789abcdef-test-secret";
constexpr char kJob[] = "4711";

class CkptdPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<testing::TempDir>("ckptd-peer");
    base_ = tmp_->path();
    fs::create_directories(base_ + "/run");
    root_ = base_ + "/ckpt";
    run_ = base_ + "/run";
    secret_file_ = base_ + "/secret";
    std::ofstream(secret_file_) << kSecret << "\n";
    ::chmod(secret_file_.c_str(), 0600);
  }
  void TearDown() override {
    for (pid_t p : daemons_) Kill(p, SIGKILL);
    for (const auto& node : nodes_) {
      for (const auto& e : fs::directory_iterator("/dev/shm")) {
        if (e.path().filename().string().rfind(proto::ShmPrefix(run_, node), 0) == 0) {
          std::error_code ec;
          fs::remove(e.path(), ec);
        }
      }
    }
  }
  // A daemon with a peer listener on 127.0.0.1 (any port) and, if given, a buddy's node.
  pid_t StartDaemon(const std::string& node, const std::string& buddy_node = "",
                    std::vector<std::string> extra = {}, bool want_addr = true) {
    std::vector<std::string> args = {BinDir() + "/ckptd",
                                     "--root",
                                     root_,
                                     "--run-dir",
                                     run_,
                                     "--node",
                                     node,
                                     "--threads",
                                     "1",
                                     "--keep",
                                     "10",
                                     "--peer-listen",
                                     "127.0.0.1:0",
                                     "--job-id",
                                     kJob,
                                     "--job-secret-file",
                                     secret_file_,
                                     "--peer-timeout-s",
                                     peer_timeout_};
    if (std::find(extra.begin(), extra.end(), "--peer-listen") != extra.end()) {
      auto it = std::find(args.begin(), args.end(), "--peer-listen");
      args.erase(it, it + 2);  // the test's own listen address instead
    }
    if (!buddy_node.empty()) {
      args.push_back("--buddy-file");
      args.push_back(AddrFile(buddy_node));
    }
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string log = base_ + "/ckptd-" + node + ".log";
    fs::remove(log);
    pid_t pid = fork();
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> av;
      for (auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
      av.push_back(nullptr);
      execv(av[0], av.data());
      _exit(127);
    }
    daemons_.push_back(pid);
    nodes_.insert(node);
    for (int i = 0; i < 400; ++i) {
      if (ReadLog(node).find("serving node") != std::string::npos &&
          (!want_addr || fs::exists(AddrFile(node))))
        return pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ADD_FAILURE() << "ckptd " << node << " did not come up; log:\n" << ReadLog(node);
    return pid;
  }
  std::string AddrFile(const std::string& node) const {
    return proto::SocketDir(run_, node) + "/peer-addr";
  }
  std::string Addr(const std::string& node) const {
    std::ifstream f(AddrFile(node));
    std::string line;
    std::getline(f, line);
    return line;
  }
  std::string ReadLog(const std::string& node) {
    std::ifstream f(base_ + "/ckptd-" + node + ".log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static int Kill(pid_t pid, int sig) { return SignalAndReap(pid, sig); }
  void Forget(pid_t pid) {
    daemons_.erase(std::remove(daemons_.begin(), daemons_.end(), pid), daemons_.end());
  }
  testing::CommandResult Trainer(const std::string& node, int rank, int world,
                                 const std::string& steps, const std::string& extra = "") {
    return RunCommand(BinDir() + "/ckptd_fake_trainer " + run_ + " " + node + " " +
                          std::to_string(rank) + " " + std::to_string(world) + " " + steps + " " +
                          extra,
                      90);
  }
  nlohmann::json Replication(const std::string& node) {
    auto st = ckpt::QueryCkptdStatus(proto::SocketPath(run_, node));
    if (!st.ok()) return nlohmann::json::object();
    return nlohmann::json::parse(*st)["replication"];
  }
  nlohmann::json DaemonStatus(const std::string& node) {
    auto st = ckpt::QueryCkptdStatus(proto::SocketPath(run_, node));
    if (!st.ok()) return nlohmann::json::object();
    return nlohmann::json::parse(*st);
  }
  // The step of the replica of (job, rank) that `node` holds, -1 for none.
  int64_t HeldStep(const std::string& node, int rank) {
    for (const auto& h : Replication(node).value("replicas_held", nlohmann::json::array())) {
      if (h["rank"] == rank) return h["step"];
    }
    return -1;
  }
  // Polls `pred` up to `timeout_s`.
  template <typename F>
  bool WaitFor(F pred, double timeout_s = 30) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pred();
  }
  int64_t Latest() {
    ckpt::CheckpointStore store(root_, Env::Default());
    auto l = store.Latest();
    return l.ok() && l->has_value() ? (*l)->step : -1;
  }

  // A peer-addr file as a daemon of start `start` would leave it (a dead node's).
  void PlantAddrFile(const std::string& node, const std::string& address, const std::string& start,
                     int64_t since = -1) {
    fs::create_directories(proto::SocketDir(run_, node));
    ::chmod(proto::SocketDir(run_, node).c_str(), 0700);
    std::ofstream(AddrFile(node)) << address << "\nstart=" << start << " since=" << since << "\n";
  }
  static std::string ThisStart() { return ckptd::peer::StartIdOf(kSecret, kJob); }
  // Lines of `node`'s log that contain `what`.
  int CountLog(const std::string& node, const std::string& what) {
    std::istringstream in(ReadLog(node));
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
    return n;
  }

  std::unique_ptr<testing::TempDir> tmp_;
  std::string base_, root_, run_, secret_file_;
  std::string peer_timeout_ = "1";  // --peer-timeout-s of the daemons started next
  std::vector<pid_t> daemons_;
  std::set<std::string> nodes_;
};

TEST_F(CkptdPeerTest, RingReplicatesAndAReplacementNodeRestoresFromPeerMemory) {
  StartDaemon("a", "b");
  StartDaemon("b", "a");
  auto r = Trainer("a", 0, 1, "1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 1; })) << ReadLog("a") << ReadLog("b");
  r = Trainer("a", 0, 1, "2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(WaitFor([&] { return Latest() == 2; })) << ReadLog("a");
  // Newest replica wins: B ends up with step 2, whole and verified.
  ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 2; })) << ReadLog("a") << ReadLog("b");
  EXPECT_NE(ReadLog("b").find("every piece's XXH3 verified"), std::string::npos);
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& x : Replication("a").value("to_buddy", nlohmann::json::array())) {
      if (x["rank"] == 0 && x["newest_step_replicated"] == 2) return true;
    }
    return false;
  })) << Replication("a").dump();
  EXPECT_EQ(Replication("a")["buddy"], Addr("b"));
  auto ctl = RunCommand(BinDir() + "/ckptctl status " + run_ + " --node b --node a", 30);
  EXPECT_NE(ctl.output.find("holds rank 0 step 2 "), std::string::npos) << ctl.output;
  EXPECT_NE(ctl.output.find("rank 0 -> buddy: newest_step 2 "), std::string::npos) << ctl.output;
  // C replaces node A: its trainer of rank 0 pulls step 2 from peer memory, then restores
  // it from C's memory: bit-identical to the state, and every tensor piece matches the
  // committed manifest's XXH3 (what resume checks).
  StartDaemon("c");
  auto c = Trainer("c", 0, 1, "-", "--fetch-peer 2 --restore --check-manifest " + root_);
  ASSERT_EQ(c.exit_code, 0) << c.output << ReadLog("c");
  EXPECT_NE(c.output.find("fetched step 2 from peer " + Addr("b")), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("restored step 2 "), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("manifest check: "), std::string::npos) << c.output;
  EXPECT_NE(ReadLog("c").find("fetched from peer " + Addr("b")), std::string::npos) << ReadLog("c");
  EXPECT_EQ(Replication("c")["fetches"], 1);
  // B counts it once the fetcher's acknowledgement arrived, which may be after C answered.
  EXPECT_TRUE(WaitFor([&] { return Replication("b").value("replicas_served", 0) == 1; }, 10))
      << Replication("b").dump();
  // B keeps the replica before the newest too (the newest may never commit when its node ran
  // ahead of one that died: the restart resumes from the one before).
  EXPECT_NE(ctl.output.find("holds rank 0 step 1 "), std::string::npos) << ctl.output;
  auto prev = Trainer("c", 0, 1, "-", "--fetch-peer 1 --restore-step 1");
  EXPECT_EQ(prev.exit_code, 0) << prev.output << ReadLog("c");
  EXPECT_NE(prev.output.find("fetched step 1 from peer " + Addr("b")), std::string::npos)
      << prev.output;
  EXPECT_NE(prev.output.find("restored step 1 "), std::string::npos) << prev.output;
  // A step no peer holds: not found (the trainer reads from disk), nothing breaks.
  auto none = Trainer("c", 0, 1, "-", "--fetch-peer 3");
  EXPECT_EQ(none.exit_code, 6) << none.output;
  EXPECT_NE(none.output.find("no replica of rank 0 step 3 here (newest: step 2)"),
            std::string::npos)
      << none.output;
  // Named peer address.
  auto named = Trainer("c", 0, 1, "-", "--fetch-peer 2 --peer " + Addr("b") + " --restore");
  EXPECT_EQ(named.exit_code, 0) << named.output;
}

// Memory tier (issue 35): a memory-only snapshot is never written to disk, but it is
// retained, hashed, replicated, and reported as held twice (own daemon + buddy) with its
// digest; a replacement node fetches it from the buddy and its digest matches.
TEST_F(CkptdPeerTest, MemoryTierSnapshotIsHeldTwiceNeverPersistedAndFetchable) {
  StartDaemon("a", "b");
  StartDaemon("b", "a");
  ASSERT_EQ(Trainer("a", 0, 1, "1").exit_code, 0);  // a disk checkpoint first
  ASSERT_TRUE(WaitFor([&] { return Latest() == 1; })) << ReadLog("a");
  auto m = Trainer("a", 0, 1, "2,3", "--memory");
  ASSERT_EQ(m.exit_code, 0) << m.output << ReadLog("a");
  std::string digest;
  auto held_twice = [&](int64_t step) {
    for (const auto& r : DaemonStatus("a").value("ranks", nlohmann::json::array())) {
      for (const auto& x : r.value("memory_snapshots", nlohmann::json::array())) {
        if (x["step"] == step && x["at_buddy"] == true) {
          digest = x["digest"].get<std::string>();
          return true;
        }
      }
    }
    return false;
  };
  ASSERT_TRUE(WaitFor([&] { return held_twice(3); })) << DaemonStatus("a").dump() << ReadLog("a");
  EXPECT_EQ(digest.size(), 16u);
  // Never on disk: the newest checkpoint is still step 1 and no partial of 2 or 3 exists.
  EXPECT_EQ(Latest(), 1);
  EXPECT_FALSE(fs::exists(root_ + "/step-00000003.partial"));
  EXPECT_FALSE(fs::exists(root_ + "/step-00000003"));
  EXPECT_EQ(DaemonStatus("a")["last_persisted_step"], 1);
  EXPECT_EQ(DaemonStatus("a")["memory_snapshots_taken"], 2);
  EXPECT_EQ(HeldStep("b", 0), 3);
  // The own daemon restores it with the same digest...
  auto own = Trainer("a", 0, 1, "-", "--restore-step 3");
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_NE(own.output.find("digest=" + digest), std::string::npos) << own.output << digest;
  // ... and so does a replacement node, from the buddy's memory.
  StartDaemon("c");
  auto c = Trainer("c", 0, 1, "-", "--fetch-peer 3 --restore-step 3");
  ASSERT_EQ(c.exit_code, 0) << c.output << ReadLog("c");
  EXPECT_NE(c.output.find("fetched step 3 from peer " + Addr("b")), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("digest=" + digest), std::string::npos) << c.output << digest;
}

TEST_F(CkptdPeerTest, ReplicaThatDoesNotFitKeepsTheOlderCompleteOne) {
  const uint64_t image = ckpt::SlotBytesFor(testing::RankState(0, 0, 1).contents());
  // Room for one replica, not for a second one next to it while it arrives.
  const double gb = 1.5 * static_cast<double>(image) / static_cast<double>(uint64_t{1} << 30);
  StartDaemon("b", "", {"--replica-memory-gb", std::to_string(gb)});
  StartDaemon("a", "b");
  ASSERT_EQ(Trainer("a", 0, 1, "1").exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 1; })) << ReadLog("a") << ReadLog("b");
  ASSERT_EQ(Trainer("a", 0, 1, "2,3").exit_code, 0);
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& x : Replication("a").value("to_buddy", nlohmann::json::array())) {
      if (x["failures"].get<int>() >= 1) return true;
    }
    return false;
  })) << Replication("a").dump()
      << ReadLog("b");
  const std::string log = ReadLog("b");
  EXPECT_NE(log.find("does not fit the replica budget"), std::string::npos) << log;
  EXPECT_NE(log.find("short by"), std::string::npos) << log;
  // Logged once per rank, not once per attempt.
  EXPECT_EQ(log.find("does not fit"), log.rfind("does not fit")) << log;
  EXPECT_EQ(HeldStep("b", 0), 1);
  EXPECT_NE(Replication("a")["to_buddy"][0]["last_error"].get<std::string>().find("does not fit"),
            std::string::npos);
  // The older complete replica is still served.
  StartDaemon("c");
  auto c = Trainer("c", 0, 1, "-", "--fetch-peer 1 --peer " + Addr("b") + " --restore");
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

TEST_F(CkptdPeerTest, PreviousReplicaGivesWayToANewOneButANewestNeverDoes) {
  const uint64_t image = ckpt::SlotBytesFor(testing::RankState(0, 0, 1).contents());
  // Room for two replicas and a half: newest + previous, and a third only in place of one.
  const double gb = 2.5 * static_cast<double>(image) / static_cast<double>(uint64_t{1} << 30);
  StartDaemon("b", "", {"--replica-memory-gb", std::to_string(gb)});
  StartDaemon("a", "b");
  auto steps = [&] {
    std::set<int64_t> out;
    for (const auto& h : Replication("b").value("replicas_held", nlohmann::json::array())) {
      out.insert(h["step"].get<int64_t>());
    }
    return out;
  };
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_EQ(Trainer("a", 0, 1, std::to_string(step)).exit_code, 0);
    ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) == step; })) << ReadLog("a") << ReadLog("b");
  }
  // Step 3 arrived in the room of step 1 (the oldest previous), not in place of step 2.
  EXPECT_EQ(steps(), (std::set<int64_t>{2, 3})) << Replication("b").dump();
  EXPECT_EQ(ReadLog("b").find("does not fit"), std::string::npos) << ReadLog("b");
  StartDaemon("c");
  auto c = Trainer("c", 0, 1, "-", "--fetch-peer 2 --peer " + Addr("b") + " --restore-step 2");
  EXPECT_EQ(c.exit_code, 0) << c.output << ReadLog("c");
  EXPECT_NE(c.output.find("restored step 2 "), std::string::npos) << c.output;
}

TEST_F(CkptdPeerTest, BuddyKilledMidReplicationCostsTheTrainerNothingAndIsRetried) {
  pid_t b = StartDaemon("b");
  StartDaemon("a", "b");
  // Big snapshots (~60 MB) so that the buddy dies while one is on the wire.
  std::thread killer([&] {
    WaitFor([&] { return ReadLog("a").find("persisted step=1 ") != std::string::npos; }, 60);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Kill(b, SIGKILL);
  });
  auto r = Trainer("a", 0, 1, "1,2,3", "--scale 2000");
  killer.join();
  Forget(b);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(WaitFor([&] { return Latest() == 3; }, 60)) << ReadLog("a");
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& x : Replication("a").value("to_buddy", nlohmann::json::array())) {
      if (x["failures"].get<int>() >= 1) return true;
    }
    return false;
  })) << Replication("a").dump();
  EXPECT_NE(ReadLog("a").find("retrying (training is not affected)"), std::string::npos);
  // The buddy comes back (on another port; A re-reads its address file) and gets the newest.
  fs::remove(AddrFile("b"));
  StartDaemon("b");
  EXPECT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 3; }, 60)) << ReadLog("a") << ReadLog("b");
  // A still serves its trainer.
  EXPECT_EQ(Trainer("a", 0, 1, "4", "--scale 2000").exit_code, 0);
}

// --replication-mbps: the sender's token bucket holds a ~12 MB snapshot to the cap (5 MB/s,
// burst 1.25 MB: at most 5 x 12 / (12 - 1.25) = 5.6 MB/s measured over one transfer).
TEST_F(CkptdPeerTest, ReplicationIsCappedAtReplicationMbps) {
  StartDaemon("b");
  StartDaemon("a", "b", {"--replication-mbps", "5"});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Trainer("a", 0, 1, "1", "--scale 400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 1; }, 60)) << ReadLog("a") << ReadLog("b");
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The buddy holds it a moment before the sender logs the acknowledgement.
  const std::regex line(
      "replicated step=1 rank=0 .* bytes=([0-9]+) seconds=([0-9.e+-]+) MB/s=([0-9.e+-]+)");
  std::smatch m;
  std::string log;
  ASSERT_TRUE(WaitFor(
      [&] {
        log = ReadLog("a");
        return std::regex_search(log, m, line);
      },
      10))
      << log;
  const double bytes = std::stod(m[1]), mbps = std::stod(m[3]);
  EXPECT_GT(bytes, 10e6) << log;
  EXPECT_LE(mbps, 5.0 * bytes / (bytes - 1.25e6) * 1.02) << log;
  EXPECT_GE(total_s, (bytes - 1.25e6) / 5e6 * 0.98) << log;
  EXPECT_NE(log.find("replication cap 5 MB/s"), std::string::npos) << log;
  std::printf("replication capped at 5 MB/s: %.0f bytes at %.2f MB/s\n", bytes, mbps);
}

// A send slower than the snapshots (a capped one) is spared: with step 1 on its way to the
// buddy, ACQUIRE hands out the slot of step 2 for step 3, not step 1's, so step 1 arrives
// whole instead of being abandoned (the memory tier thins out rather than empties).
TEST_F(CkptdPeerTest, TheSlotBeingSentIsHandedOutLast) {
  StartDaemon("b");
  StartDaemon("a", "b", {"--replication-mbps", "5"});
  auto m = Trainer("a", 0, 1, "1,2,3", "--memory --scale 400");  // ~12 MB each, ~2.5 s to send
  ASSERT_EQ(m.exit_code, 0) << m.output << ReadLog("a");
  ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) >= 1; }, 60)) << ReadLog("a") << ReadLog("b");
  EXPECT_TRUE(
      WaitFor([&] { return ReadLog("a").find("replicated step=1 ") != std::string::npos; }, 10))
      << ReadLog("a");
  EXPECT_EQ(ReadLog("a").find("replication of step 1 rank 0 ABANDONED"), std::string::npos)
      << ReadLog("a");
}

// Raw TCP connections to B's peer port, each hostile in one way.
class HostilePeer {
 public:
  explicit HostilePeer(const std::string& address) {
    auto c = ckptd::peer::ConnectPeer(address, 5, Env::Default());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) conn_ = std::move(c).value();
  }
  PeerConn* operator->() { return conn_.get(); }
  void Raw(const std::string& bytes) {
    EXPECT_EQ(::send(conn_->fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // The daemon closes the connection within `s` seconds.
  bool ClosedWithin(double s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      ssize_t n = ::recv(conn_->fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // HELLO, CHALLENGE, AUTH with `secret`: the server's verdict.
  Status Authenticate(const std::string& secret, const std::string& job) {
    return ckptd::peer::AuthenticateAsClient(conn_.get(), secret, job);
  }

 private:
  std::unique_ptr<PeerConn> conn_;
};

TEST_F(CkptdPeerTest, HostilePeersAreDisconnectedAndLoggedWhileServiceGoesOn) {
  StartDaemon("b");
  const std::string addr = Addr("b");
  auto logged = [&](const std::string& what) {
    return WaitFor([&] { return ReadLog("b").find(what) != std::string::npos; }, 10);
  };
  {
    HostilePeer p(addr);  // silence: closed by the 1 s frame deadline (the log says which)
    EXPECT_TRUE(p.ClosedWithin(30));
    EXPECT_TRUE(logged("sent 0 of 16 bytes within")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // wrong secret: it cannot answer the challenge
    const std::string nonce(ckptd::peer::kNonceBytes, 'n');
    ASSERT_TRUE(p->Send(PeerMsg::kHello, ckptd::peer::EncodeHello({nonce, kJob})).ok());
    std::string payload;
    ASSERT_TRUE(p->Expect(PeerMsg::kChallenge, &payload).ok());
    auto ch = ckptd::peer::DecodeChallenge(payload);
    ASSERT_TRUE(ch.ok());
    // ... and B proved the right secret to us.
    EXPECT_EQ(ch->mac, ckptd::peer::ProofOf(kSecret, "server", nonce, ch->nonce, kJob));
    ASSERT_TRUE(p->Send(PeerMsg::kAuth, ckptd::peer::ProofOf("wrong-secret-0123456", "client",
                                                             nonce, ch->nonce, kJob))
                    .ok());
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("failed the challenge (wrong job secret)")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // the daemon side sees through a wrong secret too
    EXPECT_FALSE(p.Authenticate("wrong-secret-0123456", kJob).ok());
  }
  {
    HostilePeer p(addr);  // the right secret, another job
    Status s = p.Authenticate(kSecret, "9999");
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(logged("is a peer of job '9999', not of this job '4711'")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // oversized length prefix
    p.Raw(ckptd::peer::EncodeFrameHeader(PeerMsg::kHello, 0xffffffffu));
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("exceeds its bound")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // garbage
    p.Raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("bad magic")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // truncated frame, then gone
    p.Raw(ckptd::peer::EncodeFrameHeader(PeerMsg::kHello, 40) + "0123456789");
    ::shutdown(p->fd(), SHUT_WR);
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("in the middle of a frame (truncated)")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // authenticated, but stores a snapshot of another job
    ASSERT_TRUE(p.Authenticate(kSecret, kJob).ok());
    ckptd::peer::ReplicaHeader h;
    h.job = "9999";
    h.extent = 64;
    h.submit.meta.world_size = 1;
    ASSERT_TRUE(p->Send(PeerMsg::kStore, ckptd::peer::EncodeReplicaHeader(h)).ok());
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("tried to store a snapshot of job '9999'")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // authenticated, but fetches another job's snapshot
    ASSERT_TRUE(p.Authenticate(kSecret, kJob).ok());
    ASSERT_TRUE(p->Send(PeerMsg::kFetch, ckptd::peer::EncodeFetch({"9999", 0, 1})).ok());
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("tried to fetch a snapshot of job '9999'")) << ReadLog("b");
  }
  {
    HostilePeer p(addr);  // authenticated, then a STORE image longer than announced
    ASSERT_TRUE(p.Authenticate(kSecret, kJob).ok());
    proto::PieceDesc piece;
    piece.is_blob = true;
    piece.kind = "rng";
    piece.name = "x";
    piece.policy = "per_rank";
    piece.length = 8;
    ckptd::peer::ReplicaHeader h;
    h.job = kJob;
    h.step = 5;
    h.extent = 8;
    h.submit.step = 5;
    h.submit.meta.world_size = 1;
    h.submit.pieces = {piece};
    h.xxh3 = {0};
    ASSERT_TRUE(p->Send(PeerMsg::kStore, ckptd::peer::EncodeReplicaHeader(h)).ok());
    std::string payload;
    ASSERT_TRUE(p->Expect(PeerMsg::kAccept, &payload).ok());
    const std::string data(100, 'x');
    EXPECT_TRUE(p->SendData(reinterpret_cast<const uint8_t*>(data.data()), 100).ok());
    EXPECT_TRUE(p.ClosedWithin(5));
    EXPECT_TRUE(logged("image data beyond its announced 8 bytes")) << ReadLog("b");
  }
  {
    // More than kMaxPreAuthPerAddress at once from one address: the extra ones are closed.
    std::vector<std::unique_ptr<HostilePeer>> many;
    for (int i = 0; i < 9; ++i) many.push_back(std::make_unique<HostilePeer>(addr));
    EXPECT_TRUE(logged("over the limit of 4 connections in the handshake from one address"))
        << ReadLog("b");
  }
  EXPECT_GE(Replication("b")["bad_peers"].get<int>(), 9) << Replication("b").dump();
  // B still replicates and serves: A's snapshot arrives, C fetches it.
  StartDaemon("a", "b");
  ASSERT_EQ(Trainer("a", 0, 1, "1").exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 1; })) << ReadLog("a") << ReadLog("b");
  StartDaemon("c");
  auto c = Trainer("c", 0, 1, "-", "--fetch-peer 1 --peer " + addr + " --restore");
  EXPECT_EQ(c.exit_code, 0) << c.output << ReadLog("b");
}

// A TCP port on 127.0.0.1 that nothing ever accepts on: a connection completes (the kernel
// queues it) but no byte ever comes back. Saturate() fills its accept queue, after which
// connection attempts get no answer at all, like a node that is down.
class BlackHole {
 public:
  BlackHole() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 0), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~BlackHole() {
    for (int f : fillers_) ::close(f);
    ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Whether a connection is waiting in the accept queue (somebody dialled it).
  bool Dialled() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  void Saturate() {
    for (int i = 0; i < 3; ++i) {
      int f = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(port_));
      (void)::connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a));  // in progress
      fillers_.push_back(f);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the handshakes land
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

// Hole: the trainer gave up on a FETCH_PEER (its timeout), the daemon answered later, and
// that late FETCH_PEER_OK was read as the answer to the trainer's next request. Now the
// daemon answers within half of the trainer's wait, and never after.
TEST_F(CkptdPeerTest, FetchOutlastingTheTrainersWaitIsAnsweredInTimeAndNeverLater) {
  peer_timeout_ = "12";  // the peer below holds the fetch this long
  StartDaemon("c");
  BlackHole hole;
  auto client = ckpt::CkptdClient::Connect(run_, "c", 0, 1, 1 << 20);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto f = (*client)->FetchFromPeer(5, hole.address(), 6);
  ASSERT_TRUE(f.ok()) << f.status().ToString() << "\n" << ReadLog("c");
  EXPECT_FALSE(f->found);
  EXPECT_NE(f->detail.find("within half of the trainer's timeout"), std::string::npos) << f->detail;
  // The fetch itself ends later (answered or not); its result must reach no one.
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string log = ReadLog("c");
        return log.find("not answered") != std::string::npos ||
               log.find("from peer memory failed") != std::string::npos;
      },
      60))
      << ReadLog("c");
  auto st = (*client)->StatusJson();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_NE(st->find("\"replication\""), std::string::npos);
  EXPECT_NE(ReadLog("c").find("after its trainer stopped waiting; not answered"),
            std::string::npos);
  // The connection still works for the next fetch.
  auto again = (*client)->FetchFromPeer(5, "", 6);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->found);
}

// Hole: every start asked every peer-addr file, including dead nodes' files of earlier
// starts, and a requeued start (all replica stores empty) asked all of them for nothing.
TEST_F(CkptdPeerTest, FetchesSkipEarlierStartsAndNewStartsAndDeadPeersOnce) {
  StartDaemon("a", "b");
  StartDaemon("b", "a");
  ASSERT_EQ(Trainer("a", 0, 1, "1,2").exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return Latest() == 2 && HeldStep("b", 0) == 2; }))
      << ReadLog("a") << ReadLog("b");
  // A daemon of an earlier start died with its file left behind (sorts first: asked first
  // by the old code): never dialled.
  BlackHole earlier;
  PlantAddrFile("0old", earlier.address(), "0123456789abcdef");
  // Two daemons of this start died (their hosts are down): probed together, then skipped.
  BlackHole dead1, dead2;
  dead1.Saturate();
  dead2.Saturate();
  PlantAddrFile("1dead", dead1.address(), ThisStart());
  PlantAddrFile("2dead", dead2.address(), ThisStart());
  StartDaemon("c");
  auto c = Trainer("c", 0, 1, "-", "--fetch-peer 2 --restore");
  ASSERT_EQ(c.exit_code, 0) << c.output << ReadLog("c");
  EXPECT_NE(c.output.find("fetched step 2 from peer " + Addr("b")), std::string::npos) << c.output;
  EXPECT_FALSE(earlier.Dialled()) << ReadLog("c");
  EXPECT_EQ(CountLog("c", "does not answer"), 2) << ReadLog("c");
  // The next fetch does not wait for them again.
  auto again = Trainer("c", 0, 1, "-", "--fetch-peer 3");
  EXPECT_EQ(again.exit_code, 6) << again.output;
  EXPECT_EQ(CountLog("c", "does not answer"), 2) << ReadLog("c");
  EXPECT_NE(again.output.find("did not answer a moment ago (skipped)"), std::string::npos)
      << again.output;

  // The job is requeued: a new start (a new secret), every daemon starts empty. Step 2 was
  // committed before they came up, so no peer can hold it: the fetch is not even tried.
  for (pid_t p : daemons_) Kill(p, SIGTERM);
  daemons_.clear();
  std::ofstream(secret_file_) << "another-start-secret-0123456789\n";
  StartDaemon("a", "b");
  StartDaemon("b", "a");
  StartDaemon("c");
  auto requeued = Trainer("c", 0, 1, "-", "--fetch-peer 2");
  EXPECT_EQ(requeued.exit_code, 6) << requeued.output;
  EXPECT_NE(requeued.output.find("not newer than the newest committed when this start's daemons"),
            std::string::npos)
      << requeued.output;
  EXPECT_EQ(Replication("b").value("peer_requests_refused", -1), 0) << Replication("b").dump();
  // A step of this start is fetched as before (the start's value survives a daemon that
  // came up later: c started after a and b).
  ASSERT_EQ(Trainer("a", 0, 1, "3").exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return Latest() == 3 && HeldStep("b", 0) == 3; }))
      << ReadLog("a") << ReadLog("b");
  auto fresh = Trainer("c", 0, 1, "-", "--fetch-peer 3 --restore");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output << ReadLog("c");
}

// Hole: anyone could hold all peer connection slots (2 x --peer-timeout-s each) and flood
// the log. Strangers now get a short handshake deadline in a pool of their own with a
// share per address, and their refusals are logged at a bounded rate.
// On a spare that was the dead node's buddy the replica is in its own store: it is taken
// from there before any other peer is dialled (a dead one would cost a connect timeout).
TEST_F(CkptdPeerTest, OwnReplicaStoreIsAskedBeforeAnyPeerIsDialled) {
  StartDaemon("a", "b");
  StartDaemon("b", "a");
  ASSERT_EQ(Trainer("a", 0, 1, "1,2").exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return Latest() == 2 && HeldStep("b", 0) == 2; }))
      << ReadLog("a") << ReadLog("b");
  BlackHole dead;  // a daemon of this start that hangs (sorts before b)
  PlantAddrFile("0dead", dead.address(), ThisStart());
  auto r = Trainer("b", 0, 1, "-", "--fetch-peer 2 --restore");
  ASSERT_EQ(r.exit_code, 0) << r.output << ReadLog("b");
  EXPECT_NE(r.output.find("fetched step 2 from peer " + Addr("b")), std::string::npos) << r.output;
  EXPECT_FALSE(dead.Dialled()) << ReadLog("b");
}

// Keeps `n` idle connections from 127.0.0.2 (another host, as far as the daemon can tell)
// open to a port, reopening each one the daemon closes, until destroyed. Counts the closes
// of connections that had been open for more than a second: admitted, then timed out.
class Flood {
 public:
  Flood(int port, int n) : port_(port), fds_(n, -1), opened_(n) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Flood() {
    stop_ = true;
    thread_.join();
    for (int f : fds_) {
      if (f >= 0) ::close(f);
    }
  }
  int timed_out() const { return timed_out_.load(); }

 private:
  int Open() {
    int f = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in me{};
    me.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.2", &me.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    to.sin_port = htons(static_cast<uint16_t>(port_));
    if (::bind(f, reinterpret_cast<sockaddr*>(&me), sizeof(me)) != 0 ||
        ::connect(f, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      ::close(f);
      return -1;
    }
    return f;
  }
  void Run() {
    using Clock = std::chrono::steady_clock;
    while (!stop_) {
      for (size_t i = 0; i < fds_.size(); ++i) {
        char b;
        if (fds_[i] >= 0) {
          const ssize_t r = ::recv(fds_[i], &b, 1, MSG_DONTWAIT);
          if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;  // still open
          if (Clock::now() - opened_[i] > std::chrono::seconds(1)) ++timed_out_;
          ::close(fds_[i]);
        }
        fds_[i] = Open();
        opened_[i] = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const int port_;
  std::vector<int> fds_;
  std::vector<std::chrono::steady_clock::time_point> opened_;
  std::atomic<bool> stop_{false};
  std::atomic<int> timed_out_{0};
  std::thread thread_;
};

// Hole: anyone could hold all peer connection slots (2 x --peer-timeout-s each), keep
// reopening them, and flood the log. Strangers now get a short handshake deadline in a
// pool of their own with a share per address, and their refusals are logged at a bounded
// rate.
TEST_F(CkptdPeerTest, StrangersCannotCrowdOutTheJobsPeersNorFloodTheLog) {
  peer_timeout_ = "30";
  StartDaemon("b");
  const std::string addr = Addr("b");
  {
    Flood flood(std::stoi(addr.substr(addr.rfind(':') + 1)), 40);
    ASSERT_TRUE(
        WaitFor([&] { return Replication("b").value("peer_connections_over_limit", 0) >= 20; }, 20))
        << Replication("b").dump();
    // A member of the job gets through while strangers keep every slot they can get.
    StartDaemon("a", "b");
    ASSERT_EQ(Trainer("a", 0, 1, "1").exit_code, 0);
    EXPECT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 1; }, 30)) << ReadLog("a") << ReadLog("b");
    // Strangers admitted to the handshake are dropped long before --peer-timeout-s.
    EXPECT_TRUE(WaitFor([&] { return flood.timed_out() >= 1; }, 15)) << ReadLog("b");
  }
  EXPECT_LE(CountLog("b", "127.0.0.2"), 30) << ReadLog("b");
  EXPECT_GE(Replication("b").value("peer_warnings_not_logged", 0), 1) << Replication("b").dump();
}

// Hole: a replication setup failure (a taken port, an unwritable address file) made the
// daemon exit 2, which the agent reads as bad settings: the node lost asynchronous
// checkpoints. Now replication is off, loudly, and the daemon serves its trainer.
TEST_F(CkptdPeerTest, ReplicationSetupFailureLeavesTheDaemonServingAndSaysSo) {
  int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(taken, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  StartDaemon("a", "", {"--peer-listen", "127.0.0.1:" + port}, false);
  EXPECT_NE(ReadLog("a").find("BUDDY REPLICATION IS OFF"), std::string::npos) << ReadLog("a");
  EXPECT_FALSE(fs::exists(AddrFile("a")));
  const nlohmann::json rep = Replication("a");
  EXPECT_EQ(rep.value("enabled", true), false) << rep.dump();
  EXPECT_NE(rep.value("error", "").find("127.0.0.1:" + port), std::string::npos) << rep.dump();
  ASSERT_EQ(Trainer("a", 0, 1, "1").exit_code, 0) << ReadLog("a");
  EXPECT_TRUE(WaitFor([&] { return Latest() == 1; })) << ReadLog("a");
  ::close(taken);
}

TEST_F(CkptdPeerTest, AnUnwritableAddressFileIsRetriedUntilItIsPublished) {
  // The temp file's name is taken by a directory: every write fails until it goes.
  fs::create_directories(proto::SocketDir(run_, "b") + "/peer-addr.tmp");
  ::chmod(proto::SocketDir(run_, "b").c_str(), 0700);
  StartDaemon("b", "", {}, false);
  ASSERT_TRUE(WaitFor([&] { return CountLog("b", "cannot publish the peer address") >= 1; }, 10))
      << ReadLog("b");
  EXPECT_FALSE(fs::exists(AddrFile("b")));
  fs::remove(proto::SocketDir(run_, "b") + "/peer-addr.tmp");
  ASSERT_TRUE(WaitFor([&] { return fs::exists(AddrFile("b")); }, 60)) << ReadLog("b");
  EXPECT_EQ(Replication("b").value("address_published", false), true);
  // And it is usable: A replicates to it.
  StartDaemon("a", "b");
  ASSERT_EQ(Trainer("a", 0, 1, "1").exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return HeldStep("b", 0) == 1; })) << ReadLog("a") << ReadLog("b");
}

// Hole: the published address was whatever the listen address or host name gave. Now
// --peer-advertise names the interface or address, a loopback literal is refused in a
// multi-node job, and each daemon checks at start that its buddy's address resolves and
// answers, with a warning naming it when not.
TEST_F(CkptdPeerTest, PeerAdvertiseAndTheBuddyCheck) {
  StartDaemon("b", "", {"--peer-listen", "0.0.0.0:0", "--peer-advertise", "lo"});
  EXPECT_EQ(Addr("b").rfind("127.0.0.1:", 0), 0u) << Addr("b");
  StartDaemon("a", "b");
  ASSERT_TRUE(WaitFor([&] { return Replication("a").value("buddy_check", "") == "ok"; }, 20))
      << ReadLog("a");
  EXPECT_NE(ReadLog("a").find("resolves and answers as a daemon of this job"), std::string::npos);

  // A name only the buddy's node could resolve, and an address where nothing answers.
  PlantAddrFile("nxhost", "no-such-host.invalid:4000", ThisStart());
  StartDaemon("x", "nxhost");
  ASSERT_TRUE(WaitFor([&] { return !Replication("x").value("buddy_check", "").empty(); }, 20));
  EXPECT_NE(ReadLog("x").find("the buddy's peer address 'no-such-host.invalid:4000' (from " +
                              AddrFile("nxhost") + ") does not resolve on this node"),
            std::string::npos)
      << ReadLog("x");
  BlackHole closed;  // dialled, never answers the handshake
  PlantAddrFile("mute", closed.address(), ThisStart());
  StartDaemon("y", "mute");
  ASSERT_TRUE(WaitFor([&] { return !Replication("y").value("buddy_check", "").empty(); }, 30));
  EXPECT_NE(ReadLog("y").find("'" + closed.address() + "' (from " + AddrFile("mute") +
                              ") does not answer as a daemon of this job"),
            std::string::npos)
      << ReadLog("y");

  // In a job of several nodes, a loopback literal is refused (replication off, loudly); a
  // name that is not an interface and does not resolve is refused everywhere.
  ::setenv("SLURM_JOB_NUM_NODES", "3", 1);
  StartDaemon("m", "", {"--peer-listen", "0.0.0.0:0", "--peer-advertise", "127.0.0.1"}, false);
  StartDaemon("n", "", {"--peer-listen", "0.0.0.0:0", "--peer-advertise", "lo"}, false);
  ::unsetenv("SLURM_JOB_NUM_NODES");
  EXPECT_NE(ReadLog("m").find("--peer-advertise '127.0.0.1' is the loopback address 127.0.0.1 "
                              "in a job of 3 nodes"),
            std::string::npos)
      << ReadLog("m");
  EXPECT_NE(ReadLog("n").find("--peer-advertise 'lo' (127.0.0.1) is the loopback address"),
            std::string::npos)
      << ReadLog("n");
  EXPECT_FALSE(fs::exists(AddrFile("m")));
  StartDaemon("o", "", {"--peer-listen", "0.0.0.0:0", "--peer-advertise", "no-such-iface.invalid"},
              false);
  EXPECT_NE(ReadLog("o").find("is neither an interface of this node nor a host name that resolves"),
            std::string::npos)
      << ReadLog("o");
  EXPECT_EQ(Replication("o").value("enabled", true), false);
}

TEST_F(CkptdPeerTest, SecretAndPeerFlagsAreCheckedAtStart) {
  const std::string base = BinDir() + "/ckptd --root " + root_ + " --run-dir " + run_ +
                           " --node x --peer-listen 127.0.0.1:0 --job-id 1 ";
  ::chmod(secret_file_.c_str(), 0644);
  auto r = RunCommand(base + "--job-secret-file " + secret_file_, 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has mode 0644"), std::string::npos) << r.output;
  ::chmod(secret_file_.c_str(), 0600);
  r = RunCommand("env -u FTRAIN_JOB_SECRET " + base, 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs the job secret"), std::string::npos) << r.output;
  r = RunCommand("env -u SLURM_JOB_ID " + BinDir() + "/ckptd --root " + root_ + " --run-dir " +
                     run_ + " --node x --peer-listen 127.0.0.1:0 --job-secret-file " + secret_file_,
                 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--job-id"), std::string::npos) << r.output;
  r = RunCommand(base + "--job-secret-file " + secret_file_ + " --buddy nohostport", 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = RunCommand(base + "--job-secret-file " + secret_file_ + " --replication-mbps -1", 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--replication-mbps must be in [0, 1e6]"), std::string::npos) << r.output;
  // A secret from the environment is checked like one from a file ...
  r = RunCommand("FTRAIN_JOB_SECRET=short " + base, 10);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("FTRAIN_JOB_SECRET holds 5 bytes"), std::string::npos) << r.output;
}

TEST_F(CkptdPeerTest, ASecretFromTheEnvironmentIsTheOnePeersMustProve) {
  // ... and a valid one works: the daemon comes up with no --job-secret-file, and a peer
  // that proves FTRAIN_JOB_SECRET is accepted while one with another secret is not.
  const std::string node = "envsecret", log = base_ + "/ckptd-" + node + ".log";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("FTRAIN_JOB_SECRET", kSecret, 1);
    execl((BinDir() + "/ckptd").c_str(), "ckptd", "--root", root_.c_str(), "--run-dir",
          run_.c_str(), "--node", node.c_str(), "--peer-listen", "127.0.0.1:0", "--job-id", kJob,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  daemons_.push_back(pid);
  nodes_.insert(node);
  for (int i = 0; i < 400 && !fs::exists(AddrFile(node)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(fs::exists(AddrFile(node))) << ReadLog(node);
  {
    HostilePeer p(Addr(node));
    EXPECT_TRUE(p.Authenticate(kSecret, kJob).ok()) << ReadLog(node);
  }
  {
    HostilePeer p(Addr(node));
    EXPECT_FALSE(p.Authenticate("another-secret-0123456789", kJob).ok());
  }
}

}  // namespace
}  // namespace ftrain
