// orch/job_types.cc - actions and observations in words: what `ftrain job --dry-run` prints
// and what the unit tests compare.
#include "orch/job_types.h"

#include <cstdio>

namespace ftrain::orch {
namespace {

std::string List(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + v[i];
  return s + "]";
}

std::string Secs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string Fields(const std::vector<records::Field>& f) {
  std::string s;
  for (const auto& x : f) s += "," + x.key + "=" + x.json;
  return s.empty() ? s : " {" + s.substr(1) + "}";
}

}  // namespace

const char* KindName(Action::Kind k) {
  using K = Action::Kind;
  switch (k) {
    case K::kLog:
      return "log";
    case K::kRecord:
      return "record";
    case K::kWriteLastStop:
      return "last_stop";
    case K::kResetFailedStarts:
      return "reset_failed_starts";
    case K::kCountFailedStart:
      return "count_failed_start";
    case K::kWriteNodeRequeues:
      return "write_node_requeues";
    case K::kAcquireLease:
      return "acquire_lease";
    case K::kCaptureSubmission:
      return "capture_submission";
    case K::kCancelPending:
      return "cancel_pending";
    case K::kRunPreflight:
      return "run_preflight";
    case K::kLocalise:
      return "localise";
    case K::kMakeSecret:
      return "make_secret";
    case K::kWriteJobNodes:
      return "write_job_nodes";
    case K::kStartAgents:
      return "start_agents";
    case K::kLaunch:
      return "launch";
    case K::kSignalStep:
      return "signal_step";
    case K::kEndStep:
      return "end_step";
    case K::kQueryNodesInJob:
      return "query_nodes_in_job";
    case K::kQueryJobState:
      return "query_job_state";
    case K::kProbeHealth:
      return "probe_health";
    case K::kConfirmDeath:
      return "confirm_death";
    case K::kRelease:
      return "release";
    case K::kWaitNotResponding:
      return "wait_not_responding";
    case K::kSignalAgents:
      return "signal_agents";
    case K::kRequeue:
      return "requeue";
    case K::kExclude:
      return "exclude";
    case K::kWaitAgents:
      return "wait_agents";
    case K::kStopAgents:
      return "stop_agents";
    case K::kQueryRoom:
      return "query_room";
    case K::kExpand:
      return "expand";
    case K::kQuarantine:
      return "quarantine";
    case K::kExit:
      return "exit";
  }
  return "?";
}

namespace {

// What follows an action's name in ToText ("" or " ...").
std::string Details(const Action& a) {
  using K = Action::Kind;
  switch (a.kind) {
    case K::kLog:
    case K::kWriteLastStop:
    case K::kWriteNodeRequeues:
    case K::kCancelPending:
    case K::kSignalStep:
    case K::kSignalAgents:
      return " " + a.text;
    case K::kRecord:
      return " " + a.record.event + "/" + a.record.cause + Fields(a.record.fields) +
             (a.lost_at_failure ? " (lost work at the failure)" : "");
    case K::kLocalise:
    case K::kWriteJobNodes:
    case K::kStartAgents:
    case K::kProbeHealth:
    case K::kConfirmDeath:
    case K::kRelease:
      return " " + List(a.nodes);
    case K::kLaunch:
      return " nodes=" + List(a.nodes) + (a.hosts.empty() ? "" : " hosts=" + List(a.hosts)) +
             (a.overlap ? " overlap" : "") + " watch=" + List(a.watch);
    case K::kQueryJobState:
      return a.seconds > 0 ? " within=" + Secs(a.seconds) + "s" : "";
    case K::kWaitNotResponding:
      return " " + List(a.nodes) + " " + Secs(a.seconds) + "s";
    case K::kRequeue:
      return " budget=" + Secs(a.seconds) + "s" + (a.text.empty() ? "" : " " + a.text);
    case K::kExclude:
      return " dead=" + List(a.nodes) + " faulty=" + List(a.faulty) +
             (a.released ? " released" : "") +
             (a.num_nodes > 0 ? " num_nodes=" + std::to_string(a.num_nodes) +
                                    " train_count=" + std::to_string(a.train_count)
                              : "");
    case K::kWaitAgents:
      return " " + Secs(a.seconds) + "s";
    case K::kExpand:
      return " num_nodes=" + std::to_string(a.num_nodes) + " exclude=" + List(a.nodes) +
             (a.probe.empty() ? "" : " probe=" + List(a.probe));
    case K::kQuarantine:
      return " " + List(a.nodes) + " cause=" + a.text + Fields(a.record.fields);
    case K::kExit:
      return " " + std::to_string(a.code);
    default:
      return "";
  }
}

}  // namespace

std::string ToText(const Action& a) { return KindName(a.kind) + Details(a); }

const char* KindName(Observation::Kind k) {
  using K = Observation::Kind;
  switch (k) {
    case K::kStarted:
      return "started";
    case K::kLease:
      return "lease";
    case K::kPreflightExited:
      return "preflight_exited";
    case K::kLocalised:
      return "localised";
    case K::kAgentsReady:
      return "agents_ready";
    case K::kStepExited:
      return "step_exited";
    case K::kSignal:
      return "signal";
    case K::kTick:
      return "tick";
    case K::kNodesInJob:
      return "nodes_in_job";
    case K::kJobState:
      return "job_state";
    case K::kNodeDeclared:
      return "node_declared";
    case K::kHeartbeatLate:
      return "heartbeat_late";
    case K::kConfirmed:
      return "confirmed";
    case K::kHealth:
      return "health";
    case K::kFailedStartCounted:
      return "failed_start_counted";
    case K::kReleased:
      return "released";
    case K::kNotRespondingWaited:
      return "not_responding_waited";
    case K::kRoom:
      return "room";
    case K::kRequeued:
      return "requeued";
    case K::kAgentsStopped:
      return "agents_stopped";
    case K::kLeaseRenewFailed:
      return "lease_renew_failed";
    case K::kExpanded:
      return "expanded";
  }
  return "?";
}

std::string ToText(const Observation& o) {
  using K = Observation::Kind;
  std::string s = "t=" + Secs(o.now) + " " + KindName(o.kind);
  switch (o.kind) {
    case K::kStarted:
      s += " job=" + o.job + " restart_count=" + std::to_string(o.restart_count) +
           " nodes=" + List(o.nodes);
      break;
    case K::kLease:
      s += o.lease_ok ? " ok epoch=" + std::to_string(o.epoch) : " held by " + o.holder;
      break;
    case K::kPreflightExited:
      s += " rc=" + std::to_string(o.rc);
      break;
    case K::kStepExited:
      s += " rc=" + std::to_string(o.rc);
      if (!o.quarantine.empty()) s += " quarantine=" + std::to_string(o.quarantine.size());
      if (!o.hangs.empty()) s += " hangs=" + std::to_string(o.hangs.size());
      if (!o.node_faults.empty()) s += " node_faults=" + std::to_string(o.node_faults.size());
      if (o.rollbacks != 0) s += " rollbacks=" + std::to_string(o.rollbacks);
      if (!o.checkpoint.empty()) s += " checkpoint=" + o.checkpoint;
      break;
    case K::kSignal:
      s += " " + o.signal;
      break;
    case K::kNodesInJob:
    case K::kRoom:
      s += o.known ? " " + List(o.nodes) : " unknown";
      break;
    case K::kLocalised:
      s += " bad=" + List(o.nodes);
      break;
    case K::kAgentsReady:
      s += " count=" + std::to_string(o.count);
      break;
    case K::kFailedStartCounted:
      s += " count=" + std::to_string(o.count) + " checkpoint=" + o.checkpoint;
      break;
    case K::kJobState:
      s += " " + o.job_state + " reason=" + o.reason;
      break;
    case K::kNodeDeclared:
    case K::kHeartbeatLate:
    case K::kConfirmed:
      s += " node=" + (o.node.empty() ? std::string("-") : o.node);
      break;
    case K::kHealth:
    case K::kReleased:
    case K::kRequeued:
      s += o.ok ? " ok" : " failed";
      break;
    case K::kLeaseRenewFailed:
      if (!o.detail.empty()) s += " " + o.detail;
      break;
    case K::kExpanded:
      s += o.ok ? " " + List(o.nodes) : " failed: " + o.detail;
      break;
    default:
      break;
  }
  return s;
}

}  // namespace ftrain::orch
