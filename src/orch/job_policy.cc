// orch/job_policy.cc - JobPolicy, part 1: the start (lease, records, spares), the pre-flight,
// the agents, the training step (signals, detection, spare checks) and the stop deadline.
// The step's end and the job's end are in job_policy_end.cc. Each decision names its rule in
// kRules (job_rules.cc).
#include "orch/job_policy.h"

#include <algorithm>
#include <cstdio>

#include "core/run_layout.h"

namespace ftrain::orch {
namespace {

using records::Field;

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string Fmt(double v) {  // seconds as the scripts printed them: no needless decimals
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Action Act(Action::Kind k) {
  Action a;
  a.kind = k;
  return a;
}

}  // namespace

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kStart:
      return "start";
    case Phase::kLease:
      return "lease";
    case Phase::kPreflight:
      return "preflight";
    case Phase::kLocalising:
      return "localising";
    case Phase::kAgents:
      return "agents";
    case Phase::kTraining:
      return "training";
    case Phase::kStopping:
      return "stopping";
    case Phase::kConfirming:
      return "confirming";
    case Phase::kFindingDead:
      return "finding_dead";
    case Phase::kHealthPoll:
      return "health_poll";
    case Phase::kProbing:
      return "probing";
    case Phase::kHealthWait:
      return "health_wait";
    case Phase::kCounting:
      return "counting";
    case Phase::kBackoff:
      return "backoff";
    case Phase::kAskingJob:
      return "asking_job";
    case Phase::kReleasing:
      return "releasing";
    case Phase::kWaitingFlag:
      return "waiting_flag";
    case Phase::kRequeueing:
      return "requeueing";
    case Phase::kDraining:
      return "draining";
    case Phase::kDone:
      return "done";
  }
  return "?";
}

JobPolicy::JobPolicy(JobSettings settings) : s_(std::move(settings)) {
  st_.backoff_s = s_.restart_backoff_s;
}

double JobPolicy::StopTimeout() const {
  const double room = s_.usr1_lead_s - kKillGraceS - kRequeueBudgetS - kLeadMarginS;
  return std::max(0.0, std::min(s_.stop_timeout_s, room));
}

Action JobPolicy::Log(const std::string& text) const {
  Action a = Act(Action::Kind::kLog);
  a.text = text;
  return a;
}

Action JobPolicy::Record(const std::string& event, const std::string& cause,
                         std::vector<Field> fields, bool lost_at_failure) const {
  Action a = Act(Action::Kind::kRecord);
  a.record.job = st_.job;
  a.record.restart_count = st_.restart_count;
  a.record.event = event;
  a.record.cause = cause;
  a.record.fields = std::move(fields);
  a.lost_at_failure = lost_at_failure;
  return a;
}

std::vector<std::string> JobPolicy::LiveNodes() const {
  if (!st_.spares) return st_.all_nodes;
  std::vector<std::string> live;
  for (const auto& n : st_.all_nodes) {
    if (Contains(st_.train_nodes, n) || Contains(st_.spare_nodes, n)) live.push_back(n);
  }
  return live;
}

Decision JobPolicy::On(const Observation& o) {
  using K = Observation::Kind;
  if (o.kind == K::kSignal) return OnSignal(o);
  switch (st_.phase) {
    case Phase::kStart:
      if (o.kind == K::kStarted) return Start(o);
      break;
    case Phase::kLease:
      if (o.kind == K::kLease) return Leased(o);
      break;
    case Phase::kPreflight:
      if (o.kind == K::kPreflightExited) return Preflight(o);
      break;
    case Phase::kLocalising:
      if (o.kind == K::kLocalised) return Localised(o);
      break;
    case Phase::kAgents:
      if (o.kind == K::kAgentsReady) return Agents(o);
      break;
    case Phase::kTraining:
      return Training(o);
    case Phase::kStopping:
      return Stopping(o);
    case Phase::kConfirming:
      if (o.kind == K::kConfirmed) return AfterConfirm(o);
      break;
    case Phase::kFindingDead:
      if (o.kind == K::kNodesInJob) return FoundDead(o);
      break;
    case Phase::kHealthPoll:
      return HealthPoll(o);
    case Phase::kProbing:
      if (o.kind == K::kHealth) return Probed(o);
      break;
    case Phase::kHealthWait:
      return HealthWait(o);
    case Phase::kCounting:
      if (o.kind == K::kFailedStartCounted) return Counted(o);
      break;
    case Phase::kBackoff:
      return Backoff(o);
    case Phase::kAskingJob:
      if (o.kind == K::kJobState) return JobStateKnown(o);
      break;
    case Phase::kReleasing:
    case Phase::kWaitingFlag:
    case Phase::kRequeueing:
    case Phase::kDraining:
      return Ending(o);
    case Phase::kDone:
      break;
  }
  return {"", {}};  // nothing to do (a tick, or an answer nobody waits for any more)
}

