// Buddy replication between real ckptd processes on localhost (TCP peer ports, shared-memory
// slots, a fake trainer): a ring A <-> B replicates A's snapshots into B's memory, a third
// daemon C (a replacement node) fetches one from B and serves it to a restore that is
// bit-identical and passes the manifest's hash check; newest replica wins, the budget keeps
// the older complete one, a buddy SIGKILLed mid-replication costs the trainer nothing and is
// retried; hostile peers (silence, wrong secret, other job, oversized / garbage / truncated
// frames, another job's snapshot) are disconnected and logged while service goes on.
// Label: multiproc.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckptd_client.h"
#include "ckpt/ckptd_protocol.h"
#include "ckpt/store.h"
#include "ckpt_fixture.h"
#include "peer_auth.h"
#include "peer_wire.h"
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
                    std::vector<std::string> extra = {}) {
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
                                     "1"};
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
      if (ReadLog(node).find("serving node") != std::string::npos && fs::exists(AddrFile(node)))
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
    ckpt::CheckpointStore store(root_);
    auto l = store.Latest();
    return l.ok() && l->has_value() ? (*l)->step : -1;
  }

  std::unique_ptr<testing::TempDir> tmp_;
  std::string base_, root_, run_, secret_file_;
  std::vector<pid_t> daemons_;
  std::set<std::string> nodes_;
};

TEST_F(CkptdPeerTest, RingReplicatesAndAReplacementNodeRestoresFromPeerMemory) {
  StartDaemon("a", "b");
  StartDaemon("b", "a");
  auto r = Trainer("a", 0, 1, "1,2");
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
  EXPECT_EQ(Replication("b")["replicas_served"], 1);
  // A step no peer holds: not found (the trainer reads from disk), nothing breaks.
  auto none = Trainer("c", 0, 1, "-", "--fetch-peer 1");
  EXPECT_EQ(none.exit_code, 6) << none.output;
  EXPECT_NE(none.output.find("no replica of rank 0 step 1"), std::string::npos) << none.output;
  // Named peer address.
  auto named = Trainer("c", 0, 1, "-", "--fetch-peer 2 --peer " + Addr("b") + " --restore");
  EXPECT_EQ(named.exit_code, 0) << named.output;
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

// Raw TCP connections to B's peer port, each hostile in one way.
class HostilePeer {
 public:
  explicit HostilePeer(const std::string& address) {
    auto c = ckptd::peer::ConnectPeer(address, 5);
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
    // More than kMaxPeerConns at once: the extra ones are closed at once.
    std::vector<std::unique_ptr<HostilePeer>> many;
    for (int i = 0; i < 9; ++i) many.push_back(std::make_unique<HostilePeer>(addr));
    EXPECT_TRUE(logged("over the limit of 8 concurrent peer connections")) << ReadLog("b");
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
