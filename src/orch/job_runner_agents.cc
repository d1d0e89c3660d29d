// orch/job_runner_agents.cc - JobRunner, part 4: the node agents: one step per node, their
// readiness (their heartbeats), and their two stops: the normal one (TERM through their steps,
// the daemons drain) and the one before a requeue (TERM, then their sruns let go).
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "core/clock.h"
#include "core/strings.h"
#include "orch/files.h"
#include "orch/job_runner.h"
#include "orch/process.h"

namespace ftrain::orch {

void JobRunner::StartAgent(const std::string& node) {
  // --mpi=none: no PMIx wire-up; --ntasks: the job's SLURM_NTASKS would ask for one agent per
  // rank. One step per node: an srun that aborts its step takes only its own node's agent.
  SpawnOptions o;
  o.add_env = SrunEnv();
  const bool replication =
      s_.replication == "1" || (s_.replication == "auto" && s_.spare_nodes != "0");
  o.add_env.push_back("FTRAIN_RUN_DIR=" + s_.run_dir);
  o.add_env.push_back("FTRAIN_HOME=" + s_.home);
  o.add_env.push_back("FTRAIN_BIN=" + s_.bin);
  o.add_env.push_back("FTRAIN_CKPT_ROOT=" + ckpt_root_);
  o.add_env.push_back(std::string("FTRAIN_REPLICATION=") + (replication ? "1" : "0"));
  if (s_.spare_nodes != "0") o.add_env.push_back("FTRAIN_SPARE_NODES=" + s_.spare_nodes);
  if (watch_batch_host_) o.add_env.push_back("FTRAIN_BATCH_HOST=" + ctx_.node);
  auto pid = Spawn(
      {"srun", "--overlap", "--mpi=none", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
       "--nodelist=" + node, "--kill-on-bad-exit=0", "--job-name=ftrain-agents", s_.bin, "agent"},
      o);
  agents_[node] = pid.ok() ? *pid : 0;
}

// Readiness crosses hosts only through a plain file: the agent checked its own daemon's socket
// on its own node (a Unix socket is local to a kernel) and says so in its heartbeat.
bool JobRunner::AgentReady(const std::string& node) const {
  return DaemonReady(ReadTextOr(layout_.heartbeats() + "/" + node), ctx_.job, ctx_.restart_count);
}

bool JobRunner::AgentGone(const std::string& node) const {
  // An agent removes its heartbeat file when it ends (a dead node's never does).
  auto t = ReadText(layout_.heartbeats() + "/" + node);
  if (!t.ok()) return true;
  auto h = ParseHeartbeat(*t);
  return !h || h->job != ctx_.job || h->start != std::to_string(ctx_.restart_count);
}

void JobRunner::StartAgents(const std::vector<std::string>& nodes) {
  watch_batch_host_ = policy_.state().watch_batch_host;
  for (const auto& n : nodes) {
    // A node whose agent ran before in this start (an elastic run growing back onto a node
    // that died): its dead agent's heartbeat must not read as the new one's readiness.
    if (agents_.count(n)) std::remove((layout_.heartbeats() + "/" + n).c_str());
    StartAgent(n);
  }
  std::map<std::string, int> tries;
  std::map<std::string, double> retry_at;
  for (const auto& n : nodes) tries[n] = 1;
  const double t0 = NowSeconds(env_);
  std::set<std::string> ready;
  while (true) {
    ready.clear();
    for (const auto& n : nodes) {
      if (AgentReady(n)) ready.insert(n);
    }
    if (ready.size() == nodes.size()) break;
    // A signal ends the wait: the policy hears of it right after the agents' answer.
    signalfd_siginfo info{};
    bool signalled = false;
    while (read(sigfd_, &info, sizeof(info)) == sizeof(info)) {
      Observation o = Obs(Observation::Kind::kSignal);
      o.signal = info.ssi_signo == SIGUSR1 ? "USR1" : "TERM";
      pending_.push_back(o);
      signalled = true;
    }
    if (signalled) break;
    bool any_alive = false;
    for (const auto& n : nodes) {
      pid_t& pid = agents_[n];
      if (retry_at.count(n)) {
        if (NowSeconds(env_) < retry_at[n]) {
          any_alive = true;
          continue;
        }
        retry_at.erase(n);
        tries[n] += 1;
        StartAgent(n);
      } else if (pid > 0 && TryReap(pid)) {
        Log("WARNING: the node agent's step on " + n + " ended at start (attempt " +
            std::to_string(tries[n]) + "/3)");
        pid = -pid;
        if (tries[n] < 3) retry_at[n] = NowSeconds(env_) + 1;
      }
      any_alive = any_alive || agents_[n] > 0 || retry_at.count(n);
    }
    const double waited = NowSeconds(env_) - t0;
    if (waited >= s_.ckptd_start_timeout_s || !any_alive) {
      std::vector<std::string> missing;
      for (const auto& n : nodes) {
        if (!ready.count(n)) missing.push_back(n);
      }
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.0f", waited);
      Log("WARNING: ckptd is not answering on every node after " + std::string(buf) +
          " s (not on " + Join(missing, " ") + "); ranks without a daemon save synchronously");
      break;
    }
    SleepSeconds(0.2);
  }
  Observation o = Obs(Observation::Kind::kAgentsReady);
  o.count = static_cast<int>(ready.size());
  o.nodes = nodes;
  answers_.push_back(o);
}

std::vector<std::string> JobRunner::AgentSteps() {
  std::vector<std::string> out;
  auto steps = slurm_->Steps(ctx_.job);
  if (!steps.ok()) return out;
  for (const auto& s : *steps) {
    if (s.name == "ftrain-agents") out.push_back(s.id);
  }
  return out;
}

void JobRunner::SignalAgents(const std::string& sig) {
  // TERM to the agents through their steps (slurmstepd signals them), then their sruns let go
  // (SIGKILL: an srun forwards nothing then); Slurm's TERM to the batch step after the requeue
  // would make every srun forward SIGKILL to its agent, mid-drain.
  for (const auto& step : AgentSteps()) {
    auto pid = Spawn({"timeout", "30", "scancel", "--signal=" + sig, step});
    if (pid.ok()) helpers_.push_back(*pid);
  }
  SleepSeconds(0.2);  // the signals on their way before the sruns go
  for (auto& [node, pid] : agents_) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      (void)WaitFor(pid, 2);
      pid = -pid;
    }
  }
  agents_signalled_ = true;
}

