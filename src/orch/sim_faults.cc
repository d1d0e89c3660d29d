// orch/sim_faults.cc - the simulated world, part 2: the seed's fault schedule and what each
// fault does to the cluster, the training step and Slurm's view of the job. A fault only
// changes the world and says so through observations the real runner would make (a step's
// exit, a declared node, a signal, Slurm's answers); it never touches the policy's state.
// MarkHit/CloseInterruption account for what a fault costs (SimInterruption).
#include <algorithm>
#include <cmath>

#include "orch/sim_world.h"

namespace ftrain::orch::sim {
namespace {

bool In(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

struct Weighted {
  const char* kind;
  int weight;
};
constexpr Weighted kKinds[] = {
    {"node_crash", 20}, {"rack", 5},      {"gpu_lost", 10},
    {"node_hang", 10},  {"fs_outage", 8}, {"slurmctld_outage", 12},
    {"rank_exit", 22},  {"usr1", 3},      {"term_running", 3},
    {"scancel", 1},     {"preempt", 6},
};
constexpr Weighted kRankExits[] = {{"1", 30},  {"2", 3},   {"74", 8},  {"75", 8},
                                   {"77", 10}, {"78", 15}, {"79", 15}, {"137", 11}};
const char* const kPoisons[] = {"poison_rc1", "poison_rc79", "poison_crash", "poison_gpu"};

template <size_t N>
const char* Pick(Rng* rng, const Weighted (&w)[N]) {
  int sum = 0;
  for (const auto& x : w) sum += x.weight;
  int r = rng->Int(sum);
  for (const auto& x : w) {
    if ((r -= x.weight) < 0) return x.kind;
  }
  return w[0].kind;
}

std::string Secs(double s) { return std::to_string(static_cast<int64_t>(std::llround(s))) + " s"; }

}  // namespace

void World::AddFault(Fault f, const std::string& detail, bool may_fail) {
  SimFault r;
  r.kind = f.kind == "rank_exit" ? "rank_exit " + std::to_string(f.rc) : f.kind;
  r.detail = detail;
  r.t = f.t;
  r.duration = f.duration;
  r.persistent = f.step >= 0;
  r.may_fail = may_fail;
  f.report = facts_.faults.size();
  facts_.faults.push_back(r);
  if (f.kind == "fs_outage") fs_out_.push_back({f.t, f.t + f.duration, f.report});
  if (f.kind == "slurmctld_outage") ctl_out_.push_back({f.t, f.t + f.duration, f.report});
  faults_.push_back(f);
  if (f.step < 0) Push(f.t, Ev::kFault, static_cast<int64_t>(faults_.size() - 1));
}

// About 2.5 faults a simulated day, anywhere in the run's span; one seed in eight also has a
// persistent fault at a poison step (it fires whenever the run reaches that step).
void World::ScheduleFaults() {
  const double span = opt_.days * 86400 * 1.3;
  const int n = static_cast<int>(rng_.Uniform(0, 5 * opt_.days + 1));
  for (int i = 0; i < n; ++i) {
    Fault f;
    f.kind = Pick(&rng_, kKinds);
    f.t = rng_.Uniform(0, span);
    bool may_fail = false;
    std::string detail;
    if (f.kind == "node_crash" || f.kind == "rack" || f.kind == "gpu_lost") {
      f.duration = rng_.Uniform(1800, 6 * 3600);
      detail = "repaired after " + Secs(f.duration);
      // A bad GPU on a live node is found only by the localisation, which needs the
      // pre-flight (docs/operations.md): without it the failed-start budget ends the job.
      may_fail = f.kind == "gpu_lost" && !settings_.preflight;
    } else if (f.kind == "node_hang") {
      f.duration = rng_.Chance(0.5) ? rng_.Uniform(2, 50) : rng_.Uniform(60, 600);
      detail = "paused " + Secs(f.duration);
    } else if (f.kind == "fs_outage") {
      f.duration = rng_.Chance(0.5) ? rng_.Uniform(5, 60) : rng_.Uniform(60, 1800);
      may_fail = f.duration >= 60;  // tolerated: a minute
      detail = "down " + Secs(f.duration);
    } else if (f.kind == "slurmctld_outage") {
      f.duration = rng_.Chance(0.6) ? rng_.Uniform(1, 14.9) : rng_.Uniform(15, 600);
      may_fail = f.duration >= JobPolicy::kRequeueBudgetS;  // tolerated: the requeue's budget
      detail = "down " + Secs(f.duration);
    } else if (f.kind == "rank_exit") {
      f.rc = std::atoi(Pick(&rng_, kRankExits));
      may_fail = f.rc == kExitConfig;
    }
    AddFault(f, detail, may_fail);
  }
  if (rng_.Chance(0.125)) {
    Fault f;
    f.kind = kPoisons[rng_.Int(4)];
    f.step = std::max<int64_t>(1, std::llround(rng_.Uniform(0.1, 0.9) * total_));
    f.t = -1;
    AddFault(f, "at step " + std::to_string(f.step), true);
  }
}

// A node of the job other than the batch host (batch-host death is not simulated); with no
// job running, any node of the pool.
int World::PickJobNode() {
  std::vector<int> c;
  if (start_live_) {
    for (size_t i = 1; i < job_nodes_.size(); ++i) {
      if (NodeOk(job_nodes_[i])) c.push_back(job_nodes_[i]);
    }
  } else {
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) c.push_back(i);
  }
  return c.empty() ? -1 : c[rng_.Int(static_cast<int>(c.size()))];
}

void World::FireFault(const Fault& f) {
  const SimFault& r = facts_.faults[f.report];
  Trace("FAULT " + r.kind + (r.detail.empty() ? "" : " (" + r.detail + ")"));
  if (f.kind == "node_crash" || f.kind == "rack") {
    for (int i = 0; i < (f.kind == "rack" ? 2 : 1); ++i) {
      const int n = PickJobNode();
      if (n >= 0) CrashNode(n, f.duration, f.report);
    }
  } else if (f.kind == "gpu_lost") {
    const int n = PickJobNode();
    if (n >= 0) LoseGpu(n, f.duration, f.report);
  } else if (f.kind == "node_hang") {
    const int n = PickJobNode();
    if (n >= 0) HangNode(n, f.duration, f.report);
  } else if (f.kind == "rank_exit") {
    if (!step_live_ || stopping_) return;
    int n = step_nodes_[rng_.Int(static_cast<int>(step_nodes_.size()))];
    for (const auto& h : hangs_) {  // a hang tends to come back where it happened
      const int i = NodeIndex(h.host);
      if (f.rc == kExitHang &&
          std::find(step_nodes_.begin(), step_nodes_.end(), i) != step_nodes_.end() &&
          rng_.Chance(0.5)) {
        n = i;
      }
    }
    const int64_t step = committed_;
    if (f.rc == kExitSdc) quarantine_.push_back(SimQuarantine(nodes_[n].name, "sdc", step, 0));
    if (f.rc == kExitHang) hangs_.push_back(SimHang(nodes_[n].name, step));
    MarkHit(f.report);
    EndStepAfter(f.rc, rng_.Uniform(1, 10));
  } else if (f.kind == "usr1" || f.kind == "term_running") {
    SignalJob(f.kind == "usr1" ? "USR1" : "TERM");
  } else if (f.kind == "scancel" || f.kind == "preempt") {
    if (f.kind == "scancel") cancelled_ = true;
    if (!start_live_) {
      if (f.kind == "scancel" && !ended_) Finish(SimOutcome::kCancelled, 0);  // pending
      return;
    }
    if (f.kind == "preempt") preempted_ = true;
    SignalJob("TERM");
    Push(t_ + 30, Ev::kKillWait);
  }
}

void World::FirePoison(const Fault& f) {
  Trace("FAULT " + f.kind + " (persistent, step " + std::to_string(f.step) + ")");
  MarkHit(f.report);
  if (f.kind == "poison_rc1" || f.kind == "poison_rc79") {
    EndStepAfter(f.kind == "poison_rc1" ? 1 : kExitRollback, 1);
    return;
  }
  std::vector<int> c;
  for (int n : step_nodes_) {
    if (n != job_nodes_[0]) c.push_back(n);
  }
  if (c.empty()) return;
  const int n = c[rng_.Int(static_cast<int>(c.size()))];
  if (f.kind == "poison_crash") {
    CrashNode(n, rng_.Uniform(1800, 7200), f.report);
  } else {
    LoseGpu(n, 6 * 3600, f.report);
  }
}

void World::CrashNode(int n, double repair_s, size_t report) {
  nodes_[n].down_until = std::max(nodes_[n].down_until, t_ + repair_s);
  Trace("WORLD " + nodes_[n].name + " crashed");
  if (!start_live_ || !In(job_nodes_, n)) return;
  if (step_live_ && In(step_nodes_, n)) {
    MarkHit(report);
    if (std::find(watch_.begin(), watch_.end(), nodes_[n].name) != watch_.end()) {
      Observation o;
      o.kind = Observation::Kind::kNodeDeclared;
      o.node = nodes_[n].name;
      o.verdict = "dead";
      o.detail = "node " + o.node + " declared dead (slurmd refuses)";
      PushObs(t_ + rng_.Uniform(3, 5), o, false, launch_);
    } else {
      EndStepAfter(1, rng_.Uniform(10, 60));  // the peers' collectives fail
    }
  }
  Push(t_ + 100, Ev::kSlurmNode, n);  // SlurmdTimeout
}

void World::HangNode(int n, double d, size_t report) {
  nodes_[n].hung_until = t_ + d;
  Trace("WORLD " + nodes_[n].name + " paused");
  if (!start_live_ || !In(job_nodes_, n)) return;
  const double hung_after = settings_.detect.hung_after_s;
  if (step_live_ && In(step_nodes_, n)) {
    const bool watched = std::find(watch_.begin(), watch_.end(), nodes_[n].name) != watch_.end();
    Observation o;
    o.node = nodes_[n].name;
    if (watched && d < hung_after) {
      o.kind = Observation::Kind::kHeartbeatLate;
      o.detail = "node " + o.node + " late";
      PushObs(t_ + settings_.detect.heartbeat_timeout_s + 1, o, false, launch_);
    } else if (watched) {
      MarkHit(report);
      o.kind = Observation::Kind::kNodeDeclared;
      o.verdict = "hung";
      o.detail = "node " + o.node + " declared hung";
      PushObs(t_ + hung_after, o, false, launch_);
    } else if (d >= 120) {  // the trainer's hang guard: exit 78, RUN/hangs.jsonl
      MarkHit(report);
      hangs_.push_back(SimHang(nodes_[n].name, committed_));
      EndStepAfter(kExitHang, 120);
    }
  }
  if (d >= 100) Push(t_ + 100, Ev::kSlurmNode, n);
}

void World::LoseGpu(int n, double repair_s, size_t report) {
  nodes_[n].bad_gpu = true;
  Trace("WORLD " + nodes_[n].name + " lost a GPU");
  Push(t_ + repair_s, Ev::kRepair, n);
  if (start_live_ && step_live_ && In(step_nodes_, n)) {
    MarkHit(report);
    EndStepAfter(1, rng_.Uniform(2, 10));
  }
}

// SlurmdTimeout after a node went silent: a job with spares or elastic (both --no-kill) loses
// the node; any other job is requeued by Slurm itself (its batch script killed).
void World::SlurmNoticed(int n) {
  if (!start_live_ || !In(job_nodes_, n) || NodeOk(n)) return;
  if (spare_n_ > 0 || elastic_) {
    job_nodes_.erase(std::find(job_nodes_.begin(), job_nodes_.end(), n));
    Trace("SLURM took " + nodes_[n].name + " out of the job");
    return;
  }
  Trace("SLURM requeues the job (node failure of " + nodes_[n].name + ")");
  facts_.starts.back().requeued = true;
  EndStart(true);
}

void World::SignalJob(const std::string& sig) {
  if (!start_live_) return;
  Observation o;
  o.kind = Observation::Kind::kSignal;
  o.signal = sig;
  PushObs(t_, o, false);
}

// A fault (`report`; SIZE_MAX: the leftover of an earlier one) hit the launch or the recovery.
void World::MarkHit(size_t report) {
  const bool excused = report < facts_.faults.size() &&
                       (facts_.faults[report].may_fail || facts_.faults[report].persistent);
  if (intr_open_) {
    intr_.faults += report < facts_.faults.size() ? 1 : 0;
    intr_.excused = intr_.excused || excused;
  }
  if (!step_live_) return;
  if (!hit_) hit_t_ = t_;
  hit_ = true;
  hit_excused_ = hit_excused_ || excused;
}

void World::CloseInterruption() {
  if (!intr_open_) return;
  intr_open_ = false;
  intr_.lost_s += (t_ - intr_.t) - (external_wait_s_ - intr_wait0_);
  facts_.interruptions.push_back(intr_);
}

}  // namespace ftrain::orch::sim
