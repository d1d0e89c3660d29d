// orch/agent_runner.cc - AgentRunner (agent_runner.h): the daemon's supervision, the
// heartbeat, the ring and the batch-host watcher.
#include "orch/agent_runner.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <thread>

#include "ckpt/ckptd_protocol.h"
#include "core/clock.h"
#include "core/env.h"
#include "orch/detect.h"
#include "orch/files.h"
#include "orch/probe.h"
#include "orch/process.h"
#include "orch/submission.h"
#include "orch/topology.h"

namespace ftrain::orch {

std::string AgentRunner::Stamp() const {
  const auto t = static_cast<std::time_t>(UnixSeconds(env_));
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return when;
}

namespace {

std::string FullHost() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

AgentRunner::AgentRunner(AgentSettings s, Env* env)
    : s_(std::move(s)), env_(env), layout_(s_.run_dir) {
  job_ = EnvOr("SLURM_JOB_ID");
  restart_count_ = std::atoi(EnvOr("SLURM_RESTART_COUNT", "0").c_str());
}

void AgentRunner::Log(const std::string& text) {
  std::lock_guard<std::mutex> l(log_mu_);
  std::cout << "[" << Stamp() << "] agent.sh " << s_.node << ": " << text << std::endl;
}

bool AgentRunner::DaemonAnswers() const {
  // This node's daemon, through its socket on this node (a Unix socket is local to a kernel).
  const std::string path = ckpt::proto::SocketPath(s_.run_dir, s_.node);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

void AgentRunner::HeartbeatLoop() {
  const std::string f = layout_.heartbeats() + "/" + s_.node;
  if (!CreateDirs(env_, layout_.heartbeats()).ok()) {
    Log("WARNING: cannot make " + layout_.heartbeats() + ": no heartbeat");
    return;
  }
  long seq = 0;
  while (!stop_) {
    const std::string state = daemon_up_ ? "up" : (daemon_pid_ > 0 ? "starting" : "down");
    HeartbeatLine h{std::to_string(++seq), std::to_string(getpid()), job_,
                    std::to_string(restart_count_), state};
    const std::string tmp = f + ".tmp";
    FILE* out = std::fopen(tmp.c_str(), "w");
    if (out != nullptr) {
      std::fputs((FormatHeartbeat(h) + "\n").c_str(), out);
      std::fclose(out);
      std::rename(tmp.c_str(), f.c_str());  // a failed beat is a late beat; the next tries again
    }
    // The next beat after a period, or at once when the daemon's state changed: the
    // controller waits for `ckptd=up` before it launches the ranks.
    for (double t = 0; t < s_.detect.heartbeat_period_s && !stop_; t += 0.02) {
      if ((daemon_up_ ? "up" : (daemon_pid_ > 0 ? "starting" : "down")) != state) break;
      SleepSeconds(0.02);
    }
  }
}

// Points the daemon's buddy link at the peer-addr of this node's buddy among the live nodes:
// the far side of the ring, under another leaf switch when Slurm knows the topology.
bool AgentRunner::PointBuddy(const std::vector<std::string>& ring) {
  if (ring != buddy_ring_) {
    buddy_ring_ = ring;
    buddy_of_ring_ = BuddyOf(ring, s_.node, leaf_switch_);
  }
  const std::string next = buddy_of_ring_;
  if (next.empty() || next == buddy_) return true;
  const std::string link = layout_.daemon_buddy_addr(s_.node);
  const std::string target = layout_.daemon_peer_addr(next);
  if (!CreateDirs(env_, Dirname(link)).ok()) return false;
  const std::string tmp = link + ".tmp";
  std::remove(tmp.c_str());
  if (symlink(target.c_str(), tmp.c_str()) != 0 || std::rename(tmp.c_str(), link.c_str()) != 0) {
    return false;
  }
  Log("buddy replication: snapshots of this node go to " + next + "'s daemon" +
      (buddy_.empty() ? "" : " (was " + buddy_ + ")"));
  buddy_ = next;
  return true;
}

std::vector<std::string> AgentRunner::PeerArgs() {
  std::vector<std::string> a;
  if (!s_.replication || buddy_.empty()) return a;
  std::string host = s_.peer_host.empty() ? FullHost() : s_.peer_host;
  // An advertised address must be one the listener is bound to: all of them, by default.
  if (!s_.peer_advertise.empty() && s_.peer_host.empty()) host = "*";
  a = {"--peer-listen",       host + ":" + s_.peer_port,
       "--buddy-file",        layout_.daemon_buddy_addr(s_.node),
       "--job-secret-file",   layout_.replication_secret(),
       "--replica-memory-gb", s_.replica_memory_gb,
       "--replication-mbps",  s_.replication_mbps};
  if (!s_.peer_advertise.empty()) {
    a.push_back("--peer-advertise");
    a.push_back(s_.peer_advertise);
  }
  return a;
}

// Runs the daemon and keeps it running (OnDaemonExit decides); returns the agent's exit code.
int AgentRunner::Supervise(int sigfd, const std::vector<std::string>& argv) {
  const std::string log = layout_.daemon_log(s_.node);
  int restarts = 0, code = 0;
  double backoff = 1;
  bool stopping = false;
  while (true) {
    SpawnOptions o;
    o.stdout_path = log;
    o.add_env = {"FTRAIN_CKPTD_NODE=" + s_.node};
    auto pid = Spawn(argv, o);
    daemon_pid_ = pid.ok() ? *pid : 0;
    daemon_up_ = false;
    Log("ckptd started (pid " + std::to_string(daemon_pid_) + ", log " + log + ")");
    std::optional<int> rc;
    while (!(rc = daemon_pid_ > 0 ? TryReap(daemon_pid_) : std::optional<int>(127))) {
      signalfd_siginfo info{};
      if (read(sigfd, &info, sizeof(info)) == sizeof(info) && !stopping) {
        stopping = true;  // the job ends: the batch host's agent ends too, no failure
        stop_ = true;
        kill(daemon_pid_, SIGTERM);  // it finishes its snapshots first
      }
      if (!daemon_up_ && DaemonAnswers()) daemon_up_ = true;
      SleepSeconds(0.05);
    }
    daemon_pid_ = 0;
    daemon_up_ = false;
    // A TERM to the whole step (scancel --signal) reaches the daemon too: it may have ended of
    // it before this loop read the signal. A stop is a stop, not a death.
    // ckptd ends 0 only when told to stop: then the agent's own TERM is on its way.
    for (int i = 0; i < (*rc == 0 ? 10 : 1) && !stopping; ++i) {
      signalfd_siginfo pending{};
      if (read(sigfd, &pending, sizeof(pending)) == sizeof(pending)) {
        stopping = true;
        stop_ = true;
      } else if (*rc == 0) {
        SleepSeconds(0.05);
      }
    }
    const DaemonDecision d = OnDaemonExit(*rc, stopping, restarts, s_.max_restarts, backoff);
    if (d.cleanup) {
      SpawnOptions c;
      c.stdout_path = log;
      auto cpid = Spawn({s_.ckptd_bin, "--cleanup", "--root", ckpt_root_, "--run-dir", s_.run_dir,
                         "--node", s_.node},
                        c);
      // Best effort: a slot left behind is found and removed by the next daemon on the node.
      if (cpid.ok() && !WaitFor(*cpid, 60)) kill(*cpid, SIGKILL);
    }
    Log(d.log);
    if (d.kind != DaemonDecision::Kind::kRestart) {
      code = d.exit_code;
      break;
    }
    restarts += 1;
    backoff *= 2;
    for (double t = 0; t < d.backoff_s && !stopping; t += 0.05) {
      signalfd_siginfo info{};
      if (read(sigfd, &info, sizeof(info)) == sizeof(info)) stopping = true;
      SleepSeconds(0.05);
    }
    if (stopping) break;
  }
  return code;
}

int AgentRunner::Run() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  ckpt_root_ = s_.ckpt_root;
  if (ckpt_root_.empty()) {
    auto root = layout_.CheckpointRoot();
    if (!root.ok()) {
      Log(root.status().message());
      return 1;
    }
    ckpt_root_ = *root;
  }
  SlurmCli slurm;
  auto nodes = slurm.Hostnames(EnvOr("SLURM_JOB_NODELIST", s_.node));
  job_nodelist_ = nodes.ok() ? *nodes : std::vector<std::string>{s_.node};
  const std::vector<std::string> ring =
      RingOf(ReadTextOr(layout_.job_nodes()), job_, job_nodelist_);
  if (s_.replication) {
    leaf_switch_ = LeafSwitchOfNodes(&slurm);
    if (!leaf_switch_.empty()) {
      Log("buddy replication: Slurm's topology places the buddy under another leaf switch (" +
          std::to_string(leaf_switch_.size()) + " nodes known)");
    }
    PointBuddy(ring);
  }
  const std::vector<std::string> peer = PeerArgs();
  (void)CreateDirs(env_, layout_.logs());
  std::thread hb([this] { HeartbeatLoop(); });
  std::thread follow;
  if (!s_.batch_host.empty() || s_.replication) {
    follow = std::thread([this] { FollowLoop(); });
    Log(std::string("following the job's live nodes") +
        (s_.batch_host.empty()
             ? ""
             : " (the batch host " + s_.batch_host + " is watched by two others, apart from it)"));
  }
  std::vector<std::string> argv = {s_.ckptd_bin, "--root", ckpt_root_, "--run-dir",
                                   s_.run_dir,   "--node", s_.node};
  argv.insert(argv.end(), peer.begin(), peer.end());
  for (const auto& w : SplitWords(s_.ckptd_args)) argv.push_back(w);
  const int code = Supervise(sigfd, argv);
  stop_ = true;
  if (follow.joinable()) follow.join();
  hb.join();
  // The heartbeat file goes with the agent: the controller knows it is gone (a dead node's
  // agent never says goodbye).
  std::remove((layout_.heartbeats() + "/" + s_.node).c_str());
  close(sigfd);
  return code;
}

}  // namespace ftrain::orch
