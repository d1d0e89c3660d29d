// orch/sim_world.cc - the simulated world, part 1: the seed's job and schedule, the event loop,
// the starts (each a new JobPolicy with the start's facts, as slurm/train.sh execs `ftrain
// job`), delivery of observations in the runner's order, and the training step's progress.
// What faults do is in sim_faults.cc, what actions do in sim_exec.cc.
#include "orch/sim_world.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "orch/quarantine.h"

namespace ftrain::orch::sim {
namespace {

constexpr size_t kMaxLaunches = 400, kMaxStarts = 120;

std::string Fmt1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

}  // namespace

World::World(const SimOptions& o) : opt_(o), rng_(o.seed) {}

void World::Setup() {
  train_n_ = 2 + rng_.Int(7);
  spare_n_ = rng_.Chance(0.5) ? 0 : 1 + rng_.Int(2);
  num_nodes_ = train_n_ + spare_n_;
  const int pool = num_nodes_ + 2 + rng_.Int(5);
  for (int i = 0; i < pool; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "node%03d", i);
    nodes_.push_back({name});
  }
  step_s_ = rng_.Uniform(1, 4);
  every_ = std::max<int64_t>(1, std::llround(rng_.Uniform(600, 1800) / step_s_));
  total_ = std::max<int64_t>(1, std::llround(opt_.days * 86400 / step_s_));
  const double limits[] = {12 * 3600.0, 24 * 3600.0, 48 * 3600.0};
  time_limit_s_ = limits[rng_.Int(3)];
  std::map<std::string, std::string> env = {
      {"FTRAIN_CONFIG", "CONFIG"},
      {"FTRAIN_RUN_DIR", "RUN"},
      {"FTRAIN_DATA", "DATA"},
      {"FTRAIN_BIN", "ftrain"},
      {"FTRAIN_SPARE_CHECK_S", "60"},
      {"FTRAIN_RANKS_PER_NODE", "1"},
      {"FTRAIN_SPARE_NODES", std::to_string(spare_n_)},
      // Most jobs run with the defaults; some without detection, pre-flight or daemons.
      {"FTRAIN_DETECT", rng_.Chance(0.8) ? "1" : "0"},
      {"FTRAIN_PREFLIGHT", rng_.Chance(0.85) ? "1" : "0"},
      {"FTRAIN_CKPTD", rng_.Chance(0.9) ? "1" : "0"}};
  // A quarter of the jobs are elastic (FTRAIN_ELASTIC), chosen from the seed alone so that
  // every other draw of a seed stays what it was before elasticity existed.
  elastic_ = (opt_.seed * 2654435761ULL >> 7) % 4 == 0;
  env["FTRAIN_ELASTIC"] = elastic_ ? "1" : "0";
  settings_ = *LoadJobSettings(MapEnv(env));  // constant, valid settings
  const JobSettings& s = settings_;
  facts_.seed = opt_.seed;
  facts_.total_steps = total_;
  // Each spare and, when elastic, each shrink down to one node relaunches once more.
  facts_.injob_budget = s.max_injob_restarts + 2 + spare_n_ + (elastic_ ? train_n_ - 1 : 0);
  // A start restarts at most FTRAIN_MAX_ROLLBACK_RESTARTS rollbacks in place; the next one
  // counts a failed start (job_policy_loops.cc). The budget is per start: the starts without a
  // newer checkpoint are bounded by the failed starts and the node requeues.
  facts_.rollback_budget =
      (s.max_rollback_restarts + 1) * (s.max_failed_starts + s.max_node_requeues);
  // Failed starts requeue at most FTRAIN_MAX_FAILED_STARTS - 1 times, and requeues for nodes
  // at most FTRAIN_MAX_NODE_REQUEUES times, per newest checkpoint: one requeue of slack.
  facts_.requeue_budget = s.max_failed_starts + s.max_node_requeues;
  facts_.ckpt_interval_s = every_ * step_s_;
  // Every wait the controller may add to one recovery (docs/operations.md's settings), the
  // slowest resume the world plays (90 s) three times, and a margin of 5 minutes.
  facts_.recovery_budget_s = s.stop_timeout_s + JobPolicy::kKillGraceS + s.health_wait_s +
                             s.norespond_wait_s + JobPolicy::kRequeueBudgetS +
                             2 * s.preflight_timeout_s + s.ckptd_start_timeout_s +
                             3 * s.restart_backoff_s + s.detect.hung_after_s + 3 * (90 + 60) + 300;
}

void World::Push(double t, Ev kind, int64_t aux, int64_t launch) {
  Event e;
  e.t = t;
  e.seq = seq_++;
  e.kind = kind;
  e.gen = gen_;
  e.aux = aux;
  e.launch = launch;
  events_.push(e);
}