// ---- the start ------------------------------------------------------------------------------

Decision JobPolicy::Start(const Observation& o) {
  st_.job = o.job;
  st_.restart_count = o.restart_count;
  st_.resubmitted_from = o.resubmitted_from;
  st_.batch_host = o.batch_host;
  st_.all_nodes = o.nodes;
  if (!o.replaced_by.empty()) {
    st_.phase = Phase::kDone;
    return {"start.replaced",
            {Log("job " + st_.job + " was submitted again as job " + o.replaced_by +
                 " when its batch host died: this start of it ends here"),
             Record("superseded", "replaced", {records::Str("new_job", o.replaced_by)}), [] {
               Action a = Act(Action::Kind::kExit);
               a.code = 0;
               return a;
             }()}};
  }
  st_.spares = s_.spare_nodes != "0";
  st_.watch_batch_host = st_.spares || (s_.ckptd && s_.detect.on && st_.all_nodes.size() > 1);
  st_.nodelist = o.nodelist;
  st_.last_stop = o.last_stop;
  st_.resubmits = o.resubmits;
  st_.spare_list = o.spare_list;
  st_.phase = Phase::kLease;
  return {"start.lease", {Act(Action::Kind::kAcquireLease)}};
}

Decision JobPolicy::Leased(const Observation& o) {
  if (o.lease_ok) return AfterLease();
  st_.phase = Phase::kDone;
  Action exit = Act(Action::Kind::kExit);
  if (o.superseded) {
    exit.code = 0;
    return {"start.superseded",
            {Log("run " + s_.run_dir + " is trained by " + o.holder +
                 ", which took this job's place: this start of job " + st_.job + " ends here"),
             Record("superseded", "lease", {records::Str("holder", o.holder)}), exit}};
  }
  exit.code = 1;
  return {"start.lease_held",
          {Log("FAILED: run " + s_.run_dir + " is trained by " + o.holder +
               " (its run lease); two jobs must never train one run, so job " + st_.job +
               " does not start: cancel one of them (if the other is gone, this job takes the "
               "run over at its next start)"),
           Record("refused", "lease_held", {records::Str("holder", o.holder)}), exit}};
}

Decision JobPolicy::AfterLease() {
  std::vector<Action> acts;
  if (st_.watch_batch_host) acts.push_back(Act(Action::Kind::kCaptureSubmission));
  const std::string& nodelist = st_.nodelist;
  acts.push_back(Log("start: restart count " + std::to_string(st_.restart_count) + ", nodes " +
                     (nodelist.empty() ? "?" : nodelist) + " (" +
                     std::to_string(st_.all_nodes.size()) + "), " +
                     std::to_string(s_.ranks_per_node) + " ranks per node"));
  acts.push_back(Log("settings: config " + s_.config + ", data " + s_.data + ", run dir " +
                     s_.run_dir + ", ftrain " + s_.bin));
  std::string rule;
  if (st_.restart_count != 0) {
    rule = "start.requeued";
    acts.push_back(Record("requeued", st_.last_stop.empty() ? "node_failure" : st_.last_stop,
                          {records::Raw("@LOST@", "")}));
    acts.push_back(Log("this is a requeued start (cause: " +
                       (st_.last_stop.empty() ? std::string("node_failure") : st_.last_stop) +
                       "); resuming from the newest complete checkpoint"));
  } else if (!st_.resubmitted_from.empty()) {
    rule = "start.resubmitted";
    acts.push_back(Record("requeued", "node_failure",
                          {records::Str("resubmitted_from", st_.resubmitted_from),
                           records::Int("resubmits", st_.resubmits), records::Raw("@LOST@", "")}));
    acts.push_back(Log("this is job " + st_.resubmitted_from +
                       " submitted again (its batch host died; resubmission " +
                       std::to_string(st_.resubmits) + " of at most " +
                       std::to_string(s_.max_resubmits) +
                       "); resuming from the newest complete checkpoint"));
    Action cancel = Act(Action::Kind::kCancelPending);
    cancel.text = st_.resubmitted_from;
    acts.push_back(cancel);
  } else {
    rule = "start.first";
    acts.push_back(Record("started", "initial"));
    acts.push_back(Act(Action::Kind::kResetFailedStarts));
  }
  Action last = Act(Action::Kind::kWriteLastStop);
  last.text = "node_failure";  // what a start after a silent death assumes
  acts.push_back(last);
  if (st_.spares) {
    Decision bad = ChooseSpares(&acts);
    if (!bad.rule.empty()) return bad;
  }
  if (StopTimeout() < s_.stop_timeout_s) {
    acts.push_back(Log("WARNING: FTRAIN_STOP_TIMEOUT_S=" + Fmt(s_.stop_timeout_s) +
                       " does not fit the USR1 lead of " + Fmt(s_.usr1_lead_s) +
                       " s with the kill grace and the requeue: the ranks get " +
                       Fmt(StopTimeout()) + " s to stop"));
  }
  if (s_.preflight) {
    st_.phase = Phase::kPreflight;
    acts.push_back(Log("pre-flight: ftrain commcheck over all ranks"));
    acts.push_back(Act(Action::Kind::kRunPreflight));
    return {rule, acts};
  }
  Decision d = StartAgentsOrLaunch();
  acts.insert(acts.end(), d.actions.begin(), d.actions.end());
  return {rule + "+" + d.rule, acts};
}

