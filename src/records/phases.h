// The per-rank step phases of a metrics.jsonl record (metrics_record.h): every rank splits its
// step into data wait, forward+backward compute, exposed collective wait, optimizer, the wait
// at the step boundary, checkpoint stall and the rest; rank 0 records their median and max,
// the slowest rank, every N steps every rank's vector ("ranks"), and the stragglers it names
// ("stragglers"). The one list of phase keys, written by the trainer
// (train/telemetry/step_phases.h measures and summarises) and read by `ftrain report`, and
// the grouping of stragglers by node that both show. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::records {

enum Phase : int {
  kDataWait = 0,  // waiting for the reader
  kCompute,       // forward + backward, less data and collective waits
  kCommWait,      // exposed collective wait inside forward/backward/optimizer (the engine's)
  kOptimizer,     // clip + AdamW, less its collective wait
  kBoundaryWait,  // the step boundary's loss all-reduce: waiting for the slowest rank
  kCkptStall,     // checkpoint stall (the previous boundary's save + snapshot copy waits)
  kOther,         // the rest of the rank's step (its wall time less all the above): host work
                  // between the phases, or time the rank did not run at all (descheduled)
  kNumPhases
};
// "data_wait_s", "compute_s", "comm_wait_s", "optimizer_s", "boundary_wait_s", "ckpt_stall_s",
// "other_s".
const char* PhaseKey(int phase);

struct RankPhases {
  double s[kNumPhases] = {};
  double read_bytes = 0;  // bytes this rank's reader read from its source during the step
  // The time a rank spends on its own (what the others wait for): its step less the waits for
  // the others (collectives, the boundary) and the checkpoint stall.
  double Busy() const { return s[kDataWait] + s[kCompute] + s[kOptimizer] + s[kOther]; }
};

// A rank named as a straggler: its busy time stayed above the median by more than the
// threshold over the window.
struct Straggler {
  int rank = 0;
  std::string host;
  double busy_s = 0;    // its mean busy time per step over the window
  double median_s = 0;  // the mean of the per-step median busy time over the window
  std::string cause;    // the phase that exceeds the median most ("compute_s", "data_wait_s")
  int64_t step = 0;     // when it was named
};

// What rank 0 records for one step.
struct PhaseSummary {
  double median[kNumPhases] = {};
  double max[kNumPhases] = {};
  int slowest_rank = 0;  // by busy time
  std::string slowest_host;
  double busy_median_s = 0, busy_max_s = 0;
  std::vector<RankPhases> ranks;   // the full vector: only on every-N steps (else empty)
  std::vector<std::string> hosts;  // with `ranks`
  std::vector<Straggler> named;    // stragglers first named at this step
  double comm_bytes = 0;           // bytes rank 0 sent in collectives this step (estimate)
  double read_bytes = 0;           // bytes all ranks' readers read this step
  int nodes = 1;                   // distinct hosts among the ranks
};

// Members for metrics.jsonl (',"phases":{...}' and, when present, ',"ranks":{...}' and
// ',"stragglers":[...]'), to append inside the step's JSON object.
std::string PhaseSummaryJson(const PhaseSummary& p);

// Reads those members of one record back: *phases (left null when the record has none: older
// trainers) and the stragglers it names, appended to *named with step `step`. A malformed
// member is Corruption naming `where`.
Status ParsePhaseMembers(const nlohmann::json& j, const std::string& where, int64_t step,
                         std::shared_ptr<const PhaseSummary>* phases,
                         std::vector<Straggler>* named);

// Stragglers by node: when at least 2 and more than half of a node's ranks are named, the node
// is the suspect (its power, cooling, network or another job), named once with its ranks rather
// than as one line per rank; every other straggler stays a group of its own.
struct StragglerGroup {
  std::string host;
  std::vector<int> ranks;           // ascending
  int host_ranks = 0;               // the ranks on that host (0: not known)
  double busy_s = 0, median_s = 0;  // means over its ranks
  std::string cause;                // the most common cause among them
  int64_t step = 0;                 // the first of them was named at this step
  bool node = false;                // the whole node (else one rank)
  double ExcessPct() const { return median_s > 0 ? 100 * (busy_s / median_s - 1) : 0; }
};
// `rank_hosts`: the host of every rank (empty when not known: then 2 named ranks on one host
// make it a node).
std::vector<StragglerGroup> GroupStragglers(const std::vector<Straggler>& named,
                                            const std::vector<std::string>& rank_hosts);
// "2-3,5": ascending ranks with runs folded.
std::string RankList(const std::vector<int>& ranks);
// "node n2: ranks 2-3 (2 of its 2)" or "rank 3 on n2".
std::string StragglerGroupTitle(const StragglerGroup& g);

}  // namespace ftrain::records
