// orch/job_policy.cc - JobPolicy, part 2: the records' and actions' constructors, the launch
// and the training step (detection, spare checks); the dispatch is job_machine.cc's table. The
// start is in job_policy_start.cc, stop requests and TERM in job_policy_stop.cc, a step's end
// and the job's end in job_policy_end.cc. Each decision names its rule in kRules
// (job_rules.cc).
#include "orch/job_policy.h"

#include "orch/job_policy_util.h"

namespace ftrain::orch {

using policy_util::Act;
using policy_util::Contains;
using policy_util::Fmt;
using policy_util::Join;
using policy_util::LastStop;
using policy_util::WithNodes;
using records::Field;

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
    case Phase::kLeaseRetry:
      return "lease_retry";
    case Phase::kAskingJob:
      return "asking_job";
    case Phase::kReleasing:
      return "releasing";
    case Phase::kWaitingFlag:
      return "waiting_flag";
    case Phase::kCheckingRoom:
      return "checking_room";
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
  st_.storage_backoff_s = kStorageBackoffS;
}

double JobPolicy::StopTimeout(double lead_s) const {
  const double room = lead_s - kKillGraceS - kRequeueBudgetS - kLeadMarginS;
  return std::max(0.0, std::min(s_.stop_timeout_s, room));
}

StopLead JobPolicy::StopLeadNow() const {
  return DeriveStopLead(s_.usr1_lead_s, s_.usr1_lead_set, st_.job_end, st_.wall);
}

// The stop paths (USR1, TERM, ranks that stopped with 75) race the time limit: the 15 s that
// StopTimeout leaves them. Every other requeue (a node failure, rank failures, a quarantine,
// the run lease) has FTRAIN_REQUEUE_RETRY_S: one verified try can take 30 s, and a slurmctld
// failover longer.
double JobPolicy::RequeueBudget() const {
  if (st_.stop_requested || st_.rc == kExitRequeue) return kRequeueBudgetS;
  return std::max(kRequeueBudgetS, s_.requeue_retry_s);
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
    if (Contains(st_.train_nodes, n) || Contains(st_.spare_nodes, n) ||
        Contains(st_.grow_nodes, n)) {
      live.push_back(n);
    }
  }
  return live;
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
    l.overlap = st_.replacements > 0 || st_.shrinks > 0;
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

// A node declared dead or hung by the detector: the step ends; its ranks go to a spare or the
// run shrinks without it (FTRAIN_ELASTIC), or the job is requeued, once the step has ended.
Decision JobPolicy::NodeDeclared(const Observation& o) {
  if (std::find(st_.declared.begin(), st_.declared.end(), o.node) != st_.declared.end()) {
    return {"", {}};  // declared already: the step is ending
  }
  st_.declared.push_back(o.node);
  st_.detect_node = o.node;
  st_.detect_fields = o.fields;
  std::vector<Action> acts{Log(o.detail), Act(Action::Kind::kEndStep)};
  // Released from the job, Slurm no longer waits for the node (best effort): when a spare
  // takes its ranks or the run shrinks without it (FTRAIN_ELASTIC).
  const bool shrinks = s_.elastic && st_.train_nodes.size() > 1 &&
                       st_.train_nodes.size() - 1 >= static_cast<size_t>(s_.elastic_min_nodes);
  if (st_.spares && (!st_.spare_nodes.empty() || shrinks)) {
    Action rel = Act(Action::Kind::kRelease);
    rel.nodes = st_.declared;
    acts.push_back(rel);
  }
  return {"train.declared", acts};
}

Decision JobPolicy::HeartbeatLate(const Observation& o) {
  return {"train.heartbeat_late", {Log(o.detail), Record("heartbeat_late", "none", o.fields)}};
}

// While the step trains: ask to grow back (FTRAIN_ELASTIC), or check that the spares are
// still in the job every FTRAIN_SPARE_CHECK_S.
Decision JobPolicy::TrainingTick(const Observation& o) {
  if (Decision g = GrowAsk(o); !g.rule.empty()) return g;
  if (st_.next_spare_check < 0) st_.next_spare_check = o.now + s_.spare_check_s;
  if (st_.spares && !st_.spare_nodes.empty() && o.now >= st_.next_spare_check) {
    st_.next_spare_check = o.now + s_.spare_check_s;
    return {"train.spare_check", {Act(Action::Kind::kQueryNodesInJob)}};
  }
  return {"", {}};
}

Decision JobPolicy::SparesInJob(const Observation& o) {
  std::vector<Action> acts;
  if (o.known) DropLostSpares(o.nodes, "while the ranks train", &acts);
  return {acts.empty() ? "" : "train.spare_lost", acts};
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

// ---- the run lease at a launch --------------------------------------------------------------

// The runner could not renew the run lease for a launch (an I/O error: a lease provably taken
// over ends the job in the runner). No step runs: try again every few seconds until
// FTRAIN_LEASE_RETRY_S, then requeue (a requeue that does not land ends FAILED); never an
// exit 0, which would end the job COMPLETED with the work not done.
Decision JobPolicy::LeaseRenewFailed(const Observation& o) {
  if (st_.lease_retry_until < 0) st_.lease_retry_until = o.now + s_.lease_retry_s;
  if (o.now >= st_.lease_retry_until) {
    st_.lease_retry_until = -1;
    return Requeue(
        "lease.renew_failed",
        {Log("cannot renew the run lease for " + Fmt(s_.lease_retry_s) +
             " s (FTRAIN_LEASE_RETRY_S): " + o.detail + "; requeueing job " + st_.job +
             " (the ranks never train without it)"),
         LastStop("lease_io"), Record("step_failed", "lease_io", {records::Str("why", o.detail)})},
        {});
  }
  st_.phase = Phase::kLeaseRetry;
  st_.wait_until = o.now + kLeaseRetryEveryS;
  return {"lease.renew_retry",
          {Log("cannot renew the run lease (" + o.detail + "): the ranks do not start without " +
               "it; trying again in " + Fmt(kLeaseRetryEveryS) + " s, then requeueing after " +
               Fmt(std::max(0.0, st_.lease_retry_until - o.now)) + " s")}};
}

Decision JobPolicy::LeaseRetry(const Observation& o) {
  if (o.now < st_.wait_until) return {"", {}};  // a tick (the machine routes only ticks here)
  return Launch("lease.relaunch");
}

}  // namespace ftrain::orch
