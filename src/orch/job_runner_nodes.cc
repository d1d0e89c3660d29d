// orch/job_runner_nodes.cc - JobRunner, part 2: the pre-flight and the localisation of a bad
// node, probes, release and exclusion of nodes, the failed-start count and the submission's
// capture.
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
#include "core/clock.h"
#include "core/env.h"
#include "core/strings.h"
#include "orch/files.h"
#include "orch/job_runner.h"
#include "orch/process.h"
#include "orch/quarantine.h"
#include "orch/submission.h"

namespace ftrain::orch {
namespace {

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
  preflight_deadline_ = NowSeconds(env_) + s_.preflight_timeout_s;
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
  Status w = WriteFileDurably(env_, layout_.job_nodes(), ctx_.job + " " + Join(nodes, " ") + "\n");
  if (!w.ok()) {
    Log("WARNING: could not write " + layout_.job_nodes() +
        ": the node agents keep the previous live nodes (" + w.message() + ")");
  }
}

// ---- probes, release, exclusion -------------------------------------------------------------

void JobRunner::ProbeHealth(const std::vector<std::string>& nodes) {
  RunOptions o;
  o.timeout_s = s_.health_timeout_s;
  o.add_env = SrunEnv();
  const std::string n = std::to_string(nodes.size());
  // What training needs of each node, not only that it runs a task: the run directory
  // writable, the GPUs there (cmd_health.cc). Any node failing fails the probe.
  std::vector<std::string> argv{
      "srun",         "--overlap",     "--mpi=none",          "--nodelist=" + Join(nodes, ","),
      "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--kill-on-bad-exit=1"};
  for (const std::string& x :
       {s_.bin, std::string("health"), std::string("--run-dir"), s_.run_dir}) {
    argv.push_back(x);
  }
  if (s_.health_gpus > 0) {
    argv.push_back("--gpus");
    argv.push_back(std::to_string(s_.health_gpus));
  }
  RunResult r = RunCommand(argv, o);
  Observation obs = Obs(Observation::Kind::kHealth);
  obs.ok = r.ok();
  if (!obs.ok) {
    // Which nodes answered but cannot train, and why (each named in the job's log).
    obs.node_faults = ParseHealthProblems(r.err + "\n" + r.out);
    for (const auto& f : obs.node_faults) Log("health probe: " + f.host + ": " + f.reason);
    if (obs.node_faults.empty()) Log("health probe failed: " + r.Describe(o.timeout_s));
  }
  answers_.push_back(obs);
}

void JobRunner::ConfirmDeath(const std::vector<std::string>& nodes) {
  // A signal ends the wait (nothing confirmed): the policy hears of it right after the answer.
  auto sleep = [this](double s) {
    signalfd_siginfo info{};
    bool signalled = false;
    while (read(sigfd_, &info, sizeof(info)) == sizeof(info)) {
      Observation o = Obs(Observation::Kind::kSignal);
      o.signal = info.ssi_signo == SIGUSR1 ? "USR1" : "TERM";  // INT: as TERM
      pending_.push_back(o);
      signalled = true;
    }
    if (!signalled) SleepSeconds(s);
    return !signalled;
  };
  auto f = detector_->ConfirmAfterFailure(nodes, sleep, [this](const std::string& l) { Log(l); });
  Observation o = Obs(Observation::Kind::kConfirmed);
  if (f) {
    o.node = f->node;
    o.verdict = VerdictName(f->verdict);
    o.fields = f->fields;
    o.detail = f->log;
  }
  answers_.push_back(o);
}

// Later sruns take the job's node count from these (SLURM_NNODES is srun's -N): after the job
// shrank (a release) or grew (an expansion). Returns the node list as a host list.
std::string JobRunner::SetJobNodesEnv(const std::vector<std::string>& nodes) {
  auto hosts = slurm_->Hostlist(nodes);
  const std::string h = hosts.ok() ? *hosts : Join(nodes, ",");
  node_env_["SLURM_JOB_NODELIST"] = node_env_["SLURM_NODELIST"] = h;
  node_env_["SLURM_JOB_NUM_NODES"] = node_env_["SLURM_NNODES"] = std::to_string(nodes.size());
  return h;
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
      const std::string h = SetJobNodesEnv(keep);
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
  const double until = NowSeconds(env_) + NorespondWaitS(slurm_->Config(), cap_s);
  for (const auto& n : nodes) {
    while (NowSeconds(env_) < until) {
      const std::string st = slurm_->NodeState(n);
      if (!st.empty() && st.back() == '*') break;
      SleepSeconds(0.5);
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
  std::vector<std::string> required;  // --nodelist: Slurm never runs it without those nodes
  if (auto info = slurm_->ShowJob(ctx_.job); info.ok()) {
    if (auto h = slurm_->Hostnames(info->Get("ExcNodeList")); h.ok()) current = *h;
    if (auto h = slurm_->Hostnames(info->Get("ReqNodeList")); h.ok()) required = *h;
  }
  for (const auto& n : a.faulty) {
    if (std::find(required.begin(), required.end(), n) == required.end()) continue;
    Log("WARNING: job " + ctx_.job + " was submitted with --nodelist naming " + n +
        ", which is excluded now: the requeued job cannot start (Reason=BadConstraints); "
        "scancel it and submit again without " +
        n);
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
  if (want.size() == user.size() && a.num_nodes == 0) return;  // nothing of ftrain's to do
  if (a.num_nodes > 0) {
    // Before the update: a start of the requeued job keeps its training node count whatever
    // it finds (a NumNodes that did not hold makes more spares, never fewer training nodes).
    const std::string marker = layout_.submit() + "/train-nodes-" + ctx_.job;
    Status m = (mkdir(layout_.submit().c_str(), 0700) == 0 || errno == EEXIST)
                   ? WritePrivate(marker, std::to_string(a.train_count) + "\n")
                   : Status::Unavailable("cannot create " + layout_.submit());
    if (!m.ok()) Log("WARNING: cannot write " + marker + ": " + m.message());
  }
  // Fewer nodes: as many tasks per node as before (the job's --ntasks-per-node, the ranks per
  // node here) and their CPUs (CPUs/Task of the job), else Slurm finds it never runnable.
  int tasks = 0, cpus = 0;
  if (a.num_nodes > 0) {
    tasks = a.num_nodes * s_.ranks_per_node;
    int per_task = 1;
    if (auto info = slurm_->ShowJob(ctx_.job); info.ok()) {
      per_task = std::max(1, std::atoi(info->Get("CPUs/Task").c_str()));
    }
    cpus = tasks * per_task;
  }
  Status r = slurm_->SetExcludedNodes(ctx_.job, Join(want, ","), a.num_nodes, tasks, cpus);
  if (!r.ok() && a.num_nodes > 0) {
    Log("could not set NumNodes=" + std::to_string(a.num_nodes) +
        " ExcNodeList=" + Join(want, ",") + " on the requeued job (" + r.message() +
        "): it may pend until enough nodes are free; scancel it and submit again with "
        "--exclude and fewer nodes");
    return;
  }
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

std::string JobRunner::NewestCheckpoint() const {
  std::string newest = "none";
  auto list = ckpt::CheckpointStore(ckpt_root_, env_).List();
  if (list.ok()) {
    int64_t best = -1;
    for (const auto& c : *list) {
      if (c.status == ckpt::CheckpointStatus::kComplete && c.step > best) {
        best = c.step;
        newest = Basename(c.path);
      }
    }
  }
  return newest;
}

void JobRunner::CountFailedStart() {
  const std::string newest = NewestCheckpoint();
  auto prev = ReadText(layout_.failed_starts());
  const int count = NextFailedStartCount(prev.ok() ? *prev : "", newest);
  Status w =
      WriteFileDurably(env_, layout_.failed_starts(), newest + " " + std::to_string(count) + "\n");
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