void World::PushObs(double t, Observation o, bool answer, int64_t launch) {
  obs_[seq_] = std::move(o);
  Push(t, Ev::kObserve, answer ? 1 : 0, launch);
}

void World::Trace(const std::string& line) {
  if (opt_.trace) facts_.trace.push_back("t=" + Fmt1(t_) + " " + line);
}

SimFacts World::Run() {
  Setup();
  ScheduleFaults();
  Push(0, Ev::kPendingDone);
  const double horizon = opt_.days * 86400 * 3 + 2 * 86400;
  while (!ended_ && !events_.empty()) {
    const Event e = events_.top();
    events_.pop();
    if (e.t > horizon) break;
    t_ = std::max(t_, e.t);
    Handle(e);
    obs_.erase(e.seq);
    if (facts_.launches.size() > kMaxLaunches || facts_.starts.size() > kMaxStarts) {
      Trace("SIM cut: the cap on starts and launches was reached");
      facts_.cut_by_loop = true;
      break;
    }
  }
  facts_.end_t = t_;
  facts_.steps_done = committed_;
  return facts_;
}

void World::Handle(const Event& e) {
  const bool this_start = e.gen == gen_ && start_live_;
  const bool this_launch = step_live_ && e.launch == launch_;
  switch (e.kind) {
    case Ev::kObserve: {
      if (!this_start || (e.launch >= 0 && !this_launch)) return;
      Observation o = obs_[e.seq];
      if (e.aux == 1) {  // an answer: before anything that waited for it
        --answers_due_;
        Deliver(o);
      } else if (answers_due_ > 0) {
        held_.push_back(o);
      } else {
        Deliver(o);
      }
      FlushHeld();
      return;
    }
    case Ev::kTick:
      if (this_start && e.aux == tick_gen_ && answers_due_ == 0) {
        Observation o;
        o.kind = Observation::Kind::kTick;
        Deliver(o);
      }
      return;
    case Ev::kFault:
      FireFault(faults_[e.aux]);
      return;
    case Ev::kTrainBegin:
      if (this_launch) BeginTraining();
      return;
    case Ev::kStepEnd:
      if (this_launch) StepEnded(obs_[e.seq]);
      return;
    case Ev::kPoison:
      if (this_launch && training_) FirePoison(faults_[e.aux]);
      return;
    case Ev::kTimeLimit:
      if (!this_start) return;
      timed_out_ = true;
      SignalJob("TERM");
      Push(t_ + 30, Ev::kKillWait);
      return;
    case Ev::kKillWait:
      if (!this_start) return;
      Trace("SLURM KillWait over: the batch script is killed");
      EndStart(true);
      return;
    case Ev::kSlurmNode:
      SlurmNoticed(static_cast<int>(e.aux));
      return;
    case Ev::kRepair:  // an operator repairs a node once no running job holds it
      if (start_live_ &&
          std::find(job_nodes_.begin(), job_nodes_.end(), e.aux) != job_nodes_.end()) {
        Push(t_ + 600, Ev::kRepair, e.aux);
      } else {
        nodes_[e.aux].bad_gpu = false;
        excluded_faulty_.erase(std::remove(excluded_faulty_.begin(), excluded_faulty_.end(), e.aux),
                               excluded_faulty_.end());
      }
      return;
    case Ev::kPendingDone:
      BeginStart();
      return;
  }
}

void World::FlushHeld() {
  while (answers_due_ == 0 && !held_.empty() && start_live_) {
    Observation o = held_.front();
    held_.erase(held_.begin());
    Deliver(o);
  }
}

void World::Deliver(Observation o) {
  o.now = t_;
  o.wall = 1.7e9 + t_;
  const Decision d = policy_->On(o);
  ++facts_.decisions;
  if (opt_.trace && (!d.rule.empty() || o.kind != Observation::Kind::kTick)) {
    std::string line = "#" + std::to_string(gen_) + " " + ToText(o) + " -> " +
                       (d.rule.empty() ? "(nothing)" : d.rule) + " [" +
                       PhaseName(policy_->state().phase) + "]";
    for (const auto& a : d.actions) {
      if (a.kind != Action::Kind::kLog) line += " | " + ToText(a);
    }
    Trace(line);
  }
  if (!d.rule.empty()) {
    facts_.starts.back().end_rule = d.rule;
    for (size_t b = 0, e; b <= d.rule.size(); b = e + 1) {
      e = std::min(d.rule.find('+', b), d.rule.size());
      facts_.rules[d.rule.substr(b, e - b)] += 1;
    }
  }
  for (const auto& a : d.actions) facts_.starts.back().exits += a.kind == Action::Kind::kExit;
  const int gen = gen_;
  answer_t_ = t_;
  for (const auto& a : d.actions) {
    if (gen_ != gen || !start_live_ || ended_) break;
    Execute(a);
  }
  if (gen_ == gen && start_live_) ScheduleTick();
}

