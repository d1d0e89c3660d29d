// The step boundary's agreement: every rank learns at the same optimizer step the flags that
// decide whether the run checkpoints and whether it stops, so that all ranks save and exit
// together. Two small
// collectives on the control group: an all-reduce of the global loss (average), then an
// all-gather of [flags, phases] whose rows are max-reduced into the flags (the time trigger is
// rank 0's clock, a stop any rank's signal); every rank's step phases (train/phase_clock.h)
// ride along, timed by the loss all-reduce's wait. Header without LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "train/phase_clock.h"
#include "train/telemetry/step_phases.h"

namespace ftrain::comm {
class Comm;
class DistContext;
}  // namespace ftrain::comm

namespace ftrain::train {

// What every rank leaves the boundary knowing, identical on all of them. Whether that makes
// a checkpoint is the checkpoint coordinator's rule (train/checkpoint/coordinator.h).
struct BoundaryDecision {
  double loss = 0;                          // the global mean loss of the step
  bool time_due = false;                    // rank 0's checkpoint interval has passed
  bool memory_time_due = false;             // rank 0's memory-tier interval has passed
  bool stop = false;                        // a stop signal reached some rank: checkpoint and exit
  std::vector<records::RankPhases> phases;  // every rank's, this step
};

// The agreement at the end of an optimizer step (collective). `time_due`: this rank's
// wall-clock checkpoint vote, `memory_time_due` its memory-tier vote
// (CheckpointCoordinator::AfterOptimizerStep: rank 0's clock only).
StatusOr<BoundaryDecision> DecideAtBoundary(comm::DistContext& ctx, double local_loss,
                                            bool time_due, bool memory_time_due, PhaseClock& clock);

// The boundary's agreement (collective): all-gathers [flags..., phases] of every rank.
// `*flags_max` gets the maximum of each flag over the ranks (exactly what an all-reduce of
// the flags with max gives: the decision does not change), `*all` every rank's phases.
Status GatherAtBoundary(comm::Comm& control, const std::vector<double>& flags,
                        const records::RankPhases& mine, std::vector<double>* flags_max,
                        std::vector<records::RankPhases>* all);

}  // namespace ftrain::train
