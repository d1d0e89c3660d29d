// orch/policy_table.h - the two words both of the controller's policies are written in (the
// job's, job_policy.h, and the batch-host watcher's, agent_policy.h): a rule, the id a decision
// names, and a row of a machine in words, as `ftrain job --machine` prints it.
#pragma once

#include <string>

namespace ftrain::orch {

// One row of the rules: what a handler decided, with its id (the decision's rule).
struct Rule {
  const char* id;
  const char* phase;  // where it applies, in words
  const char* when;   // the observation and the condition
  const char* does;   // the actions, in words
  const char* what;   // for docs/operations.md ("" : an internal step, not listed there)
};

// One row of a machine in words (docs/design.md, `ftrain job --machine`).
struct MachineRow {
  std::string phases;       // "a, b" ("every phase")
  std::string observation;  // the observation kind's name
  std::string when;         // the guard ("" : always)
  std::string handler;      // the policy's member that decides
};

}  // namespace ftrain::orch
