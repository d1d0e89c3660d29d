// orch/topology.cc - leaf switches from `scontrol show topology` (topology.h).
#include "orch/topology.h"

#include <sstream>

#include "orch/process.h"

namespace ftrain::orch {

std::vector<std::pair<std::string, std::string>> ParseLeafSwitches(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string w, name, nodes;
    while (words >> w) {
      if (w.rfind("SwitchName=", 0) == 0) name = w.substr(11);
      if (w.rfind("Nodes=", 0) == 0) nodes = w.substr(6);
    }
    if (!name.empty() && !nodes.empty() && nodes != "(null)") out.emplace_back(name, nodes);
  }
  return out;
}

std::map<std::string, std::string> LeafSwitchOfNodes(Slurm* slurm) {
  std::map<std::string, std::string> out;
  RunOptions o;
  o.timeout_s = 10;
  RunResult r = RunCommand({"scontrol", "show", "topology"}, o);
  if (!r.ok()) return out;  // no topology plugin, or no answer: the ring alone places buddies
  for (const auto& [name, hostlist] : ParseLeafSwitches(r.out)) {
    auto hosts = slurm->Hostnames(hostlist);
    if (!hosts.ok()) continue;  // a switch unknown: its nodes count as unknown
    for (const auto& h : *hosts) out.emplace(h, name);
  }
  return out;
}

}  // namespace ftrain::orch