// Spares: the last FTRAIN_SPARE_NODES nodes of the job that are not the batch host (or
// FTRAIN_SPARE_NODELIST); the rank of every node's slots in a host file (-m arbitrary), so
// that a spare takes exactly the ranks of the node it replaces and every survivor keeps its
// own. Returns a decision only when they do not fit (FAILED, exit 2).
Decision JobPolicy::ChooseSpares(std::vector<Action>* acts) {
  int want = -1;
  bool numeric = !s_.spare_nodes.empty() &&
                 s_.spare_nodes.find_first_not_of("0123456789") == std::string::npos &&
                 s_.spare_nodes.size() < 6;
  if (numeric) want = std::stoi(s_.spare_nodes);
  if (!st_.spare_list.empty()) {
    st_.spare_nodes = st_.spare_list;
  } else if (numeric) {
    for (auto it = st_.all_nodes.rbegin();
         it != st_.all_nodes.rend() && static_cast<int>(st_.spare_nodes.size()) < want; ++it) {
      if (*it != st_.batch_host) st_.spare_nodes.insert(st_.spare_nodes.begin(), *it);
    }
  }
  for (const auto& n : st_.all_nodes) {
    if (!Contains(st_.spare_nodes, n)) st_.train_nodes.push_back(n);
  }
  const bool fits = numeric && static_cast<int>(st_.spare_nodes.size()) == want &&
                    st_.train_nodes.size() + want == st_.all_nodes.size() &&
                    !st_.train_nodes.empty();
  if (!fits) {
    acts->push_back(
        Log("FAILED: FTRAIN_SPARE_NODES=" + s_.spare_nodes +
            " (FTRAIN_SPARE_NODELIST=" + (s_.spare_nodelist.empty() ? "unset" : s_.spare_nodelist) +
            ") does not fit the job's nodes " + Join(st_.all_nodes, " ") +
            ": submit with --nodes=N+S and name spares among them"));
    Action last = Act(Action::Kind::kWriteLastStop);
    last.text = "config_error";
    acts->push_back(last);
    acts->push_back(Record("failed", "config_error", {records::Str("why", "spare nodes")}));
    Action exit = Act(Action::Kind::kExit);
    exit.code = 2;
    acts->push_back(exit);
    st_.phase = Phase::kDone;
    return {"start.spares_invalid", *acts};
  }
  for (const auto& n : st_.train_nodes) {
    for (int i = 0; i < s_.ranks_per_node; ++i) st_.rank_hosts.push_back(n);
  }
  acts->push_back(Log("spares: " + std::to_string(st_.rank_hosts.size()) + " ranks on " +
                      Join(st_.train_nodes, " ") + ", spare " + Join(st_.spare_nodes, " ") +
                      "; a failed training node is replaced in this allocation only if the job "
                      "was submitted with --no-kill (else Slurm requeues it as without spares)"));
  return {"", {}};
}

