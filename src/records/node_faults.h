// RUN/node_faults.jsonl (RunLayout::node_faults()): one line per rank whose node could not run
// it (no usable GPU, fewer GPUs than the node's ranks, a CUDA driver that did not start, the
// data path unreadable on this node), appended by that rank before `ftrain train` exits 76.
// The job controller (orch/job_runner.h) reads the lines a step added and decides: the node's
// fault (a spare takes its ranks, or a requeue excludes it) or, on every training node, the
// configuration's. Writing only; orch/quarantine.h parses.
#pragma once

#include <string>

#include "core/env.h"
#include "core/status.h"
#include "records/launch_context.h"

namespace ftrain::records {

// Who this rank is, for the line (from its LaunchContext).
struct NodeFaultWho {
  std::string host;  // SLURMD_NODENAME, else the host name
  int node = -1;     // SLURM_NODEID (-1: unknown)
  int rank = -1;     // RANK, else SLURM_PROCID (-1: unknown)
};
NodeFaultWho NodeFaultWhoOf(const LaunchContext& launch);

// The line itself: {"time":..,"host":..,"node":..,"rank":..,"reason":..} (node and rank left
// out when unknown).
std::string EncodeNodeFault(double time, const NodeFaultWho& who, const std::string& reason);

// Appends this rank's line with one O_APPEND write (records::AppendJsonLine: fsynced, no
// link followed). Does nothing when `run_dir` is empty or not a directory (nothing started:
// nothing to tell).
Status RecordNodeFault(const std::string& run_dir, const LaunchContext& launch,
                       const std::string& reason, Env* env);

}  // namespace ftrain::records
