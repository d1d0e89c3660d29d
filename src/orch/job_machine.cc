// orch/job_machine.cc - the job controller's machine as data: Routes() is the table of (phase,
// observation, guard) -> handler that JobPolicy::On reads, first match wins. A new Slurm
// question is one Observation::Kind, one row here and its handler; `ftrain job --machine`
// prints the table and docs/design.md holds that print (tests/orch_docs_test.cc). The rule ids
// the handlers return are kRules' (job_rules.cc).
#include <algorithm>

#include "orch/job_policy.h"

namespace ftrain::orch {

const char* LocaliseAfterName(LocaliseAfter a) {
  return a == LocaliseAfter::kPreflight ? "preflight" : "rank_failure";
}

const std::vector<JobPolicy::Route>& JobPolicy::Routes() {
  using K = Observation::Kind;
  using P = Phase;
  using J = JobPolicy;
  // Where the job is on its way to a requeue, before it is issued; and the whole end.
  const std::vector<Phase> before_requeue{P::kReleasing, P::kWaitingFlag, P::kCheckingRoom};
  const std::vector<Phase> ending{P::kReleasing, P::kWaitingFlag, P::kRequeueing, P::kDraining};
  // Where a TERM asks slurmctld what it means: everywhere the job runs or decides.
  const std::vector<Phase> term_asks{P::kStart,       P::kLease,      P::kPreflight, P::kLocalising,
                                     P::kAgents,      P::kTraining,   P::kStopping,  P::kConfirming,
                                     P::kFindingDead, P::kHealthPoll, P::kProbing,   P::kHealthWait,
                                     P::kCounting,    P::kBackoff,    P::kLeaseRetry};
  std::vector<Phase> room_or_ending = ending;
  room_or_ending.insert(room_or_ending.begin(), P::kCheckingRoom);
  // clang-format off
  static const std::vector<Route> kRoutes = {
    {before_requeue,          K::kSignal,             &J::IsTerm, "TERM", &J::TermWhileEnding, "TermWhileEnding"},
    {term_asks,               K::kSignal,             &J::IsTerm, "TERM", &J::TermAsk, "TermAsk"},
    {{},                      K::kSignal,             &J::IsUsr1, "USR1", &J::Usr1, "Usr1"},
    {{P::kStart},             K::kStarted,            nullptr, "", &J::Start, "Start"},
    {{P::kLease},             K::kLease,              nullptr, "", &J::Leased, "Leased"},
    {{P::kPreflight},         K::kPreflightExited,    nullptr, "", &J::Preflight, "Preflight"},
    {{P::kLocalising},        K::kLocalised,          nullptr, "", &J::Localised, "Localised"},
    {{P::kAgents},            K::kAgentsReady,        nullptr, "", &J::Agents, "Agents"},
    {{P::kTraining},          K::kLeaseRenewFailed,   nullptr, "", &J::LeaseRenewFailed, "LeaseRenewFailed"},
    {{P::kTraining, P::kStopping}, K::kStepExited,    nullptr, "", &J::StepExited, "StepExited"},
    {{P::kTraining},          K::kNodeDeclared,       nullptr, "", &J::NodeDeclared, "NodeDeclared"},
    {{P::kTraining},          K::kHeartbeatLate,      nullptr, "", &J::HeartbeatLate, "HeartbeatLate"},
    {{P::kTraining},          K::kExpanded,           nullptr, "", &J::GrowAllocated, "GrowAllocated"},
    {{P::kTraining},          K::kAgentsReady,        nullptr, "", &J::GrowAgentsReady, "GrowAgentsReady"},
    {{P::kTraining},          K::kTick,               nullptr, "", &J::TrainingTick, "TrainingTick"},
    {{P::kTraining},          K::kNodesInJob,         nullptr, "", &J::SparesInJob, "SparesInJob"},
    {{P::kStopping},          K::kTick,               nullptr, "", &J::StopTick, "StopTick"},
    {{P::kConfirming},        K::kConfirmed,          nullptr, "", &J::AfterConfirm, "AfterConfirm"},
    {{P::kFindingDead},       K::kNodesInJob,         nullptr, "", &J::FoundDead, "FoundDead"},
    {{P::kHealthPoll},        K::kTick,               nullptr, "", &J::HealthPollTick, "HealthPollTick"},
    {{P::kHealthPoll},        K::kNodesInJob,         nullptr, "", &J::HealthPolled, "HealthPolled"},
    {{P::kProbing},           K::kHealth,             nullptr, "", &J::Probed, "Probed"},
    {{P::kHealthWait},        K::kTick,               nullptr, "", &J::HealthWait, "HealthWait"},
    {{P::kCounting},          K::kFailedStartCounted, nullptr, "", &J::Counted, "Counted"},
    {{P::kBackoff},           K::kTick,               nullptr, "", &J::Backoff, "Backoff"},
    {{P::kLeaseRetry},        K::kTick,               nullptr, "", &J::LeaseRetry, "LeaseRetry"},
    {{P::kAskingJob},         K::kJobState,           nullptr, "", &J::JobStateKnown, "JobStateKnown"},
    {{P::kAskingJob},         K::kStepExited,         nullptr, "", &J::HoldExit, "HoldExit"},
    {{P::kAskingJob},         K::kTick,               nullptr, "", &J::TermAskTick, "TermAskTick"},
    {room_or_ending,          K::kJobState,           &J::TermAsked, "a TERM asked", &J::EndingJobState, "EndingJobState"},
    {{P::kCheckingRoom},      K::kTick,               nullptr, "", &J::RoomAskAgain, "RoomAskAgain"},
    {{P::kCheckingRoom},      K::kRoom,               nullptr, "", &J::RoomAnswered, "RoomAnswered"},
    {ending,                  K::kRequeued,           &J::RefusedAsCancelled, "refused: cancelled", &J::RequeueRefusedCancelled, "RequeueRefusedCancelled"},
    {{P::kReleasing},         K::kReleased,           nullptr, "", &J::Released, "Released"},
    {{P::kWaitingFlag},       K::kNotRespondingWaited, nullptr, "", &J::FlagWaited, "FlagWaited"},
    {{P::kRequeueing},        K::kRequeued,           nullptr, "", &J::Requeued, "Requeued"},
    {{P::kDraining},          K::kAgentsStopped,      nullptr, "", &J::Drained, "Drained"},
  };
  // clang-format on
  return kRoutes;
}

Decision JobPolicy::On(const Observation& o) {
  if (o.wall > 0) st_.wall = o.wall;
  for (const Route& r : Routes()) {
    if (r.kind != o.kind) continue;
    if (!r.phases.empty() &&
        std::find(r.phases.begin(), r.phases.end(), st_.phase) == r.phases.end()) {
      continue;
    }
    if (r.when != nullptr && !(this->*r.when)(o)) continue;
    return (this->*r.handle)(o);
  }
  return {"", {}};  // nothing to do (a tick, or an answer nobody waits for any more)
}

std::vector<MachineRow> JobPolicy::Machine() {
  std::vector<MachineRow> rows;
  for (const Route& r : Routes()) {
    MachineRow m;
    for (Phase p : r.phases) m.phases += std::string(m.phases.empty() ? "" : ", ") + PhaseName(p);
    if (m.phases.empty()) m.phases = "every phase";
    m.observation = KindName(r.kind);
    m.when = r.when_text;
    m.handler = r.handler;
    rows.push_back(std::move(m));
  }
  return rows;
}

}  // namespace ftrain::orch