// ---- pre-flight, agents, launch -------------------------------------------------------------

Decision JobPolicy::Preflight(const Observation& o) {
  // commcheck exits 3 when every collective was correct but rank 0 could not write the record;
  // srun may report a peer that --kill-on-bad-exit ended instead, so the runner also probes the
  // record's directory (o.record_error: the OS error of creating a file there).
  std::string record_error = o.record_error;
  if (o.rc != 0 && record_error.empty() && o.rc == 3) {
    record_error = "see rank 0's commcheck error line above";
  }
  if (o.rc != 0 && !record_error.empty()) {
    const std::string file = RunLayout(s_.run_dir).commcheck();
    return Fail("preflight.record_error",
                {Log("pre-flight: cannot write " + file + ": " + record_error +
                     "; not starting the training (make the run directory writable, or free "
                     "space on its file system)"),
                 Record("preflight_failed", "commcheck_record", {records::Str("file", file)})},
                1);
  }
  if (o.rc != 0) {
    if (st_.all_nodes.size() >= 2 && !st_.localised) {
      st_.localised = true;
      st_.phase = Phase::kLocalising;
      st_.localise_after = "preflight";
      Action loc = Act(Action::Kind::kLocalise);
      loc.nodes = st_.all_nodes;
      return {"preflight.localise",
              {Log("pre-flight commcheck FAILED (exit " + std::to_string(o.rc) +
                   "): checking the nodes alone and in pairs to find a bad one"),
               loc}};
    }
    return PreflightFailed();
  }
  Decision d = StartAgentsOrLaunch();
  d.rule = "preflight.passed+" + d.rule;
  return d;
}

Decision JobPolicy::PreflightFailed() {
  return Fail("preflight.failed",
              {Log("pre-flight commcheck FAILED: not starting the training (fix the nodes or the "
                   "network)"),
               Record("preflight_failed", "commcheck")},
              1);
}

Decision JobPolicy::StartAgentsOrLaunch() {
  if (!s_.ckptd) return Launch("agents.none");
  std::vector<Action> acts;
  if (s_.replication == "1" || (s_.replication == "auto" && st_.spares)) {
    acts.push_back(Act(Action::Kind::kMakeSecret));
    acts.push_back(
        Log("buddy replication on: each node's daemon copies its snapshots to the next node's"));
  }
  Action jn = Act(Action::Kind::kWriteJobNodes);
  jn.nodes = LiveNodes();
  acts.push_back(jn);
  Action start = Act(Action::Kind::kStartAgents);
  start.nodes = LiveNodes();
  acts.push_back(start);
  st_.phase = Phase::kAgents;
  return {"agents.start", acts};
}

Decision JobPolicy::Agents(const Observation& o) {
  st_.agents = true;
  std::vector<Action> acts{Log("ckptd: " + std::to_string(o.count) + " of " +
                               std::to_string(st_.all_nodes.size()) + " nodes serving")};
  if (st_.stop_requested) {
    Decision d = RequeueStopped("pre-flight or agent start-up");
    acts.insert(acts.end(), d.actions.begin(), d.actions.end());
    return {d.rule, acts};
  }
  Decision d = Launch("agents.ready");
  acts.insert(acts.end(), d.actions.begin(), d.actions.end());
  return {d.rule, acts};
}

Decision JobPolicy::Launch(std::string rule, std::vector<Action> before) {
  Action l = Act(Action::Kind::kLaunch);
  const size_t ranks = st_.spares ? st_.rank_hosts.size()
                                  : st_.all_nodes.size() * static_cast<size_t>(s_.ranks_per_node);
  if (st_.spares) {
    l.hosts = st_.rank_hosts;
    l.nodes = st_.train_nodes;
    // Slurm 22.05 may never end the failed step's record (its survivors exited before the
    // node was taken out): it keeps their CPUs, and a new step waits for them forever.
    l.overlap = st_.replacements > 0;
    before.push_back(Log("launching " + s_.bin + " train on " + std::to_string(ranks) +
                         " ranks: " + Join(st_.rank_hosts, " ")));
  } else {
    l.nodes = st_.all_nodes;
    before.push_back(Log("launching " + s_.bin + " train on " + std::to_string(ranks) + " ranks"));
  }
  const bool detecting = s_.detect.on && s_.ckptd && st_.agents;
  st_.watch =
      detecting ? (st_.spares ? st_.train_nodes : st_.all_nodes) : std::vector<std::string>{};
  l.watch = st_.watch;
  st_.detect_node.clear();
  st_.detect_fields.clear();
  st_.next_spare_check = -1;
  st_.phase = Phase::kTraining;
  before.push_back(l);
  return {std::move(rule), std::move(before)};
}

