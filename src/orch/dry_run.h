// orch/dry_run.h - `ftrain job --dry-run FILE`: the job policy's decisions for a recorded
// sequence of observations, printed, nothing run. One observation per line:
//   SECONDS KIND key=value ...        e.g.  12.5 step_exited rc=137
// Lists are comma-separated (nodes=n1,n2); `env NAME=VALUE` lines (before the first
// observation) set FTRAIN_* settings; `#` starts a comment. --table prints the transition
// table's rows that docs/operations.md lists, --machine the machine docs/design.md holds.
#pragma once

#include <iosfwd>
#include <string>

#include "core/status.h"
#include "orch/job_types.h"

namespace ftrain::orch {

// Parses one observation line ("" for a blank or comment line: nothing).
StatusOr<std::optional<Observation>> ParseObservationLine(const std::string& line);
// Runs the policy over `text`, writes each observation and its decision to `out`.
Status DryRun(const std::string& text, std::ostream& out);
// `ftrain agent --dry-run`: the batch-host watcher (WatcherPolicy) over `text`, each observation
// and its decision to `out`. Lines as above with the watcher's kinds and keys (left, known, ok,
// done, dead, can_run, by, job, error, log, options, count); `env NAME=VALUE` sets the agent's
// settings (defaults: SLURMD_NODENAME=n2 watching FTRAIN_BATCH_HOST=n1) and `rank 1|2` which
// watcher it is, both before the first observation.
Status WatcherDryRun(const std::string& text, std::ostream& out);
// The table of what the job script handles (markdown), from kRules.
std::string HandledTable();
// The controller's machine (markdown): JobPolicy's routes, then its phases, observations and
// actions. docs/design.md holds it (tests/orch_docs_test.cc).
std::string MachineTable();

}  // namespace ftrain::orch
