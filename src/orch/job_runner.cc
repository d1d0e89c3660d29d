// orch/job_runner.cc - JobRunner, part 1: the loop (observations in, actions out) and the
// training step. Part 2 (job_runner_nodes.cc): the pre-flight and localisation, probes,
// release, exclusion, failed-start count; part 3 (job_runner_records.cc): the lease and the
// records; part 4 (job_runner_agents.cc): the node agents.
#include "orch/job_runner.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <thread>

#include "ckpt/store.h"
#include "core/config.h"
#include "core/env.h"
#include "core/strings.h"
#include "orch/files.h"
#include "orch/probe.h"
#include "orch/probe_async.h"
#include "orch/process.h"
#include "orch/quarantine.h"
#include "orch/settings.h"

namespace ftrain::orch {
namespace {

constexpr double kTickS = 0.5;
constexpr double kLeaseCheckS = 5;

std::string ShortHost() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

}  // namespace

JobContext ContextFromEnvironment(const std::string& script) {
  JobContext c;
  c.job = EnvOr("SLURM_JOB_ID");
  c.nodelist = EnvOr("SLURM_JOB_NODELIST");
  c.node = EnvOr("SLURMD_NODENAME", ShortHost());
  c.resubmitted_from = EnvOr("FTRAIN_RESUBMITTED_FROM");
  c.restart_count = std::atoi(EnvOr("SLURM_RESTART_COUNT", "0").c_str());
  c.resubmits = std::atoi(EnvOr("FTRAIN_RESUBMITS", "1").c_str());
  c.script = script;
  c.environment = CurrentEnvironment();
  return c;
}

JobRunner::JobRunner(JobSettings s, JobContext ctx, Slurm* slurm, Env* env)
    : s_(std::move(s)),
      ctx_(std::move(ctx)),
      slurm_(slurm),
      env_(env),
      layout_(s_.run_dir),
      policy_(s_),
      lease_(layout_.lease(), layout_.lease_dir(), env_),
      merger_(layout_, env_) {
  prober_ = std::make_unique<SlurmProber>(layout_.heartbeats(), slurm_, s_.detect.probe_timeout_s);
  // The tick's probes run on threads with a Slurm client of their own (hole 11): a probe that
  // hangs never holds up a signal.
  async_probes_ = std::make_unique<AsyncProbes>(
      s_.detect, std::make_shared<SlurmProber>(layout_.heartbeats(), std::make_unique<SlurmCli>(),
                                               s_.detect.probe_timeout_s));
  detector_ = std::make_unique<Detector>(s_.detect, prober_.get(), env_, async_probes_.get());
}

JobRunner::~JobRunner() {
  if (sigfd_ >= 0) close(sigfd_);
  if (!hostfile_.empty()) std::remove(hostfile_.c_str());
}

void JobRunner::Log(const std::string& text) {
  const auto t = static_cast<std::time_t>(UnixSeconds(env_));
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  // "train.sh job J:" is what operators and the tests grep in the job's output.
  std::cout << "[" << when << "] train.sh job " << (ctx_.job.empty() ? "?" : ctx_.job) << ": "
            << text << std::endl;
}

Observation JobRunner::Obs(Observation::Kind k) const {
  Observation o;
  o.kind = k;
  o.now = NowSeconds(env_);
  o.wall = UnixSeconds(env_);
  return o;
}

int JobRunner::Run() {
  // Signals arrive through signalfd; every child starts with them unblocked (process.cc).
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  sigfd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  (void)CreateDirs(env_, s_.run_dir);
  // ckpt.root as the trainer resolves it (an S3 root: its staging root), so that the daemons
  // write where the trainer looks.
  auto trainer = TrainerConfig(s_);
  if (trainer.ok()) {
    ckpt_root_ = trainer->ckpt.root;
  } else {
    // The trainer refuses the same configuration with exit 2 and says why; until then the
    // records go where the run's resolved config (or the default) says.
    std::cerr << "train.sh: WARNING: " << trainer.status().message() << std::endl;
    auto fallback = layout_.CheckpointRoot();
    ckpt_root_ = fallback.ok() ? *fallback : layout_.default_checkpoint_root();
  }
  Observation st = Obs(Observation::Kind::kStarted);
  st.job = ctx_.job;
  st.restart_count = ctx_.restart_count;
  st.resubmitted_from = ctx_.resubmitted_from;
  st.resubmits = ctx_.resubmits;
  st.batch_host = ctx_.node;
  st.nodelist = ctx_.nodelist;
  auto marker = ReadText(layout_.submit() + "/replaced-" + ctx_.job);
  if (!ctx_.job.empty() && marker.ok()) {
    for (char c : *marker) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') {
        st.replaced_by += c;
      }
    }
  }
  auto last = ReadText(layout_.last_stop());
  if (last.ok()) st.last_stop = last->substr(0, last->find('\n'));
  auto nodes = slurm_->Hostnames(ctx_.nodelist.empty() ? ctx_.node : ctx_.nodelist);
  st.nodes = nodes.ok() && !nodes->empty() ? *nodes : std::vector<std::string>{ctx_.node};
  if (!s_.spare_nodelist.empty()) {
    auto spares = slurm_->Hostnames(s_.spare_nodelist);
    if (spares.ok()) st.spare_list = *spares;
  }
  if (!s_.usr1_lead_set) {
    // The stop's lead from what Slurm says of the job's end (orch/stop_lead.h); bounded.
    const JobEnd end = ReadJobEnd(slurm_, ctx_.job);
    st.job_end_wall = end.end_wall;
    st.grace_s = end.grace_s;
  }
  ReadQuarantine(&st);
  ReadRunRecords(&st);
  st.node_requeues = ReadTextOr(layout_.node_requeues());
  if (auto t = ReadText(layout_.submit() + "/train-nodes-" + ctx_.job);
      t.ok() && !ctx_.job.empty()) {
    st.train_count = std::atoi(t->c_str());  // requeued with fewer nodes (job_runner_nodes.cc)
  }
  pending_.push_back(st);
  next_tick_ = NowSeconds(env_) + kTickS;
  while (!done_) {
    while (!pending_.empty() && !done_) {
      Observation o = pending_.front();
      pending_.pop_front();
      Feed(o);
    }
    if (done_) break;
    WaitForEvents(kTickS);
  }
  MergeRecords();
  return exit_code_;
}