// ---- the training step ----------------------------------------------------------------------

Decision JobPolicy::Training(const Observation& o) {
  using K = Observation::Kind;
  switch (o.kind) {
    case K::kStepExited:
      return StepExited(o);
    case K::kNodeDeclared: {
      if (std::find(st_.declared.begin(), st_.declared.end(), o.node) != st_.declared.end()) {
        return {"", {}};  // declared already: the step is ending
      }
      st_.declared.push_back(o.node);
      st_.detect_node = o.node;
      st_.detect_fields = o.fields;
      std::vector<Action> acts{Log(o.detail), Act(Action::Kind::kEndStep)};
      // Released from the job, Slurm no longer waits for the node (best effort).
      if (st_.spares && !st_.spare_nodes.empty()) {
        Action rel = Act(Action::Kind::kRelease);
        rel.nodes = st_.declared;
        acts.push_back(rel);
      }
      return {"train.declared", acts};
    }
    case K::kHeartbeatLate:
      return {"train.heartbeat_late", {Log(o.detail), Record("heartbeat_late", "none", o.fields)}};
    case K::kTick:
      if (st_.next_spare_check < 0) st_.next_spare_check = o.now + s_.spare_check_s;
      if (st_.spares && !st_.spare_nodes.empty() && o.now >= st_.next_spare_check) {
        st_.next_spare_check = o.now + s_.spare_check_s;
        return {"train.spare_check", {Act(Action::Kind::kQueryNodesInJob)}};
      }
      return {"", {}};
    case K::kNodesInJob: {
      std::vector<Action> acts;
      if (o.known) DropLostSpares(o.nodes, "while the ranks train", &acts);
      return {acts.empty() ? "" : "train.spare_lost", acts};
    }
    default:
      return {"", {}};
  }
}

// Spares no longer in the job (Slurm took them out): dropped, recorded, the ring re-formed.
void JobPolicy::DropLostSpares(const std::vector<std::string>& in_job, const std::string& when,
                               std::vector<Action>* acts) {
  std::vector<std::string> left;
  bool lost = false;
  for (const auto& n : st_.spare_nodes) {
    if (Contains(in_job, n)) {
      left.push_back(n);
      continue;
    }
    acts->push_back(Log("spare node " + n + " is gone" + (when.empty() ? "" : " (" + when + ")")));
    acts->push_back(Record("spare_lost", "node_failure", {records::Str("node", n)}));
    lost = true;
  }
  st_.spare_nodes = left;
  if (lost) {
    acts->push_back(Log(std::to_string(left.size()) +
                        " spare(s) left: " + (left.empty() ? "none" : Join(left, " "))));
    Action jn = Act(Action::Kind::kWriteJobNodes);
    jn.nodes = LiveNodes();
    acts->push_back(jn);
  }
}

Decision JobPolicy::Stopping(const Observation& o) {
  using K = Observation::Kind;
  if (o.kind == K::kStepExited) return StepExited(o);
  if (o.kind != K::kTick) return {"", {}};
  if (st_.kill_at < 0 && o.now >= st_.stop_deadline) {
    st_.kill_at = o.now + kKillGraceS;
    Action term = Act(Action::Kind::kSignalStep);
    term.text = "TERM";
    return {"stop.deadline",
            {Log("the ranks did not stop within " + Fmt(StopTimeout()) + " s of " +
                 st_.stop_signal + ": ending the step"),
             term}};
  }
  if (st_.kill_at >= 0 && o.now >= st_.kill_at) {
    st_.kill_at = 1e300;  // once
    Action kill = Act(Action::Kind::kSignalStep);
    kill.text = "KILL";
    return {"stop.kill", {kill}};
  }
  return {"", {}};
}

// ---- signals --------------------------------------------------------------------------------