void JobRunner::WaitAgents(double seconds) {
  const double until = NowSeconds(env_) + seconds;
  while (NowSeconds(env_) < until) {
    bool all = true;
    for (const auto& [node, pid] : agents_) {
      const bool declared = std::find(declared_.begin(), declared_.end(), node) != declared_.end();
      all = all && (declared || AgentGone(node));
    }
    if (all) break;
    SleepSeconds(0.1);
  }
  answers_.push_back(Obs(Observation::Kind::kAgentsStopped));
}

void JobRunner::StopAgents() {
  if (agents_.empty()) return;
  Log("stopping the node agents (ckptd finishes what it holds, unlinks its shared memory)");
  declared_ = policy_.state().declared;
  for (const auto& n : declared_) {  // its agent died with it: its srun would wait for ever
    if (agents_.count(n) && agents_[n] > 0) kill(agents_[n], SIGKILL);
  }
  // SIGTERM to the agents themselves (scancel --signal of their step): srun forwards SIGKILL
  // on a SIGTERM of its own. Its exit status says nothing (22.05 exits 225 after delivering),
  // so a step's srun is signalled only when scancel hung (slurmctld not answering).
  std::vector<std::pair<pid_t, std::string>> cancels;
  auto steps = slurm_->Steps(ctx_.job);
  if (steps.ok()) {
    for (const auto& st : *steps) {
      if (st.name != "ftrain-agents") continue;
      auto pid = Spawn({"timeout", "30", "scancel", "--signal=TERM", st.id});
      if (pid.ok()) cancels.emplace_back(*pid, st.nodes);
    }
  }
  if (cancels.empty()) {
    for (auto& [node, pid] : agents_) {
      if (pid > 0) kill(pid, SIGTERM);
    }
  }
  auto running = [this] {
    for (auto& [node, pid] : agents_) {
      if (pid > 0 && !TryReap(pid)) return true;
      if (pid > 0) pid = -pid;
    }
    return false;
  };
  for (int i = 0; i < 600 && running(); ++i) {  // up to 60 s for the daemons to drain
    for (auto& [pid, node] : cancels) {
      if (pid <= 0) continue;
      if (auto rc = TryReap(pid)) {
        if (*rc == 124 && agents_.count(node) && agents_[node] > 0) kill(agents_[node], SIGTERM);
        pid = -1;
      }
    }
    // A dead node in the job: done when every live agent said goodbye.
    if (!declared_.empty() && i % 5 == 4) {
      bool gone = true;
      for (const auto& [node, pid] : agents_) {
        const bool dead = std::find(declared_.begin(), declared_.end(), node) != declared_.end();
        gone = gone && (dead || AgentGone(node));
      }
      if (gone) break;
    }
    SleepSeconds(0.1);
  }
  for (auto& [node, pid] : agents_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  for (int i = 0; i < 100 && running(); ++i) SleepSeconds(0.1);  // never an unbounded wait
  for (auto& [node, pid] : agents_) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      (void)WaitFor(pid, 2);
    }
  }
  for (auto& [pid, node] : cancels) {
    if (pid > 0) (void)WaitFor(pid, 1);
  }
  agents_.clear();
}

}  // namespace ftrain::orch
