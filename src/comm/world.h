// Who am I in the job: rank, world size, local rank, node. Discovered, in this order, from
// PMIx (launched by `srun --mpi=pmix`), the Slurm step environment (SLURM_PROCID...), the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or
// else a single process. Pure functions of an environment map, so tests need no launcher;
// the PMIx query itself lives in pmix_client.h.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::comm {

enum class WorldSource { kPmix, kSlurm, kTorchrun, kSingle };
const char* WorldSourceName(WorldSource s);

struct WorldInfo {
  WorldSource source = WorldSource::kSingle;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  // Where the env rendezvous store lives (torchrun/Slurm sources); empty for PMIx/single.
  std::string master_addr;
  int master_port = 0;
  std::string job_id;  // Slurm job id or PMIx namespace; "" when unknown
};

using EnvMap = std::map<std::string, std::string>;
EnvMap CurrentEnviron();

// True when the environment says a PMIx server launched us (PMIX_RANK and PMIX_NAMESPACE).
bool HasPmixEnv(const EnvMap& env);

// Slurm step env or torchrun env or single; never consults PMIx. Errors name the variable.
StatusOr<WorldInfo> DiscoverFromEnv(const EnvMap& env);

// Expands a Slurm hostlist such as "node[1-3,07],gpu-a" into host names, in order.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

// The node index of every rank when nodes are numbered in the order of their lowest global
// rank; node_of_rank[r] is the launcher's node id of rank r (Slurm numbers a step's nodes in
// host-name order). The identity for the usual block layout; for a step relaunched on a
// spare node with the dead node's ranks (srun -m arbitrary) it gives every node the index it
// had in the original layout, so the node groups keep their member order (reduction order).
std::vector<int> NodesByLowestRank(const std::vector<int>& node_of_rank);

// Checks ranges: 0 <= rank < world, 0 <= local_rank < local_world_size, node_rank < num_nodes.
Status ValidateWorld(const WorldInfo& w, const std::string& origin);

std::string DescribeWorld(const WorldInfo& w);

}  // namespace ftrain::comm