void JobRunner::Feed(Observation o) {
  o.now = NowSeconds(env_);
  if (o.wall == 0) o.wall = UnixSeconds(env_);
  const Decision d = policy_.On(o);
  for (const auto& a : d.actions) {
    if (done_) break;
    Execute(a);
  }
  // The answers to this decision's questions come next, in the order they were asked.
  pending_.insert(pending_.begin(), answers_.begin(), answers_.end());
  answers_.clear();
}

// Signals, the children's exits and the tick; answers go to pending_.
void JobRunner::WaitForEvents(double max_s) {
  const double until = NowSeconds(env_) + max_s;
  while (pending_.empty() && !done_) {
    signalfd_siginfo info{};
    while (read(sigfd_, &info, sizeof(info)) == sizeof(info)) {
      Observation o = Obs(Observation::Kind::kSignal);
      o.signal = info.ssi_signo == SIGUSR1 ? "USR1" : "TERM";  // INT: as TERM
      pending_.push_back(o);
    }
    if (preflight_ > 0) {
      std::optional<int> rc = TryReap(preflight_);
      if (!rc && NowSeconds(env_) >= preflight_deadline_) {
        kill(preflight_, SIGTERM);  // `timeout` of the scripts: 124
        rc = WaitFor(preflight_, 5);
        if (!rc) {
          kill(preflight_, SIGKILL);
          rc = WaitFor(preflight_, 5);
        }
        rc = 124;
      }
      if (rc) {
        preflight_ = -1;
        Observation o = Obs(Observation::Kind::kPreflightExited);
        o.rc = *rc;
        if (o.rc != 0) {
          // The trainer would fail on the same directory: can a file be made next to it?
          const std::string probe = layout_.commcheck() + ".probe." + std::to_string(getpid());
          Status w = WriteFileDurably(env_, probe, "");
          if (w.ok()) {
            std::remove(probe.c_str());
          } else {
            const std::string m = w.message();
            o.record_error = m.substr(m.rfind(": ") == std::string::npos ? 0 : m.rfind(": ") + 2);
          }
        }
        pending_.push_back(o);
      }
    }
    if (step_ > 0) {
      if (std::optional<int> rc = TryReap(step_)) {
        step_ = -1;
        metrics_at_failure_ = LastLine(layout_.metrics());
        Observation o = Obs(Observation::Kind::kStepExited);
        o.rc = *rc;
        auto ce = ReadText(layout_.config_error());
        if (ce.ok()) o.config_error = ce->substr(0, 2000);
        while (!o.config_error.empty() && o.config_error.back() == '\n') o.config_error.pop_back();
        ReadQuarantine(&o);
        ReadNodeFaults(&o);
        ReadRunRecords(&o);
        pending_.push_back(o);
      }
    }
    for (auto& [node, pid] : agents_) {
      if (pid > 0 && TryReap(pid)) pid = -pid;  // ended: reaped, remembered negative
    }
    for (auto it = helpers_.begin(); it != helpers_.end();) {  // background scancels
      it = TryReap(*it) ? helpers_.erase(it) : it + 1;
    }
    if (!pending_.empty()) return;
    if (NowSeconds(env_) >= next_tick_) {
      next_tick_ = NowSeconds(env_) + kTickS;
      OnTick();
      return;
    }
    if (NowSeconds(env_) >= until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void JobRunner::OnTick() {
  MergeRecords();  // the trainer's and the agents' records
  if (step_ > 0 && !watch_.empty()) {
    for (auto& f : detector_->Look(watch_)) {
      // A declared node ends the step: nobody is watched any more until the next launch.
      if (f.verdict != Verdict::kLate) watch_.clear();
      Observation o = Obs(f.verdict == Verdict::kLate ? Observation::Kind::kHeartbeatLate
                                                      : Observation::Kind::kNodeDeclared);
      o.node = f.node;
      o.verdict = VerdictName(f.verdict);
      o.fields = f.fields;
      o.detail = f.log;
      pending_.push_back(o);
    }
  }
  if (mine_ && NowSeconds(env_) >= next_lease_check_) {
    next_lease_check_ = NowSeconds(env_) + kLeaseCheckS;
    auto holds = lease_.Holds(*mine_);
    if (holds.ok() && !*holds) {
      auto cur = lease_.Current();
      Log("the run lease was taken over by " +
          (cur.ok() && *cur ? (*cur)->Describe() : std::string("another job")) +
          ": this job stops and records nothing more");
      mine_.reset();
      if (step_ > 0) kill(step_, SIGKILL);
      StopAgents();
      exit_code_ = 0;
      done_ = true;
      return;
    }
  }
  pending_.push_back(Obs(Observation::Kind::kTick));
}

// ---- the training step ----------------------------------------------------------------------

void JobRunner::Launch(const Action& a) {
  // A new epoch of the run lease for every launch: the ranks' fence (checkpoint generations).
  if (mine_) {
    auto next = lease_.Renew(*mine_);
    if (!next.ok() && next.status().code() == Status::Code::kAborted) {
      // Another job provably holds a later epoch: it trains the run now.
      Log(next.status().message() + ": this job stops and records nothing more");
      mine_.reset();
      StopAgents();
      exit_code_ = 0;
      done_ = true;
      return;
    }
    if (!next.ok()) {
      // An I/O error says nothing about who holds the run: no step without the lease, and the
      // policy retries, then requeues (never an exit 0: the work is not done).
      Observation o = Obs(Observation::Kind::kLeaseRenewFailed);
      o.detail = next.status().message();
      pending_.push_back(o);
      return;
    }
    mine_ = *next;
  }
  std::vector<std::string> argv;
  std::vector<std::string> env = SrunEnv();
  env.push_back("FTRAIN_RECORDS_SPOOL=1");
  if (mine_) env.push_back("FTRAIN_FENCE_EPOCH=" + std::to_string(mine_->epoch));
  if (!a.hosts.empty()) {
    if (hostfile_.empty()) {
      // Rank r runs on hosts[r] (Slurm would number the nodes by host name): the host file
      // of `srun -m arbitrary`, private to this job, removed at exit.
      std::string path = EnvOr("TMPDIR", "/tmp") + "/ftrain-" + ctx_.job + "-hosts.XXXXXX";
      std::vector<char> buf(path.begin(), path.end());
      buf.push_back('\0');
      const int fd = mkstemp(buf.data());
      if (fd >= 0) close(fd);
      hostfile_ = fd >= 0 ? buf.data() : layout_.run_dir() + "/.hosts-" + ctx_.job;
    }
    std::string text;
    for (const auto& h : a.hosts) text += h + "\n";
    Status w = WritePrivate(hostfile_, text);
    if (!w.ok()) Log("WARNING: cannot write the host file: " + w.message());
    env.push_back("SLURM_HOSTFILE=" + hostfile_);
    argv = {"srun", "--distribution=arbitrary", "--nodes=" + std::to_string(a.nodes.size()),
            "--ntasks=" + std::to_string(a.hosts.size())};
    if (a.overlap) argv.push_back("--overlap");
  } else {
    argv = {"srun", "--ntasks-per-node=" + std::to_string(s_.ranks_per_node)};
  }
  for (const char* x : {"--mpi=pmix", "--kill-on-bad-exit=1"}) argv.push_back(x);
  argv.push_back(s_.bin);
  argv.push_back("train");
  for (const auto& x : TrainerArgs(s_)) argv.push_back(x);
  std::remove(layout_.config_error().c_str());  // the trainer writes it when it exits 2
  node_faults_at_launch_ = ReadTextOr(layout_.node_faults()).size();  // the step's lines follow
  SpawnOptions o;
  o.add_env = env;
  auto pid = Spawn(argv, o);
  if (!pid.ok()) {
    Log("cannot start the training step: " + pid.status().message());
    Observation ex = Obs(Observation::Kind::kStepExited);
    ex.rc = 127;
    pending_.push_back(ex);
    return;
  }
  step_ = *pid;
  watch_ = a.watch;
  if (!watch_.empty()) detector_->Reset(watch_);
}

void JobRunner::EndStep() {
  if (preflight_ > 0) {
    kill(preflight_, SIGTERM);
    if (!WaitFor(preflight_, 10)) kill(preflight_, SIGKILL);
    (void)WaitFor(preflight_, 5);
    preflight_ = -1;
    return;
  }
  if (step_ <= 0) return;
  const double t0 = NowSeconds(env_);
  // scancel answers only once slurmctld gave up on the dead node (MessageTimeout + 1 s), while
  // the live nodes' tasks die at once: in the background.
  auto steps = slurm_->Steps(ctx_.job);
  if (steps.ok()) {
    for (const auto& st : *steps) {
      const bool ours = st.name != "ftrain-agents" && st.name != "ftrain-probe" &&
                        st.id.find(".batch") == std::string::npos &&
                        st.id.find(".extern") == std::string::npos;
      if (!ours) continue;
      auto pid = Spawn({"timeout", "30", "scancel", "--signal=KILL", st.id});
      if (pid.ok()) helpers_.push_back(*pid);
    }
  }
  for (int i = 0; i < 5 && Alive(step_); ++i) {
    if (TryReap(step_)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(step_, SIGKILL);  // srun itself waits for the dead node
  char buf[64];
  std::snprintf(buf, sizeof(buf), "training step ended (%.1f s)", NowSeconds(env_) - t0);
  Log(buf);
}

std::vector<std::string> JobRunner::SrunEnv() const {
  std::vector<std::string> env;
  for (const auto& [k, v] : node_env_) env.push_back(k + "=" + v);
  return env;
}

void JobRunner::QueryNodesInJob() {
  Observation o = Obs(Observation::Kind::kNodesInJob);
  auto n = slurm_->NodesOfJob(ctx_.job);
  o.known = n.has_value();
  if (n) o.nodes = *n;
  answers_.push_back(o);
}

void JobRunner::QueryJobState(double within_s) {
  Observation o = Obs(Observation::Kind::kJobState);
  auto info = within_s > 0 ? slurm_->ShowJobWithin(ctx_.job, within_s) : slurm_->ShowJob(ctx_.job);
  if (info.ok()) {
    o.job_state = info->State();
    o.reason = info->Get("Reason");
  }
  answers_.push_back(o);
}

void JobRunner::QueryRoom() {
  Observation o = Obs(Observation::Kind::kRoom);
  o.known = false;
  auto info = slurm_->ShowJob(ctx_.job);
  const std::string partition = info.ok() ? info->Get("Partition") : "";
  if (!partition.empty()) {
    auto nodes = slurm_->PartitionNodes(partition);
    o.known = nodes.has_value();
    if (nodes) o.nodes = *nodes;
  }
  answers_.push_back(o);
}

void JobRunner::Expand(int count, std::vector<std::string> exclude,
                       const std::vector<std::string>& probe) {
  Observation o = Obs(Observation::Kind::kExpanded);
  for (const auto& n : probe) {  // a dead node looks idle to Slurm until SlurmdTimeout
    if (prober_->ProbeTcp(n) != "open") exclude.push_back(n);
  }
  auto gained = slurm_->Expand(ctx_.job, count, exclude);
  o.ok = gained.ok();
  if (gained.ok()) {
    o.nodes = *gained;
    auto now = slurm_->NodesOfJob(ctx_.job);
    if (now)
      Log("job " + ctx_.job + " gained " + ftrain::Join(*gained, " ") + ": it now holds " +
          SetJobNodesEnv(*now));
  } else {
    o.detail = gained.status().message();
  }
  answers_.push_back(o);
}

void JobRunner::Requeue(double budget_s, bool unless_cancelled) {
  MergeRecords();  // Slurm ends this script soon after: the records first
  Observation o = Obs(Observation::Kind::kRequeued);
  RequeueGuard guard;
  if (unless_cancelled) {
    guard = [job = ctx_.job](const JobInfo& j) {
      if (ClassifyTermAnswer(j.State(), j.Get("Reason")) != TermAnswer::kCancelled) {
        return Status::Ok();
      }
      const std::string reason = j.Get("Reason");  // "" for None
      return Status::Aborted("job " + job + " was cancelled (JobState=" + j.State() +
                             (reason.empty() ? "" : ", Reason=" + reason) + "): not requeueing it");
    };
  }
  Status r = slurm_->Requeue(ctx_.job, ctx_.restart_count, budget_s, guard);
  o.ok = r.ok();
  o.detail = r.message();
  // Only the guard aborts: slurmctld said the job is cancelled (the policy ends it exit 0).
  if (r.code() == Status::Code::kAborted) o.job_state = "CANCELLED";
  answers_.push_back(o);
}

void JobRunner::Execute(const Action& a) {
  using K = Action::Kind;
  switch (a.kind) {
    case K::kLog:
      Log(a.text);
      break;
    case K::kRecord:
      Record(a);
      break;
    case K::kWriteLastStop: {
      Status w = WriteFileDurably(env_, layout_.last_stop(), a.text + "\n");
      if (!w.ok()) Log("WARNING: " + w.message());
      break;
    }
    case K::kResetFailedStarts:
      std::remove(layout_.failed_starts().c_str());
      std::remove(layout_.node_requeues().c_str());
      break;
    case K::kWriteNodeRequeues: {
      Status w = WriteFileDurably(env_, layout_.node_requeues(), a.text + "\n");
      if (!w.ok()) Log("WARNING: cannot write " + layout_.node_requeues() + ": " + w.message());
      break;
    }
    case K::kCountFailedStart:
      CountFailedStart();
      break;
    case K::kAcquireLease:
      AcquireLease();
      break;
    case K::kCaptureSubmission:
      CaptureSubmission();
      break;
    case K::kCancelPending:
      (void)slurm_->Cancel(a.text, true);
      break;
    case K::kRunPreflight:
      RunPreflight();
      break;
    case K::kLocalise:
      Localise(a.nodes);
      break;
    case K::kMakeSecret:
      MakeSecret();
      break;
    case K::kWriteJobNodes:
      WriteJobNodes(a.nodes);
      break;
    case K::kStartAgents:
      StartAgents(a.nodes);
      break;
    case K::kLaunch:
      Launch(a);
      break;
    case K::kSignalStep: {
      const int sig = a.text == "USR1" ? SIGUSR1 : a.text == "TERM" ? SIGTERM : SIGKILL;
      if (step_ > 0) kill(step_, sig);
      if (preflight_ > 0) kill(preflight_, sig);
      break;
    }
    case K::kEndStep:
      EndStep();
      break;
    case K::kQueryNodesInJob:
      QueryNodesInJob();
      break;
    case K::kQueryJobState:
      QueryJobState(a.seconds);
      break;
    case K::kProbeHealth:
      ProbeHealth(a.nodes);
      break;
    case K::kConfirmDeath:
      ConfirmDeath(a.nodes);
      break;
    case K::kRelease:
      Release(a.nodes);
      break;
    case K::kWaitNotResponding:
      WaitNotResponding(a.nodes, a.seconds);
      break;
    case K::kSignalAgents:
      SignalAgents(a.text);
      break;
    case K::kRequeue:
      Requeue(a.seconds, a.text == "unless_cancelled");
      break;
    case K::kExclude:
      Exclude(a);
      break;
    case K::kWaitAgents:
      WaitAgents(a.seconds);
      break;
    case K::kStopAgents:
      StopAgents();
      answers_.push_back(Obs(Observation::Kind::kAgentsStopped));
      break;
    case K::kQuarantine:
      Quarantine(a);
      break;
    case K::kQueryRoom:
      QueryRoom();
      break;
    case K::kExpand:
      Expand(a.num_nodes, a.nodes, a.probe);
      break;
    case K::kExit:
      exit_code_ = a.code;
      done_ = true;
      break;
  }
}

}  // namespace ftrain::orch
