// orch/job_runner_nodes.cc - JobRunner, part 2: the pre-flight and the localisation of a bad
// node, the node agents (start, readiness through their heartbeats, the stops), probes,
// release and exclusion of nodes, the failed-start count and the submission's capture.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <thread>

#include "ckpt/store.h"
#include "core/env.h"
#include "orch/files.h"
#include "orch/job_runner.h"
#include "orch/process.h"
#include "orch/submission.h"

namespace ftrain::orch {
namespace {

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

void SleepS(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Runs each argv in parallel, each bounded by timeout_s; whether each exited 0.
std::vector<bool> RunAll(const std::vector<std::vector<std::string>>& cmds,
                         const std::vector<std::string>& env, double timeout_s) {
  std::vector<pid_t> pids;
  for (const auto& c : cmds) {
    SpawnOptions o;
    o.add_env = env;
    auto pid = Spawn(c, o);
    pids.push_back(pid.ok() ? *pid : -1);
  }
  std::vector<bool> ok(cmds.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] < 0) continue;
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    std::optional<int> rc = WaitFor(pids[i], std::max(0.0, left));
    if (!rc) {
      kill(pids[i], SIGKILL);
      (void)WaitFor(pids[i], 5);
      continue;
    }
    ok[i] = *rc == 0;
  }
  return ok;
}

}  // namespace

void JobRunner::RunPreflight() {
  // 16M is about one transformer layer's all-gather (configs/small.cfg: 12.6 MB in bf16),
  // large enough for a bus bandwidth figure; the record is what `ftrain report` holds the
  // step's bytes against.
  SpawnOptions o;
  o.add_env = SrunEnv();
  auto pid = Spawn(
      {"srun", "--mpi=pmix", "--kill-on-bad-exit=1",
       "--ntasks-per-node=" + std::to_string(s_.ranks_per_node), s_.bin, "commcheck", "--sizes",
       "64K,16M", "--iters", "2", "--warmup", "0", "--record", layout_.commcheck()},
      o);
  if (!pid.ok()) {
    Log("cannot start the pre-flight check: " + pid.status().message());
    Observation ex = Obs(Observation::Kind::kPreflightExited);
    ex.rc = 127;
    pending_.push_back(ex);
    return;
  }
  preflight_ = *pid;
  preflight_deadline_ = clock_->Monotonic() + s_.preflight_timeout_s;
}

void JobRunner::Localise(const std::vector<std::string>& nodes) {
  auto check = [this](const std::vector<std::string>& on) {
    return std::vector<std::string>{"srun",
                                    "--overlap",
                                    "--mpi=pmix",
                                    "--kill-on-bad-exit=1",
                                    "--nodelist=" + Join(on, ","),
                                    "--nodes=" + std::to_string(on.size()),
                                    "--ntasks-per-node=" + std::to_string(s_.ranks_per_node),
                                    s_.bin,
                                    "commcheck",
                                    "--sizes",
                                    "64K,16M",
                                    "--iters",
                                    "2",
                                    "--warmup",
                                    "0"};
  };
  std::vector<std::vector<std::string>> singles, pairs;
  for (const auto& n : nodes) singles.push_back(check({n}));
  const std::vector<bool> alone = RunAll(singles, SrunEnv(), s_.preflight_timeout_s);
  std::vector<bool> pair_ok;
  bool all_alone = true;
  for (bool b : alone) all_alone = all_alone && b;
  if (all_alone && nodes.size() >= 3) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      pairs.push_back(check({nodes[i], nodes[(i + 1) % nodes.size()]}));
    }
    pair_ok = RunAll(pairs, SrunEnv(), s_.preflight_timeout_s);
  }
  Observation o = Obs(Observation::Kind::kLocalised);
  o.nodes = BlameNodes(nodes, alone, pair_ok);
  answers_.push_back(o);
}

void JobRunner::MakeSecret() {
  // A new secret for every start (this start's daemons are the only ones that may talk):
  // 0600 before any byte goes in, never through a link, never on a command line.
  std::random_device rd;
  std::string hex;
  char buf[3];
  for (int i = 0; i < 32; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", rd() & 0xff);
    hex += buf;
  }
  Status w = WritePrivate(layout_.replication_secret(), hex);
  if (!w.ok()) Log("WARNING: cannot write the replication secret: " + w.message());
}

