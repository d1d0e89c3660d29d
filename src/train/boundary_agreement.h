// The step boundary's agreement: every rank learns at the same optimizer step whether the
// run checkpoints and whether it stops, so that all ranks save and exit together. Two small
// collectives on the control group: an all-reduce of the global loss (average), then an
// all-gather of [flags, phases] whose rows are max-reduced into the flags (the time trigger is
// rank 0's clock, a stop any rank's signal); every rank's step phases (train/phase_clock.h)
// ride along, timed by the loss all-reduce's wait. Header without LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "train/config/train_config.h"
#include "train/phase_clock.h"
#include "train/telemetry/step_phases.h"

namespace ftrain::comm {
class Comm;
class DistContext;
}  // namespace ftrain::comm

namespace ftrain::train {

struct BoundaryDecision {
  double loss = 0;
  bool checkpoint = false;
  bool stop = false;
  bool final_step = false;
  std::vector<RankPhases> phases;  // every rank's, this step
};

// The agreement at the end of optimizer step `step` (collective). `time_due`: rank 0's
// wall-clock checkpoint interval has passed (other ranks' values are ignored).
StatusOr<BoundaryDecision> DecideAtBoundary(const TrainConfig& cfg, comm::DistContext& ctx,
                                            int64_t step, double local_loss, bool time_due,
                                            PhaseClock& clock);

// The boundary's agreement (collective): all-gathers [flags..., phases] of every rank.
// `*flags_max` gets the maximum of each flag over the ranks (exactly what an all-reduce of
// the flags with max gives: the decision does not change), `*all` every rank's phases.
Status GatherAtBoundary(comm::Comm& control, const std::vector<double>& flags,
                        const RankPhases& mine, std::vector<double>* flags_max,
                        std::vector<RankPhases>* all);

}  // namespace ftrain::train
