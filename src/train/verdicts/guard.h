// [guard] and data.skip: which optimizer steps are not applied, decided the same way on
// every rank from values every rank holds (the all-reduced gradient norm, the config), so
// that the decision needs no exchange and a replay decides alike. What the engine does with
// the decision is fsdp::FsdpEngine::Step; this file only decides and keeps the records.
// No LibTorch.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace ftrain::train {

// guard.policy: off (every update applied, as before), skip (a non-finite or spiking step is
// not applied), rollback (not applied, and the run goes back to the newest restorable
// snapshot and skips every step from there to that one: train/verdicts/rollback.h).
enum class GuardPolicy { kOff, kSkip, kRollback };
const char* GuardPolicyName(GuardPolicy p);

struct GuardSection {
  GuardPolicy policy = GuardPolicy::kSkip;
  // Spike detection on the global gradient norm (before clipping): a step whose norm exceeds
  // median + spike_threshold x 1.4826 x MAD of the last spike_window applied steps' norms
  // (the MAD floored at 1 % of the median) is skipped. 0 = off; active once the window is
  // full.
  int64_t spike_window = 0;
  double spike_threshold = 6;
  // Re-admission of a new level (the end of warm-up, a data-mix stage): when the step's norm is
  // over the limit but it and at least spike_readmit_steps - 1 others of the last
  // spike_readmit_within judged steps were over it too and agree among themselves (each
  // within spike_threshold x the window's relative scale of their own median, two-sided), the
  // step is applied and the window restarts from those agreeing norms (detection resumes once
  // it is full again). 0 = never re-admit.
  int64_t spike_readmit_steps = 4;
  int64_t spike_readmit_within = 8;
  // Budget: more than max_skips steps skipped by the guard (data.skip's not counted) within
  // the last max_skips_window steps ends the run (exit 2, the job is not restarted).
  int64_t max_skips = 5;
  int64_t max_skips_window = 100;
  // guard.policy = rollback: more than max_rollbacks rollbacks within the last
  // max_skips_window steps end the run (exit 2) instead of rolling back again.
  int64_t max_rollbacks = 3;
  // Silent data corruption check: every sdc_every_steps optimizer steps (0 = off), the
  // replicas of each master shard (hybrid_shard across nodes, no_shard across every rank)
  // compare a hash of its bytes (train/sdc_check.h). Operational: not in the config hash.
  int64_t sdc_every_steps = 0;
  // Hang guard (train/hang_watch.h): a rank that has not moved for longer than the threshold
  // while the others wait for it in a collective is named and every rank exits 78.
  // hang_timeout_s > 0: that threshold; 0: automatic, max(hang_floor_s, kHangStepFactor x
  // the median of the recent step times). The first step of every start, a checkpoint and
  // an evaluation get dist.timeout_s. Operational: not in the config hash.
  double hang_timeout_s = 0;
  double hang_floor_s = 60;
  // The allowance of the hang guard's io phase (rank 0's metrics writes, every rank's wait for
  // its data: storage, where a recovery takes minutes). Unset: dist.timeout_s (TrainConfig::Load
  // fills it in). The deprecated FTRAIN_HANG_IO_S overrides it (train/verdicts/hang_verdict.h).
  double hang_io_s = 0;
};

// The automatic hang threshold's multiple of the median step time.
constexpr double kHangStepFactor = 10;

// Reads [guard] (absent keys keep the defaults) and checks it against itself.
Status LoadGuard(const Config& c, GuardSection* out);
// The hang guard's settings against the collective timeout (dist.timeout_s): a threshold at or
// above it would never fire before the timeout ends the job.
Status CheckHangAgainstTimeout(const Config& c, const GuardSection& g, int64_t dist_timeout_s);
// Parses data.skip: "3,7,10-12" (optimizer steps, 1-based as metrics.jsonl's "step"); every
// step must be in [1, total_steps].
Status ParseSkipList(const Config& c, int64_t total_steps, std::set<int64_t>* out);