void JobRunner::WriteJobNodes(const std::vector<std::string>& nodes) {
  Status w = WriteFileDurably(Env::Default(), layout_.job_nodes(),
                              ctx_.job + " " + Join(nodes, " ") + "\n");
  if (!w.ok()) {
    Log("WARNING: could not write " + layout_.job_nodes() +
        ": the node agents keep the previous live nodes (" + w.message() + ")");
  }
}

// ---- the node agents ------------------------------------------------------------------------

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
  for (const auto& n : nodes) StartAgent(n);
  std::map<std::string, int> tries;
  std::map<std::string, double> retry_at;
  for (const auto& n : nodes) tries[n] = 1;
  const double t0 = clock_->Monotonic();
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
        if (clock_->Monotonic() < retry_at[n]) {
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
        if (tries[n] < 3) retry_at[n] = clock_->Monotonic() + 1;
      }
      any_alive = any_alive || agents_[n] > 0 || retry_at.count(n);
    }
    const double waited = clock_->Monotonic() - t0;
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
    SleepS(0.2);
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
    (void)Spawn({"timeout", "30", "scancel", "--signal=" + sig, step});
  }
  SleepS(0.2);  // the signals on their way before the sruns go
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
  const double until = clock_->Monotonic() + seconds;
  while (clock_->Monotonic() < until) {
    bool all = true;
    for (const auto& [node, pid] : agents_) {
      const bool declared = std::find(declared_.begin(), declared_.end(), node) != declared_.end();
      all = all && (declared || AgentGone(node));
    }
    if (all) break;
    SleepS(0.1);
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
    SleepS(0.1);
  }
  for (auto& [node, pid] : agents_) {
    if (pid > 0) kill(pid, SIGTERM);
  }
  for (int i = 0; i < 100 && running(); ++i) SleepS(0.1);  // never an unbounded wait
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

// ---- probes, release, exclusion -------------------------------------------------------------

void JobRunner::ProbeHealth(const std::vector<std::string>& nodes) {
  RunOptions o;
  o.timeout_s = s_.health_timeout_s;
  o.add_env = SrunEnv();
  const std::string n = std::to_string(nodes.size());
  RunResult r = RunCommand(
      {"srun", "--overlap", "--mpi=none", "--nodelist=" + Join(nodes, ","), "--nodes=" + n,
       "--ntasks=" + n, "--ntasks-per-node=1", "--kill-on-bad-exit=1", "true"},
      o);
  Observation obs = Obs(Observation::Kind::kHealth);
  obs.ok = r.ok();
  answers_.push_back(obs);
}

void JobRunner::ConfirmDeath(const std::vector<std::string>& nodes) {
  auto f = detector_->ConfirmAfterFailure(
      nodes, [](double s) { SleepS(s); }, [this](const std::string& l) { Log(l); });
  Observation o = Obs(Observation::Kind::kConfirmed);
  if (f) {
    o.node = f->node;
    o.verdict = VerdictName(f->verdict);
    o.fields = f->fields;
    o.detail = f->log;
  }
  answers_.push_back(o);
}

void JobRunner::Release(const std::vector<std::string>& dead) {
  Observation o = Obs(Observation::Kind::kReleased);
  declared_ = dead;
  auto now = slurm_->NodesOfJob(ctx_.job);
  std::vector<std::string> keep;
  if (now) {
    for (const auto& n : *now) {
      if (std::find(dead.begin(), dead.end(), n) == dead.end()) keep.push_back(n);
    }
  }
  if (now && !keep.empty() && keep.size() < now->size()) {
    Status r = slurm_->Release(ctx_.job, keep);
    if (r.ok()) {
      auto hosts = slurm_->Hostlist(keep);
      const std::string h = hosts.ok() ? *hosts : Join(keep, ",");
      // Later sruns take the job's node count from these (SLURM_NNODES is srun's -N).
      node_env_["SLURM_JOB_NODELIST"] = node_env_["SLURM_NODELIST"] = h;
      node_env_["SLURM_JOB_NUM_NODES"] = node_env_["SLURM_NNODES"] = std::to_string(keep.size());
      Log("released " + Join(dead, " ") + " from job " + ctx_.job + ": it now holds " + h);
      o.ok = true;
    } else {
      Log("could not release " + Join(dead, " ") + " from job " + ctx_.job + " (" + r.message() +
          "): Slurm waits for it until SlurmdTimeout");
    }
  }
  answers_.push_back(o);
}

