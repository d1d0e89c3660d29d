// The detector's probes on real sockets (issue 44, hole 11): only ECONNREFUSED from the node's
// address is "refused" (dead at once); an unreachable network is judged like a timeout; with
// AsyncProbes a look never waits on a probe, so a TERM read right after a tick is read within
// the tick although a connect to a blackholed port hangs. Real TCP sockets on 127.0.0.1, the
// fake clock for the silences; about two seconds.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>

#include "core/fake_clock_env.h"
#include "orch/detect.h"
#include "orch/probe.h"
#include "orch/probe_async.h"

namespace ftrain::orch {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A TCP socket on 127.0.0.1: listening, bound only (connects are refused), or a blackhole
// (listening with its accept queue full and nobody accepting: connects time out).
class Port {
 public:
  enum class Mode { kOpen, kRefusing, kBlackhole };
  explicit Port(Mode m) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (m == Mode::kOpen) listen(fd_, 16);
    if (m == Mode::kBlackhole) {
      listen(fd_, 0);
      for (int i = 0; i < 4; ++i) {  // fill the accept queue; later SYNs are dropped
        const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a));
        held_.push_back(c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Port() {
    for (int c : held_) close(c);
    close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
  std::vector<int> held_;
};

TEST(ConnectProbe, OnlyARefusalFromTheNodeIsRefused) {
  EXPECT_STREQ(ClassifyConnectError(0), "open");
  EXPECT_STREQ(ClassifyConnectError(ECONNREFUSED), "refused");
  EXPECT_STREQ(ClassifyConnectError(ETIMEDOUT), "timeout");
  // Hole 11: a local link flap or a router's ICMP said no, not the node: never "refused".
  EXPECT_STREQ(ClassifyConnectError(ENETUNREACH), "unreachable");
  EXPECT_STREQ(ClassifyConnectError(EHOSTUNREACH), "unreachable");
  EXPECT_STREQ(ClassifyConnectError(EACCES), "unreachable");
}

TEST(ConnectProbe, RealSocketsOpenRefusedAndTimeout) {
  Port open(Port::Mode::kOpen), refusing(Port::Mode::kRefusing), hole(Port::Mode::kBlackhole);
  EXPECT_EQ(ConnectProbe("127.0.0.1", open.port(), 1), "open");
  EXPECT_EQ(ConnectProbe("127.0.0.1", refusing.port(), 1), "refused");
  const double t0 = Now();
  EXPECT_EQ(ConnectProbe("127.0.0.1", hole.port(), 0.2), "timeout");
  EXPECT_GE(Now() - t0, 0.35);  // tried twice
  EXPECT_EQ(ConnectProbe("no-such-host.invalid", 1, 0.2), "unknown");
}

TEST(Judge, AnUnreachableNetworkIsJudgedLikeATimeoutNeverDeadAtOnce) {
  const DetectSettings s;  // timeout 3, blip 10
  Evidence e;
  e.silent_s = 3;
  e.tcp = "unreachable";
  EXPECT_EQ(Judge(s, e), Verdict::kLate);  // the old code: "refused", dead at once
  e.silent_s = 10;
  EXPECT_TRUE(NeedsOthersProbe(s, e));
  e.others_answer = false;
  EXPECT_EQ(Judge(s, e), Verdict::kLate);
  e.others_answer = true;
  EXPECT_EQ(Judge(s, e), Verdict::kDead);  // past the blip window while others answer
}

// Probes a real port for every node; the heartbeats are the test's.
class PortProber : public Prober {
 public:
  explicit PortProber(int port, double timeout_s) : port_(port), timeout_s_(timeout_s) {}
  std::string ReadHeartbeat(const std::string& node) override { return node == "n1" ? beat : ""; }
  bool HeartbeatExists(const std::string&) override { return true; }
  std::string ProbeTcp(const std::string&) override {
    ++probes;
    return ConnectProbe("127.0.0.1", port_, timeout_s_);
  }
  std::string SlurmdAddress(const std::string&) override {
    return "127.0.0.1:" + std::to_string(port_);
  }
  bool ProbeTask(const std::string&) override { return true; }
  bool OthersAnswer(const std::vector<std::string>&, const std::string&) override { return true; }
  std::string beat = "1";  // written before the probes start, read on the caller's thread only
  std::atomic<int> probes{0};

 private:
  int port_;
  double timeout_s_;
};

// Seconds from a TERM sent (blocked, pending) to the loop reading it from a signalfd, the loop
// being what the controller's runner does: a look at the nodes on every tick, then signals.
double TermLatency(Detector* d, FakeClockEnv* clock, int sigfd) {
  kill(getpid(), SIGTERM);
  const double t0 = Now();
  for (int tick = 0; tick < 100; ++tick) {
    clock->Advance(0.5);
    d->Look({"n1"});
    signalfd_siginfo info{};
    if (read(sigfd, &info, sizeof(info)) == sizeof(info)) return Now() - t0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 1e9;
}

TEST(AsyncProbes, ATermIsReadWithinOneTickWhileAProbeHangs) {
  Port hole(Port::Mode::kBlackhole);
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, &old), 0);  // before any probe thread starts
  const int sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  ASSERT_GE(sigfd, 0);
  const DetectSettings s;
  const double probe_timeout_s = 0.4;  // a hanging probe: two tries, 0.8 s

  // The old way: the look probes in line and the TERM waits behind it.
  FakeClockEnv c1(Env::Default());
  PortProber sync_prober(hole.port(), probe_timeout_s);
  Detector sync(s, &sync_prober, &c1);
  sync.Reset({"n1"});
  sync.Look({"n1"});  // its heartbeat seen once: silent from now on
  c1.Advance(3);
  EXPECT_GE(TermLatency(&sync, &c1, sigfd), 0.7);

  // Asynchronous probes: the look returns at once; the TERM is read in the first tick.
  FakeClockEnv c2(Env::Default());
  PortProber heartbeats(hole.port(), probe_timeout_s);
  auto probing = std::make_shared<PortProber>(hole.port(), probe_timeout_s);
  AsyncProbes async(s, probing);
  Detector d(s, &heartbeats, &c2, &async);
  d.Reset({"n1"});
  d.Look({"n1"});
  c2.Advance(3);
  EXPECT_LT(TermLatency(&d, &c2, sigfd), 0.5);  // within one tick
  EXPECT_TRUE(async.InFlight("n1"));
  EXPECT_EQ(heartbeats.probes, 0);  // the caller's prober only read heartbeats

  // The answer is taken by a later look: a timeout, late (noted once), not dead.
  std::vector<Finding> found;
  for (int i = 0; i < 60 && found.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    found = d.Look({"n1"});
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].verdict, Verdict::kLate);
  EXPECT_NE(found[0].log.find("does not answer (timeout)"), std::string::npos) << found[0].log;

