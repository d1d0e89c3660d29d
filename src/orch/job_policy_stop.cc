// orch/job_policy_stop.cc - JobPolicy, part 3: stop requests (USR1, or a TERM while the job
// still runs) wherever they find the job, the stop deadline, and a TERM's question to slurmctld
// (time limit: requeue at once; cancelled: never requeue).
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