void JobRunner::WaitNotResponding(const std::vector<std::string>& nodes, double cap_s) {
  const double until = clock_->Monotonic() + NorespondWaitS(slurm_->Config(), cap_s);
  for (const auto& n : nodes) {
    while (clock_->Monotonic() < until) {
      const std::string st = slurm_->NodeState(n);
      if (!st.empty() && st.back() == '*') break;
      SleepS(0.5);
    }
  }
  Observation o = Obs(Observation::Kind::kNotRespondingWaited);
  for (const auto& n : nodes)
    o.detail += (o.detail.empty() ? "" : " ") + n + "=" + slurm_->NodeState(n);
  answers_.push_back(o);
}

void JobRunner::Exclude(const Action& a) {
  const std::string dead = Join(a.nodes, ",");
  if (a.released && !slurm_->Config().slurmdbd) {
    // Slurm 22.05 gives a resized job a new accounting record and refuses every later update
    // until slurmdbd indexed it: without slurmdbd that never happens.
    Log("not setting ExcNodeList=" + dead +
        ": Slurm refuses updates of a resized job without "
        "slurmdbd; the scheduler skips the node while Slurm flags it not responding");
    return;
  }
  // The user's own exclusions stay: the job's ExcNodeList without what ftrain added earlier.
  const std::string ours_file = layout_.submit() + "/excluded-" + ctx_.job;
  std::vector<std::string> ours, current, user;
  if (auto t = ReadText(ours_file); t.ok()) ours = SplitWords(*t);
  if (auto info = slurm_->ShowJob(ctx_.job); info.ok()) {
    if (auto h = slurm_->Hostnames(info->Get("ExcNodeList")); h.ok()) current = *h;
  }
  for (const auto& n : current) {
    if (std::find(ours.begin(), ours.end(), n) == ours.end()) user.push_back(n);
  }
  std::map<std::string, std::string> states;
  for (const auto& n : a.nodes) {
    states[n] = slurm_->NodeState(n);
    if (Responds(states[n])) Log("node " + n + " is " + states[n] + " again: not excluded");
  }
  const std::vector<std::string> want = Exclusions(user, states, a.faulty);
  if (want.size() == user.size()) return;  // nothing of ftrain's to exclude
  Status r = slurm_->SetExcludedNodes(ctx_.job, Join(want, ","));
  if (!r.ok()) {
    Log("could not set ExcNodeList=" + Join(want, ",") + " on the requeued job (" + r.message() +
        "); the scheduler skips a dead node while Slurm flags it not responding");
    return;
  }
  std::vector<std::string> added(want.begin() + static_cast<long>(user.size()), want.end());
  if (mkdir(layout_.submit().c_str(), 0700) == 0 || errno == EEXIST) {
    (void)WritePrivate(ours_file, Join(added, " ") + "\n");
  }
}

void JobRunner::CountFailedStart() {
  std::string newest = "none";
  auto list = ckpt::CheckpointStore(ckpt_root_).List();
  if (list.ok()) {
    int64_t best = -1;
    for (const auto& c : *list) {
      if (c.status == ckpt::CheckpointStatus::kComplete && c.step > best) {
        best = c.step;
        newest = Basename(c.path);
      }
    }
  }
  auto prev = ReadText(layout_.failed_starts());
  const int count = NextFailedStartCount(prev.ok() ? *prev : "", newest);
  Status w = WriteFileDurably(Env::Default(), layout_.failed_starts(),
                              newest + " " + std::to_string(count) + "\n");
  if (!w.ok())
    Log("WARNING: cannot write " + layout_.failed_starts() + ": failed starts are not counted");
  Observation o = Obs(Observation::Kind::kFailedStartCounted);
  o.count = count;
  o.checkpoint = newest;
  answers_.push_back(o);
}

void JobRunner::CaptureSubmission() {
  // For the node agents to submit the job again if the batch host dies.
  Status s = Status::FailedPrecondition("no batch script path (--script)");
  if (!ctx_.script.empty()) {
    RunResult r = RunCommand({"scontrol", "show", "job", ctx_.job}, Bounded(15));
    s = r.ok() ? orch::CaptureSubmission(layout_.submit(), r.out, ctx_.environment, ctx_.script)
               : Status::Unavailable("scontrol show job: " + r.Describe(15));
  }
  if (!s.ok()) {
    Log("WARNING: could not save the submission in " + layout_.submit() + " (" + s.message() +
        "): if the batch host dies, Slurm requeues the job after SlurmdTimeout");
  }
}

}  // namespace ftrain::orch