  close(sigfd);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
}

TEST(AsyncProbes, ARefusalIsDeclaredAtTheLookAfterItsAnswerWithItsEvidence) {
  Port refusing(Port::Mode::kRefusing);
  const DetectSettings s;
  FakeClockEnv clock(Env::Default());
  PortProber heartbeats(refusing.port(), 1);
  AsyncProbes async(s, std::make_shared<PortProber>(refusing.port(), 1));
  Detector d(s, &heartbeats, &clock, &async);
  d.Reset({"n1"});
  d.Look({"n1"});
  clock.Advance(3.5);
  EXPECT_TRUE(d.Look({"n1"}).empty());  // asked; nothing known yet
  for (int i = 0; i < 100 && async.InFlight("n1"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  clock.Advance(0.5);
  auto dead = d.Look({"n1"});
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].verdict, Verdict::kDead);
  EXPECT_NE(dead[0].log.find("heartbeat silent 3.5 s (limit 3 s); slurmd 127.0.0.1:" +
                             std::to_string(refusing.port()) + " refused"),
            std::string::npos)
      << dead[0].log;
}

TEST(AsyncProbes, AnAnswerAskedInAnEarlierSilenceIsDropped) {
  Port refusing(Port::Mode::kRefusing);
  const DetectSettings s;
  FakeClockEnv clock(Env::Default());
  PortProber heartbeats(refusing.port(), 1);
  AsyncProbes async(s, std::make_shared<PortProber>(refusing.port(), 1));
  Detector d(s, &heartbeats, &clock, &async);
  d.Reset({"n1"});
  d.Look({"n1"});
  clock.Advance(3.5);
  EXPECT_TRUE(d.Look({"n1"}).empty());  // asked during the first silence
  for (int i = 0; i < 100 && async.InFlight("n1"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  heartbeats.beat = "2";  // alive again: the silence ends
  EXPECT_TRUE(d.Look({"n1"}).empty());
  clock.Advance(3.5);  // silent again: the old answer says nothing about this silence
  EXPECT_TRUE(d.Look({"n1"}).empty());
}

}  // namespace
}  // namespace ftrain::orch
