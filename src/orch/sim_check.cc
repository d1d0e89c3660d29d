// orch/sim_check.cc - the invariants a simulated run (sim.h) must keep, judged on its facts
// alone (SimFacts), so that a test can hand them a made-up run that breaks each one. Pure.
#include <algorithm>
#include <cstdio>

#include "orch/sim.h"
#include "records/exit_codes.h"

namespace ftrain::orch {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

bool AnyMayFail(const SimFacts& f) {
  return std::any_of(f.faults.begin(), f.faults.end(),
                     [](const SimFault& x) { return x.may_fail; });
}

// The job ends exit 0 (COMPLETED) only when every step is done, or when a user cancelled it.
std::string NoFalseComplete(const SimFacts& f) {
  if (f.outcome != SimOutcome::kCompleted || f.cancelled) return "";
  return "the job ended exit 0 with " + std::to_string(f.total_steps - f.steps_done) +
         " steps left and nobody cancelled it";
}

// FAILED (or killed at its time limit) only because of a fault beyond its tolerance.
std::string NoFailOnTolerated(const SimFacts& f) {
  if (f.outcome != SimOutcome::kFailed && f.outcome != SimOutcome::kTimedOut) return "";
  if (AnyMayFail(f)) return "";
  return std::string("the job ended ") + OutcomeName(f.outcome) + " (exit " +
         std::to_string(f.exit_code) + ") though every fault stayed within its tolerance";
}

// Every start ends with exactly one exit, unless Slurm ended it (or the simulation stopped).
std::string OneExitPerStart(const SimFacts& f) {
  for (size_t i = 0; i < f.starts.size(); ++i) {
    const SimStart& s = f.starts[i];
    const bool last_cut = i + 1 == f.starts.size() && f.outcome == SimOutcome::kUnfinished;
    if (s.exits > 1 || (s.exits == 0 && !s.killed && !last_cut)) {
      return "start " + std::to_string(i) + " emitted " + std::to_string(s.exits) + " exits";
    }
  }
  return "";
}

// Launches in one start that failed in a row without a new checkpoint (rollbacks apart, and
// exit 74: a storage outage at resume restarts in place until FTRAIN_STORAGE_OUTAGE_S, a bound
// in time, not in launches).
std::string InjobLoopBounded(const SimFacts& f) {
  int run = 0, start = -1;
  for (const auto& l : f.launches) {
    if (l.start != start) run = 0;
    start = l.start;
    if (l.progressed || l.stopped) run = 0;
    if (l.stopped || l.rc == kExitRollback || l.rc == kExitStorage || l.rc == -1) continue;
    if (++run > f.injob_budget) {
      return std::to_string(run) + " failed launches in a row in start " + std::to_string(start) +
             " without a new checkpoint (budget " + std::to_string(f.injob_budget) + ")";
    }
  }
  return "";
}

// Rollbacks (exit 79) in a row without a new checkpoint.
std::string RollbackLoopBounded(const SimFacts& f) {
  int run = 0;
  for (const auto& l : f.launches) {
    if (l.progressed) run = 0;
    if (l.rc != 79) continue;
    if (++run > f.rollback_budget) {
      return std::to_string(run) +
             " rollback relaunches (exit 79) in a row without a new "
             "checkpoint (budget " +
             std::to_string(f.rollback_budget) + ")";
    }
  }
  return "";
}

// Starts the controller requeued for a failure (not a stop) in a row without a new checkpoint.
std::string RequeueLoopBounded(const SimFacts& f) {
  int run = 0;
  for (size_t i = 0; i < f.starts.size(); ++i) {
    bool progressed = false;
    for (const auto& l : f.launches) progressed = progressed || (l.start == int(i) && l.progressed);
    if (progressed) run = 0;
    const SimStart& s = f.starts[i];
    if (!s.requeued || s.last_stop == "preempted") continue;
    if (++run > f.requeue_budget) {
      return std::to_string(run) +
             " requeues for a failure in a row without a new checkpoint "
             "(last: " +
             s.end_rule + ", last_stop " + s.last_stop + "; budget " +
             std::to_string(f.requeue_budget) + ")";
    }
  }
  return "";
}

std::string QuarantineHasRecord(const SimFacts& f) {
  for (const auto& e : f.exclusions) {
    if (!e.recorded) {
      return "host " + e.host + " kept out (" + e.by + ") at t=" + Num(e.t) +
             " s without a quarantine line or a record naming it";
    }
  }
  return "";
}

// Whether a loop invariant fails: what a loop costs (compute, the run's end) is named by it.
bool LoopBroken(const SimFacts& f) {
  return !InjobLoopBounded(f).empty() || !RollbackLoopBounded(f).empty() ||
         !RequeueLoopBounded(f).empty();
}

std::string LostWorkBounded(const SimFacts& f) {
  if (LoopBroken(f)) return "";
  for (const auto& x : f.interruptions) {
    const double bound = x.faults * (f.ckpt_interval_s + f.recovery_budget_s);
    if (!x.excused && x.lost_s > bound) {
      return "a fault at t=" + Num(x.t) + " s cost " + Num(x.lost_s) + " s of compute (bound " +
             Num(bound) + " s for " + std::to_string(x.faults) + " fault(s))";
    }
  }
  return "";
}

// A node kept out stays out: a quarantined one for the run, a faulty one until it is repaired.
std::string KeptOutStaysOut(const SimFacts& f) {
  if (f.readmitted.empty()) return "";
  return "the job was given back " + f.readmitted.front() + " (" +
         std::to_string(f.readmitted.size()) + " time(s)), kept out as faulty or quarantined";
}

// A cancelled job stays cancelled (Slurm 22.05 runs a requeued COMPLETING job again).
std::string CancelIsFinal(const SimFacts& f) {
  return f.requeued_cancelled ? "the job was requeued after a user cancelled it" : "";
}

// Ends within the horizon (a loop that does not end is named by the loop invariants).
std::string RunEnds(const SimFacts& f) {
  if (f.outcome != SimOutcome::kUnfinished || f.cut_by_loop || LoopBroken(f)) return "";
  return "the run neither finished nor ended by t=" + Num(f.end_t) + " s (" +
         std::to_string(f.starts.size()) + " starts, " + std::to_string(f.launches.size()) +
         " launches, step " + std::to_string(f.steps_done) + " of " +
         std::to_string(f.total_steps) + ")";
}

using Check = std::string (*)(const SimFacts&);
struct Named {
  const char* name;
  Check check;
};
const Named kChecks[] = {
    {"no_false_complete", NoFalseComplete},
    {"no_fail_on_tolerated_fault", NoFailOnTolerated},
    {"one_exit_per_start", OneExitPerStart},
    {"injob_loop_bounded", InjobLoopBounded},
    {"rollback_loop_bounded", RollbackLoopBounded},
    {"requeue_loop_bounded", RequeueLoopBounded},
    {"quarantine_has_record", QuarantineHasRecord},
    {"kept_out_stays_out", KeptOutStaysOut},
    {"lost_work_bounded", LostWorkBounded},
    {"cancel_is_final", CancelIsFinal},
    {"run_ends", RunEnds},
};

}  // namespace

const char* OutcomeName(SimOutcome o) {
  switch (o) {
    case SimOutcome::kFinished:
      return "FINISHED";
    case SimOutcome::kCompleted:
      return "COMPLETED_EARLY";
    case SimOutcome::kFailed:
      return "FAILED";
    case SimOutcome::kCancelled:
      return "CANCELLED";
    case SimOutcome::kTimedOut:
      return "TIMEOUT";
    case SimOutcome::kUnfinished:
      return "UNFINISHED";
  }
  return "?";
}

const std::vector<std::string>& SimInvariants() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& c : kChecks) v.push_back(c.name);
    return v;
  }();
  return names;
}

std::vector<SimViolation> CheckInvariants(const SimFacts& f) {
  std::vector<SimViolation> out;
  for (const auto& c : kChecks) {
    std::string why = c.check(f);
    if (!why.empty()) out.push_back({c.name, std::move(why)});
  }
  return out;
}

}  // namespace ftrain::orch
