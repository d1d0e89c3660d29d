// orch/job_policy_grow.cc - JobPolicy, part 9: an elastic run grows back (FTRAIN_ELASTIC,
// issue 47). After a shrink (job_policy_end.cc) the run trains on fewer nodes than it started
// with. Every FTRAIN_ELASTIC_GROW_S the controller asks Slurm for the missing nodes (a node
// that came back, or any the partition has free; never a quarantined one): `salloc
// --dependency=expand:JOB` and the new allocation handed to this job (orch/slurm.h, Expand).
// The agents of the nodes the job gained start; then the ranks checkpoint and stop (USR1,
// exit 75) and the step relaunches on the larger set from that checkpoint. Under
// dist.reduce = exact the bits do not depend on the number of ranks, so the run stays
// bit-identical to one that never changed size. A step that ends otherwise while growing
// keeps the gained nodes as spares.
#include <algorithm>

#include "orch/job_policy.h"
#include "orch/job_policy_util.h"

namespace ftrain::orch {

using policy_util::Act;
using policy_util::Contains;
using policy_util::Fmt;
using policy_util::Join;
using policy_util::WithNodes;

// A tick while training: nothing unless the run is elastic, shrunk, not stopping and Slurm
// was last asked FTRAIN_ELASTIC_GROW_S ago.
Decision JobPolicy::GrowAsk(const Observation& o) {
  if (!s_.elastic || s_.elastic_grow_s <= 0 || st_.growing || !st_.grow_nodes.empty() ||
      st_.stop_requested || !st_.spares) {
    return {"", {}};
  }
  const size_t have = st_.train_nodes.size() + st_.spare_nodes.size();
  if (have >= st_.train_target || o.now < st_.next_grow_ask) return {"", {}};
  st_.next_grow_ask = o.now + s_.elastic_grow_s;
  Action ex = Act(Action::Kind::kExpand);
  ex.num_nodes = static_cast<int>(st_.train_target - have);
  ex.nodes = LiveNodes();  // never a node the job has, nor a quarantined one
  if (!Contains(ex.nodes, st_.batch_host) && !st_.batch_host.empty()) {
    ex.nodes.push_back(st_.batch_host);
  }
  for (const auto& q : st_.quarantined) {
    if (!Contains(ex.nodes, q)) ex.nodes.push_back(q);
  }
  for (const auto& d : st_.declared) {
    if (!Contains(ex.nodes, d)) ex.probe.push_back(d);
  }
  return {"train.grow_ask", {ex}};
}

// Slurm's answer: the nodes the job gained start their agents, or the run stays as it is and
// asks again later (said once per distinct reason).
Decision JobPolicy::GrowAllocated(const Observation& o) {
  if (!o.ok || o.nodes.empty()) {
    std::vector<Action> acts;
    if (o.detail != st_.grow_detail) {
      st_.grow_detail = o.detail;
      acts.push_back(Log("elastic: no node to grow back to " + std::to_string(st_.train_target) +
                         " training nodes yet (" + o.detail + "); asking again every " +
                         Fmt(s_.elastic_grow_s) + " s (FTRAIN_ELASTIC_GROW_S)"));
    }
    return {"train.grow_none", acts};
  }
  st_.grow_detail.clear();
  st_.grow_nodes = o.nodes;
  for (const auto& n : o.nodes) {
    if (!Contains(st_.all_nodes, n)) st_.all_nodes.push_back(n);
    // A node that died earlier in this job is back (its slurmd answered): its next death must
    // be declared again, and no release of the dead may take it out of the job.
    st_.declared.erase(std::remove(st_.declared.begin(), st_.declared.end(), n),
                       st_.declared.end());
  }
  return {"train.grow_allocated",
          {Log("elastic: the job gained " + Join(o.nodes, " ") +
               "; starting their agents, then the ranks checkpoint and stop to grow"),
           WithNodes(Action::Kind::kWriteJobNodes, LiveNodes()),
           WithNodes(Action::Kind::kStartAgents, o.nodes)}};
}

// The gained nodes' agents answered (or their wait ended): the ranks checkpoint and stop.
Decision JobPolicy::GrowAgentsReady(const Observation& o) {
  if (st_.grow_nodes.empty() || st_.growing) return {"", {}};
  st_.growing = true;
  Action usr1 = Act(Action::Kind::kSignalStep);
  usr1.text = "USR1";
  return {"train.grow_stop",
          {Log("elastic: ckptd serving on " + std::to_string(o.count) + " of " +
               std::to_string(st_.grow_nodes.size()) +
               " gained node(s); the ranks checkpoint and stop to relaunch on " +
               std::to_string(st_.train_nodes.size() + st_.grow_nodes.size()) + " nodes"),
           usr1}};
}

// The step's end is the stop the growth asked for: exit 75 after our USR1, no user's stop and
// no node declared meanwhile.
bool JobPolicy::StoppedToGrow(int rc) const {
  return st_.growing && rc == kExitRequeue && !st_.stop_requested && st_.detect_node.empty();
}

// The ranks stopped at a checkpoint (exit 75) for the growth: relaunch on the larger set.
Decision JobPolicy::Grow() {
  const std::vector<std::string> gained = st_.grow_nodes;
  for (const auto& n : gained) {
    st_.train_nodes.push_back(n);
    for (int i = 0; i < s_.ranks_per_node; ++i) st_.rank_hosts.push_back(n);
  }
  st_.grow_nodes.clear();
  st_.growing = false;
  st_.grows += 1;
  st_.next_grow_ask = -1;
  const auto world = static_cast<int64_t>(st_.rank_hosts.size());
  const auto nodes = static_cast<int64_t>(st_.train_nodes.size());
  std::vector<Action> acts{
      Log("elastic: growing back to " + std::to_string(nodes) + " node(s), " +
          std::to_string(world) + " ranks, with " + Join(gained, " ") +
          " (from the checkpoint of the stop; the global batch is unchanged)"),
      Record("restarted", "grow",
             {records::Str("node", Join(gained, " ")), records::Int("nodes", nodes),
              records::Int("world", world), records::Int("grow", st_.grows)}),
      WithNodes(Action::Kind::kWriteJobNodes, LiveNodes())};
  return Launch("step.grown", acts);
}

// The step ended otherwise while the run was growing (it finished, failed or was stopped):
// the gained nodes, their agents running, stay in the job as spares.
void JobPolicy::GrowAbandoned(int rc, std::vector<Action>* acts) {
  if (st_.grow_nodes.empty() || StoppedToGrow(rc)) return;
  acts->push_back(Log("elastic: the step ended (exit " + std::to_string(rc) +
                      ") before the run grew; " + Join(st_.grow_nodes, " ") +
                      " stay(s) in the job as spare(s)"));
  for (const auto& n : st_.grow_nodes) st_.spare_nodes.push_back(n);
  st_.grow_nodes.clear();
  st_.growing = false;
}

}  // namespace ftrain::orch
