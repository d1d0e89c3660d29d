// orch/watcher_machine.cc - the batch-host watcher's machine and rules as data, in the job
// controller's idiom (job_machine.cc, job_rules.cc): Routes() is the table of (state,
// observation, guard) -> handler that WatcherPolicy::On reads, first match wins; each handler
// names the rule of kWatcherRules it applied; `ftrain job --machine` prints the table after the
// job's and docs/design.md holds that print (tests/orch_docs_test.cc); every rule fires in some
// test of tests/orch_agent_policy_test.cc (the binary fails otherwise).
#include <algorithm>

#include "orch/agent_policy.h"

namespace ftrain::orch {

// clang-format off
const std::vector<Rule> kWatcherRules = {
  {"watch.late", "watching", "the batch host's heartbeat is late, its slurmd answers",
   "log, record heartbeat_late", ""},
  {"watch.declared", "watching", "the batch host declared dead or hung; first watcher",
   "log the evidence, claim the resubmission", ""},
  {"watch.declared_second", "watching", "the batch host declared dead or hung; second watcher",
   "log the evidence, claim 5 s later (the first acts first)", ""},
  {"watch.host_in_job", "watching", "with spares: Slurm's view has the batch host in the job",
   "count from zero again", ""},
  {"watch.host_absent_once", "watching", "with spares: the batch host left the job, first look",
   "count it; nothing yet (a blip convicts nobody)", ""},
  {"watch.host_left", "watching", "with spares: the batch host left the job, second look in a row",
   "requeue after the watcher's delay (0 s first, 5 s second)", ""},
  {"watch.second_claims", "delay", "the second watcher's 5 s passed", "claim the resubmission", ""},
  {"watch.query_restarts", "requeue delay", "the watcher's delay passed",
   "ask slurmctld the job's restart count", ""},
  {"watch.claimed", "claiming", "this watcher holds the claim", "take the run lease", ""},
  {"watch.claim_held", "claiming", "the other watcher holds the claim", "watch the claim", ""},
  {"watch.claim_taken_over", "waiting claim", "the claim's holder died before an outcome",
   "log, take the claim over", ""},
  {"watch.claim_outcome", "waiting claim", "the claim's holder recorded an outcome",
   "log, done", ""},
  {"watch.lease_refused", "leasing", "the run lease is held by another job",
   "log, stop watching the heartbeat (Slurm decides)", ""},
  {"watch.resubmits_spent", "leasing", "leased; FTRAIN_MAX_RESUBMITS reached",
   "record step_failed and not_resubmitted, log; Slurm requeues once it marks the host DOWN", ""},
  {"watch.leased", "leasing", "leased", "record step_failed with the evidence, submit the job again", ""},
  {"watch.submit_failed", "submitting", "sbatch failed",
   "log, record not_resubmitted, stop watching the heartbeat", ""},
  {"watch.new_job_cannot_run", "submitting", "the new job can never run (its pending reason)",
   "cancel the new job, keep the old one, log, record not_resubmitted", ""},
  {"watch.resubmitted", "submitting", "the new job can run",
   "mark the old job replaced, record resubmitted, notify and cancel the old job", ""},
  {"watch.restarts_unknown", "requeueing", "slurmctld did not answer the restart count",
   "look again later", ""},
  {"watch.requeued_already", "requeueing", "the restart count moved: someone requeued the job",
   "done", ""},
  {"watch.requeue", "requeueing", "the restart count is this start's",
   "record step_failed (detected by Slurm) once, log, requeue the job", ""},
  {"watch.requeue_done", "requeueing", "the requeue was accepted", "done", ""},
  {"watch.requeue_failed", "requeueing", "the requeue failed",
   "log, watch again (two looks before the next try)", ""},
};
// clang-format on

const std::vector<WatcherPolicy::Route>& WatcherPolicy::Routes() {
  using K = WatcherObs::Kind;
  using S = State;
  using W = WatcherPolicy;
  // clang-format off
  static const std::vector<Route> kRoutes = {
    {{S::kWatching},     K::kLate,       &W::HeartbeatWatched, "the heartbeat watched", &W::Late, "Late"},
    {{S::kWatching},     K::kDeclared,   &W::HeartbeatWatched, "the heartbeat watched", &W::Declared, "Declared"},
    {{S::kWatching},     K::kHostView,   &W::SparesAndKnown, "spares; Slurm answered", &W::HostView, "HostView"},
    {{S::kDelay},        K::kTick,       &W::DelayOver, "its delay passed", &W::DelayTick, "DelayTick"},
    {{S::kRequeueDelay}, K::kTick,       &W::DelayOver, "its delay passed", &W::RequeueDelayTick, "RequeueDelayTick"},
    {{S::kClaiming},     K::kClaim,      nullptr, "", &W::Claimed, "Claimed"},
    {{S::kWaitingClaim}, K::kClaimWatch, nullptr, "", &W::ClaimWatched, "ClaimWatched"},
    {{S::kLeasing},      K::kLease,      nullptr, "", &W::Leased, "Leased"},
    {{S::kSubmitting},   K::kSubmitted,  nullptr, "", &W::Submitted, "Submitted"},
    {{S::kRequeueing},   K::kRestarts,   nullptr, "", &W::Restarts, "Restarts"},
    {{S::kRequeueing},   K::kRequeued,   nullptr, "", &W::Requeued, "Requeued"},
  };
  // clang-format on
  return kRoutes;
}

WatcherDecision WatcherPolicy::On(const WatcherObs& o) {
  if (rank_ == 0 && state_ == State::kWatching) return {};  // not a watcher (now)
  for (const Route& r : Routes()) {
    if (r.kind != o.kind) continue;
    if (std::find(r.states.begin(), r.states.end(), state_) == r.states.end()) continue;
    if (r.when != nullptr && !(this->*r.when)(o)) continue;
    return (this->*r.handle)(o);
  }
  return {};  // nothing to do (a tick, or an answer nobody waits for any more)
}

std::vector<MachineRow> WatcherPolicy::Machine() {
  std::vector<MachineRow> rows;
  for (const Route& r : Routes()) {
    MachineRow m;
    for (State s : r.states) m.phases += std::string(m.phases.empty() ? "" : ", ") + StateName(s);
    m.observation = WatcherKindName(r.kind);
    m.when = r.when_text;
    m.handler = r.handler;
    rows.push_back(std::move(m));
  }
  return rows;
}

const char* WatcherPolicy::StateName(State s) {
  switch (s) {
    case State::kWatching:
      return "watching";
    case State::kDelay:
      return "delay";
    case State::kClaiming:
      return "claiming";
    case State::kWaitingClaim:
      return "waiting_claim";
    case State::kLeasing:
      return "leasing";
    case State::kSubmitting:
      return "submitting";
    case State::kRequeueDelay:
      return "requeue_delay";
    case State::kRequeueing:
      return "requeueing";
    case State::kDone:
      return "done";
  }
  return "?";
}

const char* WatcherKindName(WatcherObs::Kind k) {
  using K = WatcherObs::Kind;
  switch (k) {
    case K::kTick:
      return "tick";
    case K::kHostView:
      return "host_view";
    case K::kDeclared:
      return "declared";
    case K::kLate:
      return "late";
    case K::kClaim:
      return "claim";
    case K::kClaimWatch:
      return "claim_watch";
    case K::kLease:
      return "lease";
    case K::kSubmitted:
      return "submitted";
    case K::kRestarts:
      return "restarts";
    case K::kRequeued:
      return "requeued";
  }
  return "?";
}

const char* WatcherKindName(WatcherAct::Kind k) {
  using K = WatcherAct::Kind;
  switch (k) {
    case K::kLog:
      return "log";
    case K::kRecord:
      return "record";
    case K::kClaim:
      return "claim";
    case K::kWatchClaim:
      return "watch_claim";
    case K::kTakeOverClaim:
      return "take_over_claim";
    case K::kTakeLease:
      return "take_lease";
    case K::kSubmit:
      return "submit";
    case K::kCancelNewJob:
      return "cancel_new_job";
    case K::kMarkReplaced:
      return "mark_replaced";
    case K::kNotifyAndCancel:
      return "notify_and_cancel";
    case K::kQueryRestarts:
      return "query_restarts";
    case K::kRequeue:
      return "requeue";
  }
  return "?";
}

}  // namespace ftrain::orch