// One skipped step: its number and why ("nonfinite", "spike", "listed", "rollback").
using SkippedStep = std::pair<int64_t, std::string>;
// One recent step the spike rule judged: its norm, and whether it was over the limit (a
// suspect, skipped) or applied. Oldest first; at most spike_readmit_within - 1 are kept.
using RecentNorm = std::pair<double, bool>;

// The guard of one run: the skip list, the spike window and the skips so far (restored from
// the checkpoint on resume).
class StepGuard {
 public:
  StepGuard(const GuardSection& cfg, std::set<int64_t> listed)
      : cfg_(cfg), listed_(std::move(listed)) {}

  bool nonfinite_on() const { return cfg_.policy != GuardPolicy::kOff; }
  // data.skip names this step, or a rollback skips it: it is not computed at all.
  bool Listed(int64_t step) const { return listed_.count(step) + rolled_back_.count(step) > 0; }
  // Why a Listed step is skipped: "listed" (data.skip) or "rollback".
  const char* ListedReason(int64_t step) const {
    return listed_.count(step) > 0 ? "listed" : "rollback";
  }
  // A rollback skips steps [first, last] (train/verdicts/rollback.h): not computed, like data.skip.
  void AddRolledBack(int64_t first, int64_t last) {
    for (int64_t s = first; s <= last; ++s) rolled_back_.insert(s);
  }
  // The spike steps rolled back over (RolledBackSuspects), after the resumed state's recent
  // steps: they count as suspects for re-admission, as they would have in a skipping run.
  void AddSuspects(const std::vector<double>& norms);
  // Whether `grad_norm` is a spike against the window (false while it is not full, and false
  // when it re-admits a sustained new level: see GuardSection::spike_readmit_steps).
  bool IsSpike(double grad_norm) const;
  // The reason a step whose norm is `grad_norm` was skipped by the engine.
  std::string ReasonFor(double grad_norm) const;
  // Records the outcome of `step`: an applied step's norm enters the window (a re-admitted
  // one restarts it); a skip is kept; an applied or spike step enters the recent steps.
  // FailedPrecondition when the skip budget is spent, naming the steps.
  Status Record(int64_t step, double grad_norm, const std::string& skipped);
  // Whether the step Record took last was applied as a re-admitted new level (for the log).
  bool readmitted() const { return readmitted_; }

  // Checkpointed state: the window and the recent judged steps (training state: they decide
  // later steps) and the skips (run history). A checkpoint from before re-admission has no
  // recent steps: an empty list, as after a re-admission.
  std::vector<double> norms() const { return {window_.begin(), window_.end()}; }
  const std::vector<RecentNorm>& recent() const { return recent_; }
  const std::vector<SkippedStep>& skipped() const { return skipped_; }
  void Restore(const std::vector<double>& norms, std::vector<SkippedStep> skipped,
               std::vector<RecentNorm> recent = {});

 private:
  GuardSection cfg_;
  std::set<int64_t> listed_;
  std::set<int64_t> rolled_back_;
  // The full window's median and spike scale (1.4826 x MAD, floored at 1 % of the median);
  // false while the window is not full or the rule is off.
  bool WindowLevel(double* median, double* scale) const;
  // The limit of the window's spike rule (+infinity while the window is not full).
  double Limit() const;
  // The norms among the recent suspects and `grad_norm` that agree with each other; empty
  // unless there are spike_readmit_steps of them, `grad_norm` among them.
  std::vector<double> Readmitted(double grad_norm) const;

  std::deque<double> window_;       // the last spike_window applied steps' norms, oldest first
  std::vector<RecentNorm> recent_;  // the last judged steps (RecentNorm), oldest first
  std::vector<SkippedStep> skipped_;
  bool readmitted_ = false;  // of the last Record
};

// The median of `v` (copied; the mean of the middle two for an even count).
double MedianOf(std::vector<double> v);

}  // namespace ftrain::train
