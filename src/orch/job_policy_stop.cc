// orch/job_policy_stop.cc - JobPolicy, part 3: stop requests (USR1, or a TERM while the job
// still runs) wherever they find the job, the stop deadline, and a TERM's question to slurmctld
// (time limit: requeue at once; cancelled: never requeue; no answer: asked again until
// FTRAIN_TERM_ASK_S, then requeued as at the time limit, never an exit 0).
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

// USR1/TERM forwarded: the ranks' stop deadline, then TERM, then KILL after the grace.
Decision JobPolicy::StopTick(const Observation& o) {
  if (st_.kill_at < 0 && o.now >= st_.stop_deadline) {
    st_.kill_at = o.now + kKillGraceS;
    Action term = Act(Action::Kind::kSignalStep);
    term.text = "TERM";
    return {"stop.deadline",
            {Log("the ranks did not stop within " + Fmt(st_.stop_budget_s) + " s of " +
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

TermAnswer ClassifyTermAnswer(const std::string& job_state, const std::string& reason) {
  if (job_state.empty()) return TermAnswer::kUnknown;  // slurmctld did not answer
  if (reason == "TimeLimit" || reason.rfind("Preempt", 0) == 0 || job_state == "TIMEOUT" ||
      job_state == "PREEMPTED") {
    return TermAnswer::kTimeLimit;
  }
  if (job_state == "RUNNING") return TermAnswer::kRunning;
  if (job_state == "CANCELLED" || job_state == "COMPLETING") return TermAnswer::kCancelled;
  return TermAnswer::kUnknown;
}

// A TERM while the job runs (not on its way to a requeue: TermWhileEnding): Slurm's own end
// of the job (a cancel, the time limit) or an operator's signal. slurmctld is asked which.
Decision JobPolicy::TermAsk(const Observation& o) {
  st_.asked_from = st_.phase;
  st_.phase = Phase::kAskingJob;
  st_.term_at = o.now;
  st_.next_ask = o.now + kTermAskEveryS;
  st_.term_unanswered = false;
  st_.term_stop_sent = false;
  st_.held_exit.reset();
  Action ask = Act(Action::Kind::kQueryJobState);
  ask.seconds = kTermAskBoundS;
  return {"term.ask",
          {Log("TERM: asking slurmctld whether job " + st_.job +
               " is cancelled, at its time limit or still running"),
           ask}};
}

Decision JobPolicy::Usr1(const Observation& o) { return StopRequest("USR1", o.now); }

// A stop request (USR1, or a TERM while the job still runs) where the job is now.
Decision JobPolicy::StopRequest(const std::string& sig, double now) {
  switch (st_.phase) {
    case Phase::kTraining: {
      st_.stop_requested = true;
      st_.stop_signal = sig;
      const StopLead lead = StopLeadNow();
      st_.stop_budget_s = StopTimeout(lead.lead_s);
      st_.stop_deadline = now + st_.stop_budget_s;
      st_.kill_at = -1;
      st_.phase = Phase::kStopping;
      Action fwd = Act(Action::Kind::kSignalStep);
      fwd.text = sig;
      return {"train.usr1",
              {Log(sig + (sig == "USR1" ? " (time limit or preemption)" : " while the job runs") +
                   ": asking every rank to checkpoint and stop within " + Fmt(st_.stop_budget_s) +
                   " s (" + lead.source + ")"),
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
    case Phase::kLeaseRetry:
      st_.stop_requested = true;
      return RequeueStopped("the run lease's retry");
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

// A TERM's question is open: a step's exit is held until the answer says what it means.
Decision JobPolicy::HoldExit(const Observation& o) {
  st_.held_exit = o;
  return {"", {}};
}

// A TERM's question is open: ask again while slurmctld is silent, until FTRAIN_TERM_ASK_S.
Decision JobPolicy::TermAskTick(const Observation& o) {
  if (o.now >= st_.term_at + s_.term_ask_s) return TermUnanswered(o.now);
  if (!st_.term_unanswered || o.now < st_.next_ask) return {"", {}};
  st_.next_ask = o.now + kTermAskEveryS;
  Action ask = Act(Action::Kind::kQueryJobState);
  ask.seconds = std::max(1.0, std::min(kTermAskBoundS, st_.term_at + s_.term_ask_s - o.now));
  return {"term.ask_again", {ask}};
}

// A TERM: Slurm's own end of the job (KillWait follows), or a signal while it runs.
Decision JobPolicy::JobStateKnown(const Observation& o) {
  const TermAnswer answer = ClassifyTermAnswer(o.job_state, o.reason);
  if (answer == TermAnswer::kUnknown) {
    if (o.now >= st_.term_at + s_.term_ask_s) return TermUnanswered(o.now);
    if (st_.term_unanswered) return {"", {}};  // asked again on a tick
    st_.term_unanswered = true;
    std::vector<Action> acts{
        Log("TERM: slurmctld does not say whether job " + st_.job + " is cancelled (" +
            (o.job_state.empty() ? "no answer" : o.job_state + ", " + o.reason) +
            "): asking again every " + Fmt(kTermAskEveryS) + " s for up to " + Fmt(s_.term_ask_s) +
            " s (FTRAIN_TERM_ASK_S); an unknown answer never ends the job as finished")};
    if (st_.asked_from == Phase::kTraining) {
      // USR1, not TERM: the ranks start their stop checkpoint now, whatever the answer will be.
      // A TERM would cost them that checkpoint where Slurm already sent its own (a cancel, the
      // time limit): srun turns a TERM it gets into SIGKILL of its tasks, and the trainer
      // exits at once on a second TERM.
      st_.stop_requested = true;
      st_.stop_signal = "TERM";
      st_.stop_budget_s = StopTimeout(StopLeadNow().lead_s);
      st_.stop_deadline = o.now + st_.stop_budget_s;
      st_.kill_at = -1;
      st_.asked_from = Phase::kStopping;
      st_.term_stop_sent = true;
      Action fwd = Act(Action::Kind::kSignalStep);
      fwd.text = "USR1";
      acts.push_back(Log("asking every rank to checkpoint and stop meanwhile (USR1)"));
      acts.push_back(fwd);
    }
    return {"term.unknown", acts};
  }
  st_.phase = st_.asked_from;
  std::optional<Observation> held = std::move(st_.held_exit);
  st_.held_exit.reset();
  if (answer == TermAnswer::kRunning) {
    if (held) {
      // The step ended while slurmctld was asked: it stopped (or failed) on its own.
      st_.stop_requested = true;
      Decision d = StepExited(*held);
      d.rule = "term.running" + (d.rule.empty() ? "" : "+" + d.rule);
      return d;
    }
    Decision d = StopRequest("TERM", o.now);
    d.rule = "term.running" + (d.rule.empty() ? "" : "+" + d.rule);
    return d;
  }
  if (answer == TermAnswer::kTimeLimit) {
    if (held && held->rc == 0) return StepExited(*held);  // the work is done
    // The TERM goes to a step that did not stop in time (USR1 at the lead), not to ranks that
    // got USR1 a moment ago because slurmctld was silent (Slurm's TERM reached them already).
    const bool step = st_.phase == Phase::kTraining || st_.phase == Phase::kPreflight ||
                      (st_.phase == Phase::kStopping && !st_.term_stop_sent);
    return TermRequeue("term.time_limit", step ? "TERM" : "",
                       "TERM at the time limit or a preemption (" + o.job_state + ", " + o.reason +
                           "): requeueing job " + st_.job +
                           " now, before Slurm's KillWait ends this script");
  }
  std::vector<Action> acts{Log("TERM: job " + st_.job + " is ending (" + o.job_state +
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

// FTRAIN_TERM_ASK_S passed and slurmctld never said: as at the time limit (the one case where
// not requeueing loses the run), so requeue, never exit 0. The ranks get USR1, not TERM (see
// JobStateKnown): they may be writing the stop checkpoint Slurm's own TERM asked for.
Decision JobPolicy::TermUnanswered(double now) {
  (void)now;
  st_.phase = st_.asked_from;
  std::optional<Observation> held = std::move(st_.held_exit);
  st_.held_exit.reset();
  if (held && held->rc == 0) return StepExited(*held);  // the work is done
  const char* sig = st_.phase == Phase::kTraining    ? "USR1"
                    : st_.phase == Phase::kPreflight ? "TERM"
                                                     : "";
  Decision d = TermRequeue(
      "term.unanswered", sig,
      "TERM: slurmctld did not say within " + Fmt(s_.term_ask_s) +
          " s (FTRAIN_TERM_ASK_S) whether job " + st_.job +
          " is cancelled: requeueing it as at the time limit (an unknown answer never ends the "
          "job as finished; a requeue that does not land ends it FAILED)");
  // Slurm 22.05 requeues (and runs again) a cancelled job that is still COMPLETING: each try
  // waits for slurmctld to say the job is not cancelled.
  for (auto& a : d.actions) {
    if (a.kind == Action::Kind::kRequeue) a.text = "unless_cancelled";
  }
  return d;
}

// Requeue at once after a TERM (the time limit, or no answer): forward `sig` to the step ("":
// none), record, last stop, requeue with the stop paths' budget.
Decision JobPolicy::TermRequeue(std::string rule, const std::string& sig, std::string why) {
  std::vector<Action> acts;
  if (!sig.empty()) {
    Action fwd = Act(Action::Kind::kSignalStep);
    fwd.text = sig;
    acts.push_back(fwd);
  }
  st_.stop_requested = true;
  acts.push_back(Log(why));
  Action last = Act(Action::Kind::kWriteLastStop);
  last.text = "preempted";
  acts.push_back(last);
  acts.push_back(Record(
      "stopped", "preempted",
      {records::Str("during", rule == "term.time_limit" ? "the time limit (TERM)"
                                                        : "a TERM slurmctld did not explain")}));
  return Requeue(std::move(rule), acts, {});
}

}  // namespace ftrain::orch
