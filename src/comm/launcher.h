// The local launcher behind `ftrain launch --nproc N -- <args>` (like torchrun --standalone):
// hosts the rendezvous store, starts N ranks with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/
// MASTER_PORT, forwards SIGINT/SIGTERM/SIGUSR1, and when one rank fails stops the others
// (SIGTERM, then SIGKILL after a grace period). Not a multi-node elastic agent.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::comm {

struct LaunchOptions {
  int nproc = 1;
  // Simulated nodes: ranks are split into `nodes` consecutive blocks of nproc/nodes ranks
  // with their own LOCAL_RANK/GROUP_RANK, so hybrid (intra/inter-node) layouts can be
  // tested on one machine. Must divide nproc.
  int nodes = 1;
  std::vector<std::string> command;  // argv; an ftrain subcommand unless it names a program
  int grace_s = 10;                  // SIGTERM -> SIGKILL delay when stopping survivors
  std::string self_exe;              // path of the ftrain binary (for subcommands)
};

// Runs the job and returns the exit code to use: 0 when every rank exited 0, else the first
// failing rank's code (128 + signal for a rank killed by a signal).
StatusOr<int> RunLocalJob(const LaunchOptions& options);

}  // namespace ftrain::comm