// The runner ticks every 0.5 s. While the ranks train, ticks that cannot matter are skipped:
// the next one comes at the policy's own next deadline (its spare check), at most 60 s on.
void World::ScheduleTick() {
  if (!start_live_ || answers_due_ > 0) return;
  const JobState& st = policy_->state();
  if (st.phase == Phase::kDone) return;
  double next = t_ + 0.5;
  if (st.phase == Phase::kTraining) {
    double until = t_ + 60;
    if (st.next_spare_check > t_) until = std::min(until, st.next_spare_check);
    next = std::max(next, until);
  }
  next = std::ceil(next * 2) / 2;
  Push(next, Ev::kTick, ++tick_gen_);
}

// ---- starts ---------------------------------------------------------------------------------

void World::BeginStart() {
  std::vector<int> avail;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    const bool excluded =
        std::find(exclude_.begin(), exclude_.end(), nodes_[i].name) != exclude_.end();
    if (NodeOk(i) && !excluded) avail.push_back(i);
  }
  if (static_cast<int>(avail.size()) < num_nodes_ || !SlurmctldUp(t_)) {
    if (pending_since_ < 0) pending_since_ = t_;
    Push(t_ + 60, Ev::kPendingDone);  // pending: too few nodes, or slurmctld down
    return;
  }
  if (pending_since_ >= 0) external_wait_s_ += t_ - pending_since_;
  pending_since_ = -1;
  job_nodes_.assign(avail.begin(), avail.begin() + num_nodes_);  // Slurm's lowest names
  for (int n : job_nodes_) {
    const bool faulty =
        nodes_[n].bad_gpu &&
        std::find(excluded_faulty_.begin(), excluded_faulty_.end(), n) != excluded_faulty_.end();
    // A node kept out as faulty (a node_fault line) may come back once repaired, and any after
    // a "cleared" line (an operator's, or the controller's when the partition had no room
    // without it: it is checked again at that start).
    double cleared = -1;
    for (const QuarantineLine& q : quarantine_) {
      if (q.host == nodes_[n].name && q.cause == records::kClearedCause) cleared = q.time;
    }
    const bool quarantined =
        std::any_of(quarantine_.begin(), quarantine_.end(), [&](const QuarantineLine& q) {
          if (q.host != nodes_[n].name || q.time <= cleared) return false;
          // A hang line keeps its host out for FTRAIN_HANG_QUARANTINE_KEEP_S only.
          if (q.cause == kHangCause) {
            const double keep = settings_.hang_quarantine_keep_s;
            return keep <= 0 || 1.7e9 + t_ - q.time <= keep;
          }
          if (q.cause != kFaultyCause) return true;
          // Its line kept out the fault it recorded, for FTRAIN_FAULTY_KEEP_S: a node broken
          // again after an expired line's repair is a new fault nobody found yet.
          const bool expired =
              settings_.faulty_keep_s > 0 && 1.7e9 + t_ - q.time > settings_.faulty_keep_s;
          return nodes_[n].bad_gpu && !expired;
        });
    if (faulty || quarantined) {
      facts_.readmitted.push_back(nodes_[n].name + " at t=" + std::to_string(int64_t(t_)) + " s");
    }
  }
  ++gen_;
  start_live_ = true;
  policy_ = std::make_unique<JobPolicy>(settings_);
  records_.clear();
  held_.clear();
  answers_due_ = 0;
  step_live_ = training_ = stopping_ = false;
  preempted_ = timed_out_ = false;
  SimStart s;
  s.t = t_;
  s.restart_count = restart_count_;
  facts_.starts.push_back(s);
  Observation o;
  o.kind = Observation::Kind::kStarted;
  o.job = "1000";
  o.restart_count = restart_count_;
  o.batch_host = nodes_[job_nodes_[0]].name;
  o.nodes = Names(job_nodes_);
  o.last_stop = last_stop_;
  o.train_count = train_count_;
  o.quarantine = quarantine_;
  o.hangs = hangs_;
  o.rollbacks = rollbacks_;  // as the runner reads them (job_runner_records.cc)
  o.checkpoint = Newest();
  o.node_requeues = node_requeues_;
  o.job_end_wall = 1.7e9 + t_ + time_limit_s_;  // EndTime, as the runner reads it (stop_lead.h)
  Trace("SLURM start #" + std::to_string(gen_) + " restart_count " +
        std::to_string(restart_count_) + " on " + std::to_string(num_nodes_) + " nodes");
  Observation usr1;
  usr1.kind = Observation::Kind::kSignal;
  usr1.signal = "USR1";
  PushObs(t_ + time_limit_s_ - settings_.usr1_lead_s, usr1, false);
  Push(t_ + time_limit_s_, Ev::kTimeLimit);
  Deliver(o);
}

