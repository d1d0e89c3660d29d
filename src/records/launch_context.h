// The facts of one launch that Slurm, `ftrain launch` and `ftrain job` hand a process through
// its environment: the job, the node, this process's rank, the fence epoch of this start,
// whether records go to the node's spool. Each main parses them once (FromEnvironment) and
// passes them down; no library below the mains reads these variables itself. Which rank of
// which world a process is for the collectives is comm/world.h's business, not this.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ftrain::records {

struct LaunchContext {
  std::string job_id;     // SLURM_JOB_ID ("" outside Slurm)
  std::string node_name;  // SLURMD_NODENAME, else this host's name
  std::string short_host;  // node_name up to its first '.'
  int node_index = -1;     // SLURM_NODEID (-1: unknown)
  int rank = -1;           // RANK, else SLURM_PROCID (-1: unknown)
  // FTRAIN_FENCE_EPOCH: the run lease's epoch `ftrain job` took for this launch (0: none, a
  // start outside the controller). Orders checkpoint writers (ckpt::NewGeneration).
  int64_t fence_epoch = 0;
  // FTRAIN_RECORDS_SPOOL set (to anything): under `ftrain job`, restarts records go to this node's spool.
  bool records_spool = false;
  // FTRAIN_CKPTD_NODE: the node id a test gives a ckptd and its trainer ("" : node_name).
  std::string ckptd_node;

  // The id the checkpoint daemon and its clients agree on for this node.
  const std::string& CkptdNodeId() const { return ckptd_node.empty() ? node_name : ckptd_node; }

  // `getenv` is the lookup (tests pass their own); the host name comes from gethostname()
  // when SLURMD_NODENAME is not set. Malformed numbers read as unknown (-1 / 0).
  using Lookup = std::function<const char*(const char*)>;
  static LaunchContext FromEnvironment();
  static LaunchContext FromLookup(const Lookup& getenv);
};

}  // namespace ftrain::records
