// orch/sim.h - the job controller proven by deterministic simulation (issue 44): a seeded,
// simulated Slurm cluster (nodes, slurmctld, the shared file system, a multi-day run with
// checkpoints) drives the REAL JobPolicy (job_policy.h) through a random fault schedule; each
// action it emits becomes later observations, a requeue starts a new JobPolicy with the facts
// of the new start, as slurm/train.sh would. After the run, CheckInvariants judges the seed's
// facts (SimFacts). The simulator only plays the world: every decision is the policy's. Same
// seed, same build: the same run, event for event (no wall clock, no std:: distributions).
// sim_world.cc runs the world, sim_check.cc holds the invariants; `ftrain sim` (cmd_sim.cc) and
// tests/orch_sim_test.cc drive them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ftrain::orch {

struct SimOptions {
  uint64_t seed = 1;
  double days = 2;     // simulated training time the run needs (its length without faults)
  bool trace = false;  // keep the event trace (observation -> rule -> actions, one line each)
};

// A fault the world injected, with what its documented tolerance says of it.
struct SimFault {
  std::string kind, detail;
  double t = 0, duration = 0;
  bool persistent = false;  // fires every time the run reaches its step (a poison step)
  bool may_fail = false;    // beyond its tolerance: the job may end FAILED because of it
};

// One launch of the training step: where it resumed, how it ended.
struct SimLaunch {
  int start = 0;  // index of the start (JobPolicy instance) it belongs to
  double t = 0;
  int64_t resume_step = 0;
  int rc = -1;              // of the step; -1: killed with its start
  bool progressed = false;  // a checkpoint newer than every earlier one was committed
  bool stopped = false;     // ended on the controller's request (USR1/TERM) or finished
};

// One start of the job (a JobPolicy): how it ended.
struct SimStart {
  double t = 0;
  int restart_count = 0;
  int exits = 0;          // kExit actions it emitted
  bool requeued = false;  // its requeue was verified (kRequeued ok)
  bool killed = false;    // ended by Slurm (its own node-failure requeue, KillWait)
  std::string end_rule;   // the rule of its last decision
  std::string last_stop;  // RUN/.last_stop when it ended
};

// A host the policy kept out of the run (kQuarantine, kExclude's nodes and faulty): with a
// record of why (a quarantine.jsonl line, two hang records, or a record naming it).
struct SimExclusion {
  double t = 0;
  std::string host, by;
  bool recorded = false;
};

// A stretch of lost compute: from the last committed step before a fault until the ranks
// train again, less the time the world alone made it wait (queue, slurmctld down, no nodes).
struct SimInterruption {
  double t = 0;
  double lost_s = 0;     // recomputed steps (s) + the controller's downtime (s)
  int faults = 1;        // faults that hit during it
  bool excused = false;  // a persistent or may_fail fault: no bound applies
};

enum class SimOutcome { kFinished, kCompleted, kFailed, kCancelled, kTimedOut, kUnfinished };
const char* OutcomeName(SimOutcome o);

// Everything the invariants look at, and the limits they compare against.
struct SimFacts {
  uint64_t seed = 0;
  SimOutcome outcome = SimOutcome::kUnfinished;
  int exit_code = 0;
  int64_t steps_done = 0, total_steps = 0;
  bool cancelled = false;  // scancel'ed by a user
  std::vector<SimFault> faults;
  std::vector<SimStart> starts;
  std::vector<SimLaunch> launches;
  std::vector<SimExclusion> exclusions;
  std::vector<SimInterruption> interruptions;
  // Budgets from the simulated job's settings.
  int injob_budget = 0, rollback_budget = 0, requeue_budget = 0;
  double ckpt_interval_s = 0, recovery_budget_s = 0;
  double end_t = 0;
  bool cut_by_loop = false;         // stopped at the simulation's cap on starts and launches
  bool requeued_cancelled = false;  // a requeue landed after a user cancelled the job
  // Nodes Slurm gave the job again after the controller kept them out: quarantined, or
  // excluded as faulty and still faulty ("node004 at t=123 s").
  std::vector<std::string> readmitted;
  int decisions = 0;
  std::map<std::string, int> rules;  // how often each rule of kRules fired
  std::vector<std::string> trace;    // SimOptions::trace
};

struct SimViolation {
  std::string invariant, detail;
};

// The invariants' names, in the order they are checked.
const std::vector<std::string>& SimInvariants();

// Runs one seed.
SimFacts RunSeed(const SimOptions& o);
// The invariants that do not hold for these facts (each invariant at most once).
std::vector<SimViolation> CheckInvariants(const SimFacts& f);

}  // namespace ftrain::orch
