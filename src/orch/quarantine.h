// orch/quarantine.h - which hosts RUN/quarantine.jsonl and RUN/hangs.jsonl keep out of the
// job (pure: typed lines in, hosts out), and reading RUN/node_faults.jsonl and the health
// probe's output for the job controller. The quarantine and hang lines themselves (struct,
// writer, readers) are records/quarantine.h and records/hangs.h.
#pragma once

#include <string>
#include <vector>

#include "orch/job_types.h"

namespace ftrain::orch {

// RUN/node_faults.jsonl (records/node_faults.h): every line that parses and names a host; a
// line that does not (a torn last line, an operator's edit) is skipped: the rest still count.
std::vector<NodeFaultLine> ParseNodeFaults(const std::string& text);
// The lines of RUN/node_faults.jsonl's `text` past byte `from` (its size when the step was
// launched): the step's own. The file is only appended to; one that shrank (an operator
// cleaned it up) is read whole.
std::vector<NodeFaultLine> NodeFaultsSince(const std::string& text, size_t from);
// The problems `ftrain health` reported on its nodes (src/cli/cmd_health.cc): each line
// "ftrain health: node HOST: PROBLEM" of `output` (the probe's srun, all nodes) as a line with
// host and reason; other lines (srun's own) are skipped.
std::vector<NodeFaultLine> ParseHealthProblems(const std::string& output);
// Every host the quarantine names, once each, in the order of its first line; a host's lines
// up to its newest records::kClearedCause line (an operator's `ftrain quarantine clear`) and
// the cleared lines themselves name nobody.
std::vector<std::string> QuarantinedHosts(const std::vector<QuarantineLine>& lines);
// The cause of the lines the job controller appends for a node that failed a localisation or
// reported a node fault (exit 76): kept out until repaired, not for ever (see below).
inline constexpr const char* kFaultyCause = "node_fault";
inline constexpr const char* kHangCause = "hang";
// How long a line keeps its host out, by cause (0: for the whole run), and the defaults of
// FTRAIN_FAULTY_KEEP_S and FTRAIN_HANG_QUARANTINE_KEEP_S (orch/settings.cc, slurm/train.sh).
inline constexpr double kDefaultFaultyKeepS = 86400;
inline constexpr double kDefaultHangQuarantineKeepS = 86400;
struct QuarantineKeep {
  double faulty_s = 0;  // FTRAIN_FAULTY_KEEP_S: kFaultyCause lines
  double hang_s = 0;    // FTRAIN_HANG_QUARANTINE_KEEP_S: kHangCause lines
};
// The same at unix time `now`, less the lines that expired: a kFaultyCause line older than
// keep.faulty_s (the node was presumably repaired), a kHangCause line older than keep.hang_s
// (two hangs long ago are no reason to lose a node for ever). A line without a time never
// expires; "sdc" lines never do (an operator clears them).
std::vector<std::string> QuarantinedHosts(const std::vector<QuarantineLine>& lines, double now,
                                          const QuarantineKeep& keep);
// The hosts of `hosts` that node faults alone keep out (every line still in force for them,
// by the rules above, is a kFaultyCause one: no "sdc", no "hang"), oldest newest-line first.
// When the job's partition has no room for its training nodes without them, the controller
// lets these back in rather than fail the job (job_policy_quarantine.cc, RoomKnown): a
// health check can show such a node repaired, Slurm keeps a node it drained out, and one still
// faulty fails the next start's check and is kept out again, within the node-requeue budget.
std::vector<std::string> FaultOnlyHosts(const std::vector<QuarantineLine>& lines, double now,
                                        const QuarantineKeep& keep,
                                        const std::vector<std::string>& hosts);
// The hang records not older than their host's newest cleared line (a record without a time
// is kept): after a clear, only new hangs count towards a repeat.
std::vector<HangLine> HangsSinceCleared(const std::vector<HangLine>& hangs,
                                        const std::vector<QuarantineLine>& quarantine);
// The hang records that count towards a repeat: those at most `window_s` seconds older than
// the newest record (the hang that just ended the step; the records' own clock, so the answer
// is a function of the file alone). window_s = 0: every record of the run. A record without a
// time cannot be shown to be old: it counts.
std::vector<HangLine> RecentHangs(const std::vector<HangLine>& hangs, double window_s);
// The hosts named by two or more hang records (a hang that repeated there), in the order of
// their second record. Give it RecentHangs: two hangs months apart are no repeat.
std::vector<std::string> RepeatedHangHosts(const std::vector<HangLine>& hangs);

}  // namespace ftrain::orch