// The start's batch script is gone: by its exit, or killed by Slurm.
void World::EndStart(bool killed) {
  SimStart& s = facts_.starts.back();
  s.killed = killed;
  s.last_stop = last_stop_;
  start_live_ = false;
  if (step_live_) {
    SettleProgress();
    step_live_ = false;  // its ranks die with the allocation (rc stays -1)
  }
  if (s.requeued) {
    ++restart_count_;
    pending_since_ = t_;
    Push(t_ + rng_.Uniform(20, 300), Ev::kPendingDone);
    return;
  }
  if (killed) {
    Finish(cancelled_ ? SimOutcome::kCancelled : SimOutcome::kTimedOut, 143);
  }
}

void World::Finish(SimOutcome outcome, int code) {
  ended_ = true;
  facts_.outcome = outcome;
  facts_.exit_code = code;
  Trace(std::string("END ") + OutcomeName(outcome) + " exit " + std::to_string(code) + ", step " +
        std::to_string(committed_) + " of " + std::to_string(total_));
}

// ---- the training step ----------------------------------------------------------------------

void World::BeginTraining() {
  training_ = true;
  t_train_ = t_;
  s0_ = committed_;
  CloseInterruption();
  Observation done;
  done.rc = 0;
  done.ok = true;  // the final checkpoint
  obs_[seq_] = done;
  Push(t_ + (total_ - s0_) * step_s_, Ev::kStepEnd, 0, launch_);
  for (size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    if (f.step > s0_ && f.step <= total_) {
      Push(t_ + (f.step - s0_) * step_s_, Ev::kPoison, static_cast<int64_t>(i), launch_);
    }
  }
}

// The steps trained up to now; the newest checkpoint the run committed (one every `every_`
// steps, none while the shared file system is down).
void World::SettleProgress() {
  if (!training_) return;
  training_ = false;
  const int64_t now = std::min(total_, s0_ + static_cast<int64_t>((t_ - t_train_) / step_s_));
  for (int64_t m = now / every_ * every_, n = 0; m > committed_ && n < 50; m -= every_, ++n) {
    if (FsUp(t_train_ + (m - s0_) * step_s_)) {
      committed_ = m;
      break;
    }
  }
  facts_.steps_done = committed_;
  end_lost_s_ = (now - committed_) * step_s_;  // used if this end opens an interruption
}

void World::StepEnded(const Observation& end) {
  const bool was_training = training_;
  int rc = end.rc;
  for (const auto& o : fs_out_) {
    if (rc == 0 && t_ >= o.t0 && t_ < o.t1) {  // the final checkpoint cannot be written
      rc = 1;
      MarkHit(o.report);
    }
  }
  SettleProgress();
  if (!was_training) end_lost_s_ = 0;
  if (end.ok && FsUp(t_)) {  // the stop's (or the finish's) checkpoint
    committed_ = was_training
                     ? std::min(total_, s0_ + static_cast<int64_t>((t_ - t_train_) / step_s_))
                     : committed_;
    if (rc == 0) committed_ = total_;
    end_lost_s_ = 0;
  }
  step_live_ = false;
  SimLaunch& l = facts_.launches.back();
  l.rc = rc;
  l.stopped = stopping_ || rc == 0;
  if (committed_ > best_committed_) {
    best_committed_ = committed_;
    l.progressed = true;
  }
  stopping_ = false;
  if (hit_ && !intr_open_) {
    intr_open_ = true;
    intr_.t = hit_t_;
    intr_.lost_s = end_lost_s_;
    intr_.faults = 1;
    intr_.excused = hit_excused_;
    intr_wait0_ = external_wait_s_;
    for (const auto& o : fs_out_) {  // an outage that kept checkpoints from landing counts too
      if (o.t0 < hit_t_ && o.t1 > hit_t_ - intr_.lost_s) {
        intr_.faults += 1;
        intr_.excused = intr_.excused || facts_.faults[o.report].may_fail;
      }
    }
  }
  // Rank 0 appends the rollback's record to RUN/rollbacks.jsonl before any rank exits 79.
  if (rc == kExitRollback) ++rollbacks_;
  Observation o;
  o.kind = Observation::Kind::kStepExited;
  o.rc = rc;
  o.quarantine = quarantine_;
  o.hangs = hangs_;
  o.rollbacks = rollbacks_;
  o.checkpoint = Newest();
  PushObs(t_, o, false);
}

}  // namespace ftrain::orch::sim

namespace ftrain::orch {

SimFacts RunSeed(const SimOptions& o) {
  sim::World w(o);
  return w.Run();
}

}  // namespace ftrain::orch
