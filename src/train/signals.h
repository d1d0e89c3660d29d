// Signal handling for the trainer. SIGUSR1 (Slurm's --signal warning before the time limit
// or preemption) and SIGTERM only set a flag; the training loop checks it at every
// optimizer-step boundary, writes a checkpoint and exits with kExitRequeue. A second SIGTERM
// exits at once with 128 + SIGTERM.
#pragma once

#include "records/exit_codes.h"

namespace ftrain::train {

// "Checkpointed on request; requeue me" (records/exit_codes.h).
using ftrain::kExitRequeue;

void InstallStopSignalHandlers();
// The signal that asked for a stop (SIGUSR1 or SIGTERM), or 0.
int StopRequested();

}  // namespace ftrain::train
