// orch/stop_lead.h - how long the job really has when USR1 comes (issue 44, hole 15): the
// stop's budget (the ranks' checkpoint, the kill grace, the requeue) is taken from the job's
// EndTime as slurmctld reports it, and from the partition's preemption GraceTime when the USR1
// comes long before that end (a preemption moves the end to now + GraceTime), instead of the
// configured FTRAIN_USR1_LEAD_S alone; FTRAIN_USR1_LEAD_S set by the user overrides both.
// Pure (DeriveStopLead, ParseSlurmTime) plus the one read of Slurm at the start (ReadJobEnd).
#pragma once

#include <optional>
#include <string>

#include "orch/slurm.h"

namespace ftrain::orch {

// What Slurm says about the job's end, read once when the controller starts.
struct JobEnd {
  double end_wall = 0;  // EndTime in unix seconds; 0: unknown (no time limit, no answer)
  double grace_s = -1;  // the partition's GraceTime; -1: unknown
};

struct StopLead {
  double lead_s = 0;   // seconds from the USR1 to the job's end
  std::string source;  // in words, for the log
};

// The lead of a USR1 seen at `now_wall`: the user's FTRAIN_USR1_LEAD_S when `overridden`; else
// EndTime - now when the end is known and near (within 15 min, or `configured_s` + 60 s: the
// time limit's USR1, whatever the #SBATCH --signal lead); else, the end far away (a preemption
// or a user's signal), the partition's GraceTime when known and > 0 (at most the time to
// EndTime; 0 means no grace, so no warning signal before a preemption); else `configured_s`.
// EndTime unknown: the smaller of `configured_s` and a known GraceTime. KillWait is not added: srun
// turns Slurm's TERM at the end into a SIGKILL of the ranks.
StopLead DeriveStopLead(double configured_s, bool overridden, const JobEnd& end, double now_wall);

// Slurm's "2026-12-07T12:34:56" (local time) in unix seconds; nothing for Unknown, None, "".
std::optional<double> ParseSlurmTime(const std::string& text);

// EndTime of `job` and GraceTime of its partition (bounded, one try each; unknown on failure).
JobEnd ReadJobEnd(Slurm* slurm, const std::string& job);

}  // namespace ftrain::orch
