// orch/sim_exec.cc - the simulated world, part 3: the executor. Each action the policy emits is
// played as the runner (job_runner*.cc) and Slurm would: a question's answer comes after
// seeded latency, before anything else reaches the policy (the runner blocks on it); slurmctld
// down or busy answers nothing; a launch resumes, trains and ends; the run directory's files
// (.failed_starts, .node_requeues, .last_stop, quarantine.jsonl, hangs.jsonl, rollbacks.jsonl)
// persist across starts.
#include <algorithm>

#include "orch/sim_world.h"

namespace ftrain::orch::sim {
namespace {

using K = Action::Kind;
using O = Observation::Kind;

Observation Obs(O k) {
  Observation o;
  o.kind = k;
  return o;
}

}  // namespace

bool World::SlurmctldUp(double t) const {
  for (const auto& o : ctl_out_) {
    if (t >= o.t0 && t < o.t1) return false;
  }
  return true;
}

bool World::FsUp(double t) const {
  for (const auto& o : fs_out_) {
    if (t >= o.t0 && t < o.t1) return false;
  }
  return true;
}

int World::NodeIndex(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<std::string> World::Names(const std::vector<int>& idx) const {
  std::vector<std::string> out;
  for (int i : idx) out.push_back(nodes_[i].name);
  return out;
}

bool World::Recorded(const std::string& host) const {
  int hangs = 0;
  for (const auto& h : hangs_) hangs += h.host == host;
  if (hangs >= 2) return true;
  for (const auto& q : quarantine_) {
    if (q.host == host) return true;
  }
  return std::any_of(records_.begin(), records_.end(),
                     [&](const std::string& r) { return r.find(host) != std::string::npos; });
}

void World::Answer(Observation o, double latency) {
  answer_t_ = std::max(answer_t_, t_) + latency;
  ++answers_due_;
  PushObs(answer_t_, std::move(o), true);
}

// A question to Slurm or the nodes: its answer is scheduled. False: not a question.
bool World::Ask(const Action& a) {
  switch (a.kind) {
    case K::kLocalise: {
      std::vector<bool> alone, pair;
      for (const auto& n : a.nodes) alone.push_back(NodeHealthy(NodeIndex(n)));
      for (size_t i = 0; i < alone.size(); ++i)
        pair.push_back(alone[i] && alone[(i + 1) % alone.size()]);
      Observation o = Obs(O::kLocalised);
      o.nodes = BlameNodes(a.nodes, alone, pair);
      Answer(o, rng_.Uniform(20, 60));
      return true;
    }
    case K::kStartAgents: {
      Observation o = Obs(O::kAgentsReady);
      for (const auto& n : a.nodes) o.count += NodeOk(NodeIndex(n));
      Answer(o, rng_.Uniform(2, 10));
      return true;
    }
    case K::kQueryNodesInJob: {
      Observation o = Obs(O::kNodesInJob);
      o.known = SlurmctldUp(t_) && !EmptyAnswer();
      if (o.known) o.nodes = Names(job_nodes_);
      Answer(o, SlurmLatency());
      return true;
    }
    case K::kQueryJobState:
      Answer(JobStateAnswer(), SlurmLatency());
      return true;
    case K::kProbeHealth: {
      Observation o = Obs(O::kHealth);
      o.ok = true;
      for (const auto& n : a.nodes) o.ok = o.ok && NodeOk(NodeIndex(n));
      Answer(o, o.ok ? rng_.Uniform(1, 3) : settings_.health_timeout_s);
      return true;
    }
    case K::kConfirmDeath: {
      Observation o = Obs(O::kConfirmed);
      for (const auto& n : a.nodes) {
        if (o.node.empty() && nodes_[NodeIndex(n)].down_until > t_) o.node = n;
      }
      o.detail = o.node.empty() ? "" : "node " + o.node + " confirmed dead";
      Answer(o, rng_.Uniform(2, 5));
      return true;
    }
    case K::kRelease: {
      Observation o = Obs(O::kReleased);
      o.ok = SlurmctldUp(t_);
      for (const auto& n : a.nodes) {
        auto it = std::find(job_nodes_.begin(), job_nodes_.end(), NodeIndex(n));
        if (o.ok && it != job_nodes_.end() && it != job_nodes_.begin()) job_nodes_.erase(it);
      }
      Answer(o, SlurmLatency());
      return true;
    }
    case K::kWaitNotResponding: {
      Observation o = Obs(O::kNotRespondingWaited);
      o.detail = "down*";
      Answer(o, rng_.Uniform(1, std::max(1.0, a.seconds)));
      return true;
    }
    case K::kWaitAgents:
    case K::kStopAgents:
      Answer(Obs(O::kAgentsStopped), rng_.Uniform(0.5, 5));
      return true;
    case K::kExpand: {  // job expansion: healthy partition nodes the job neither has nor excludes
      Observation o = Obs(O::kExpanded);
      o.ok = SlurmctldUp(t_) && !EmptyAnswer();
      for (size_t i = 0; o.ok && i < nodes_.size(); ++i) {
        const int n = static_cast<int>(i);
        const bool has = std::find(job_nodes_.begin(), job_nodes_.end(), n) != job_nodes_.end();
        const bool excluded =
            std::find(a.nodes.begin(), a.nodes.end(), nodes_[i].name) != a.nodes.end();
        if (has || excluded || !NodeOk(n) || static_cast<int>(o.nodes.size()) >= a.num_nodes) {
          continue;
        }
        job_nodes_.push_back(n);
        o.nodes.push_back(nodes_[i].name);
      }
      if (o.nodes.empty()) {
        o.ok = false;
        o.detail = "salloc: Requested node configuration is not available";
      }
      Answer(o, SlurmLatency() + rng_.Uniform(0.2, 3));
      return true;
    }
    case K::kQueryRoom: {
      Observation o = Obs(O::kRoom);
      o.known = SlurmctldUp(t_) && !EmptyAnswer();
      for (const auto& n : nodes_) {
        if (o.known) o.nodes.push_back(n.name);  // every node of the partition, any state
      }
      Answer(o, SlurmLatency());
      return true;
    }
    default:
      return false;
  }
}

void World::Execute(const Action& a) {
  if (Ask(a)) return;
  switch (a.kind) {
    case K::kRecord:
      records_.push_back(ToText(a));
      return;
    case K::kWriteLastStop:
      last_stop_ = a.text;
      return;
    case K::kResetFailedStarts:  // the runner removes both counts (job_runner.cc)
      failed_starts_.clear();
      node_requeues_.clear();
      return;
    case K::kWriteNodeRequeues:
      node_requeues_ = a.text + "\n";
      return;
    case K::kCountFailedStart: {
      Observation o = Obs(O::kFailedStartCounted);
      o.checkpoint = Newest();
      o.count = NextFailedStartCount(failed_starts_, o.checkpoint);
      failed_starts_ = o.checkpoint + " " + std::to_string(o.count) + "\n";
      Answer(o, 0.05);
      return;
    }
    case K::kAcquireLease: {
      Observation o = Obs(O::kLease);
      o.lease_ok = true;
      o.epoch = ++epoch_;
      Answer(o, 0.05);
      return;
    }
    case K::kRunPreflight: {  // asynchronous: its exit is reaped later
      Observation o = Obs(O::kPreflightExited);
      bool ok = true, alive = true;
      for (int n : job_nodes_) ok = ok && NodeHealthy(n), alive = alive && NodeOk(n);
      o.rc = ok ? 0 : alive ? 1 : 124;
      PushObs(t_ + (alive ? rng_.Uniform(15, 40) : settings_.preflight_timeout_s), o, false);
      return;
    }
    case K::kLaunch:
      Launch(a);
      return;
    case K::kSignalStep:
      SignalStep(a.text);
      return;
    case K::kEndStep:
      if (step_live_) EndStepAfter(137, rng_.Uniform(0.5, 3));
      return;
    case K::kRequeue:
      Requeue(a.seconds, a.text == "unless_cancelled");
      return;
    case K::kExclude:
      Exclude(a);
      return;
    case K::kQuarantine: {
      const std::string host = a.nodes.empty() ? "" : a.nodes[0];
      // A "cleared" line lets a host back in: no exclusion to justify, and the world no
      // longer holds its earlier exclusion as faulty against the policy.
      if (a.text != records::kClearedCause) {
        facts_.exclusions.push_back({t_, host, "quarantine " + a.text, Recorded(host)});
      } else {
        const int n = NodeIndex(host);
        excluded_faulty_.erase(std::remove(excluded_faulty_.begin(), excluded_faulty_.end(), n),
                               excluded_faulty_.end());
      }
      QuarantineLine q = SimQuarantine(host, a.text, -1, -1);
      q.time = 1.7e9 + t_;  // the runner's "time": the wall clock the policy sees (Deliver)
      quarantine_.push_back(q);
      return;
    }
    case K::kExit:
      Exit(a.code);
      return;
    default:   // log, make_secret, write_job_nodes, capture_submission, cancel_pending,
      return;  // signal_agents: nothing the world needs to play
  }
}

Observation World::JobStateAnswer() {
  Observation o = Obs(O::kJobState);
  if (!SlurmctldUp(t_) || EmptyAnswer()) return o;  // no answer: job_state ""
  if (cancelled_) {
    o.job_state = "CANCELLED";
    o.reason = "None";
  } else if (timed_out_) {
    o.job_state = "TIMEOUT";
    o.reason = "TimeLimit";
  } else if (preempted_) {
    o.job_state = "PREEMPTED";
    o.reason = "Preempted";
  } else {
    o.job_state = "RUNNING";
    o.reason = "None";
  }
  return o;
}

void World::Launch(const Action& a) {
  ++launch_;
  step_live_ = true;
  training_ = stopping_ = hit_ = hit_excused_ = false;
  step_nodes_.clear();
  for (const auto& n : a.nodes) step_nodes_.push_back(NodeIndex(n));
  watch_ = a.watch;
  SimLaunch l;
  l.start = static_cast<int>(facts_.starts.size()) - 1;
  l.t = t_;
  l.resume_step = committed_;
  facts_.launches.push_back(l);
  for (int n : step_nodes_) {
    if (std::find(job_nodes_.begin(), job_nodes_.end(), n) == job_nodes_.end()) {
      MarkHit(SIZE_MAX);
      return EndStepAfter(1, 1);  // srun: the node is not in the allocation
    }
    if (!NodeOk(n)) {
      MarkHit(SIZE_MAX);
      return EndStepAfter(1, 30);
    }
    if (nodes_[n].bad_gpu) {
      MarkHit(SIZE_MAX);
      return EndStepAfter(1, rng_.Uniform(10, 30));
    }
  }
  const double resume = rng_.Uniform(20, 90);
  for (const auto& o : fs_out_) {
    if (t_ + resume / 2 >= o.t0 && t_ + resume / 2 < o.t1) {  // storage outage at resume
      MarkHit(o.report);
      return EndStepAfter(74, resume / 2);
    }
  }
  Push(t_ + resume, Ev::kTrainBegin, 0, launch_);
}

void World::EndStepAfter(int rc, double after_s, bool commit) {
  Observation o;
  o.rc = rc;
  o.ok = commit;
  obs_[seq_] = o;
  Push(t_ + after_s, Ev::kStepEnd, 0, launch_);
}

// USR1 or TERM: the ranks checkpoint and exit 75, unless a node of the step is dead or paused
// (they cannot agree: the controller's deadline then TERMs and KILLs the step).
void World::SignalStep(const std::string& sig) {
  if (!step_live_) return;
  if (sig == "KILL") return EndStepAfter(137, 0.1);
  if (stopping_) return;
  for (int n : step_nodes_) {
    if (!NodeOk(n)) return;
  }
  stopping_ = true;
  if (!training_) return EndStepAfter(kExitRequeue, 3);
  EndStepAfter(kExitRequeue, rng_.Uniform(10, 40), true);
}

// Retried within its budget: it lands at the first moment slurmctld answers.
// With `unless_cancelled` each try first asks slurmctld: a cancelled job is not requeued.
void World::Requeue(double budget, bool unless_cancelled) {
  Observation o = Obs(O::kRequeued);
  double t_ok = -1;
  for (double t = t_; t <= t_ + budget; t += 0.5) {
    if (SlurmctldUp(t)) {
      t_ok = t;
      break;
    }
  }
  if (t_ok < 0) {
    o.detail = "slurmctld did not answer within " + std::to_string(static_cast<int>(budget)) + " s";
    return Answer(o, budget);
  }
  if (unless_cancelled && cancelled_) {
    o.job_state = "CANCELLED";
    o.detail = "job 1000 was cancelled (JobState=CANCELLED): not requeueing it";
    return Answer(o, t_ok - t_ + rng_.Uniform(0.1, 1));
  }
  o.ok = true;
  facts_.starts.back().requeued = true;
  if (cancelled_) facts_.requeued_cancelled = true;
  Answer(o, t_ok - t_ + rng_.Uniform(0.1, 1));
}

// ExcNodeList of the requeued job: the runner replaces ftrain's earlier exclusions; a dead node
// that answers again is not excluded (job_runner_nodes.cc), a faulty one always is.
void World::Exclude(const Action& a) {
  std::vector<std::string> hosts;
  for (const auto& n : a.nodes) {
    if (!NodeOk(NodeIndex(n))) hosts.push_back(n);
  }
  for (const auto& f : a.faulty) {
    if (std::find(hosts.begin(), hosts.end(), f) == hosts.end()) hosts.push_back(f);
  }
  for (const auto& h : hosts) facts_.exclusions.push_back({t_, h, "exclude", Recorded(h)});
  for (const auto& f : a.faulty) {
    const int n = NodeIndex(f);
    if (nodes_[n].bad_gpu &&
        std::find(excluded_faulty_.begin(), excluded_faulty_.end(), n) == excluded_faulty_.end()) {
      excluded_faulty_.push_back(n);
    }
  }
  exclude_ = hosts;
  if (a.num_nodes > 0) {
    num_nodes_ = a.num_nodes;
    train_count_ = a.train_count;
  }
}

void World::Exit(int code) {
  SimStart& s = facts_.starts.back();
  const bool requeued = s.requeued;
  EndStart(false);
  if (requeued) return;
  if (cancelled_) return Finish(SimOutcome::kCancelled, code);
  if (code != 0) return Finish(SimOutcome::kFailed, code);
  Finish(committed_ >= total_ ? SimOutcome::kFinished : SimOutcome::kCompleted, 0);
}

}  // namespace ftrain::orch::sim
