// `ftrain train`: the training loop (single process, under `ftrain launch`, or under srun).
// Builds the model, applies FSDP, loads initial weights or resumes from the newest complete
// checkpoint, streams data, trains with warm-up + cosine, and checkpoints at optimizer-step
// boundaries by wall time and/or steps. Signals (SIGUSR1/SIGTERM) end the run with a
// checkpoint and kExitRequeue. The header is LibTorch-free; the loop lives in trainer.cc.
#pragma once

#include "core/env.h"
#include "core/status.h"
#include "records/launch_context.h"
#include "train/config/train_config.h"

namespace ftrain::train {

// Runs the whole training; *exit_code is 0 when the run finished, kExitRequeue when it
// stopped on a signal after checkpointing. A non-OK Status is an error (its code decides the
// exit code in main). `launch`: the facts main read from the environment (job, node, fence
// epoch), which the records, the checkpoint generation and the daemon's node id use; `env`:
// the files and the clock every part of the run goes through (the main's Env).
Status RunTraining(const TrainConfig& config, const records::LaunchContext& launch, Env* env,
                   int* exit_code);

}  // namespace ftrain::train