Decision JobPolicy::OnSignal(const Observation& o) {
  if (o.signal == "TERM" && st_.phase != Phase::kDone && !IsEnding() &&
      st_.phase != Phase::kAskingJob) {
    st_.asked_from = st_.phase;
    st_.phase = Phase::kAskingJob;
    return {"term.ask",
            {Log("TERM: asking slurmctld whether job " + st_.job +
                 " is cancelled, at its time limit or still running"),
             Act(Action::Kind::kQueryJobState)}};
  }
  if (o.signal != "USR1") return {"", {}};
  return StopRequest("USR1", o.now);
}

// A stop request (USR1, or a TERM while the job still runs) where the job is now.
Decision JobPolicy::StopRequest(const std::string& sig, double now) {
  switch (st_.phase) {
    case Phase::kTraining: {
      st_.stop_requested = true;
      st_.stop_signal = sig;
      st_.stop_deadline = now + StopTimeout();
      st_.kill_at = -1;
      st_.phase = Phase::kStopping;
      Action fwd = Act(Action::Kind::kSignalStep);
      fwd.text = sig;
      return {"train.usr1",
              {Log(sig + (sig == "USR1" ? " (time limit or preemption)" : " while the job runs") +
                   ": asking every rank to checkpoint and stop"),
               fwd}};
    }
    case Phase::kPreflight: {
      st_.stop_requested = true;
      Decision d = RequeueStopped("the pre-flight check");
      d.actions.insert(d.actions.begin(), Act(Action::Kind::kEndStep));
      return {"preflight.usr1", d.actions};
    }
    case Phase::kHealthPoll:
    case Phase::kHealthWait:
      st_.stop_requested = true;
      return RequeueStopped("the wait for a node failure");
    case Phase::kBackoff:
      st_.stop_requested = true;
      return RequeueStopped("the restart back-off");
    case Phase::kStart:
    case Phase::kLease:
    case Phase::kLocalising:
    case Phase::kAgents:
      // Handled once the agents answer (or right after the pre-flight's decision).
      st_.stop_requested = true;
      return {"agents.usr1", {}};
    default:
      return {"", {}};  // stopping or ending already
  }
}

bool JobPolicy::IsEnding() const {
  return st_.phase == Phase::kReleasing || st_.phase == Phase::kWaitingFlag ||
         st_.phase == Phase::kRequeueing || st_.phase == Phase::kDraining;
}

// A TERM: Slurm's own end of the job (KillWait follows), or a signal while it runs.
Decision JobPolicy::JobStateKnown(const Observation& o) {
  st_.phase = st_.asked_from;
  const bool time_limit = o.reason == "TimeLimit" || o.reason.find("Preempt") == 0 ||
                          o.job_state == "TIMEOUT" || o.job_state == "PREEMPTED";
  if (o.job_state == "RUNNING" && !time_limit) {
    Decision d = StopRequest("TERM", o.now);
    d.rule = "term.running" + (d.rule.empty() ? "" : "+" + d.rule);
    return d;
  }
  if (time_limit) {
    std::vector<Action> acts;
    if (st_.phase == Phase::kTraining || st_.phase == Phase::kStopping ||
        st_.phase == Phase::kPreflight) {
      Action fwd = Act(Action::Kind::kSignalStep);
      fwd.text = "TERM";
      acts.push_back(fwd);
    }
    st_.stop_requested = true;
    acts.push_back(Log("TERM at the time limit or a preemption (" + o.job_state + ", " + o.reason +
                       "): requeueing job " + st_.job +
                       " now, before Slurm's KillWait ends this script"));
    Action last = Act(Action::Kind::kWriteLastStop);
    last.text = "preempted";
    acts.push_back(last);
    acts.push_back(
        Record("stopped", "preempted", {records::Str("during", "the time limit (TERM)")}));
    return Requeue("term.time_limit", acts, {});
  }
  std::vector<Action> acts{Log("TERM: job " + st_.job + " is ending (" +
                               (o.job_state.empty() ? "?" : o.job_state) +
                               (o.reason.empty() ? "" : ", " + o.reason) +
                               "): not requeueing it (a cancelled job stays cancelled); stopping")};
  if (st_.phase == Phase::kTraining || st_.phase == Phase::kStopping ||
      st_.phase == Phase::kPreflight) {
    Action fwd = Act(Action::Kind::kSignalStep);
    fwd.text = "TERM";
    acts.push_back(fwd);
  }
  acts.push_back(Record("stopped", "cancelled"));
  return Fail("term.cancelled", acts, 0);
}

}  // namespace ftrain::orch
