// orch/topology.h - Slurm's network topology as the buddy placement needs it (issue 44, hole
// 12): each node's leaf switch, from `scontrol show topology` (the topology/tree plugin's
// `SwitchName=S Level=0 ... Nodes=HOSTLIST` lines). Without the plugin, or when slurmctld does
// not answer, the map is empty and the buddy is simply the far side of the ring.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "orch/slurm.h"

namespace ftrain::orch {

// The leaf switches of `scontrol show topology`'s output: (switch, its Nodes= hostlist), for
// the lines that list nodes (the leaves; upper levels list Switches=).
std::vector<std::pair<std::string, std::string>> ParseLeafSwitches(const std::string& text);

// node -> leaf switch, asked of slurmctld once (bounded); empty when nothing is known.
std::map<std::string, std::string> LeafSwitchOfNodes(Slurm* slurm);

}  // namespace ftrain::orch
