// orch/job_policy_node_fault.cc - JobPolicy, part 6: a node that cannot run its ranks. The
// trainer exits 76 and appends a line to RUN/node_faults.jsonl naming its host when THIS node
// has no usable GPU, fewer GPUs than its ranks, a CUDA driver that does not start, or no data
// at a local data path (records/node_faults.h). One node's fault is the node's: a spare takes
// its ranks, else the job is requeued excluding it. The same fault on every training node is
// the configuration's (more ranks per node than GPUs everywhere, a path that exists nowhere):
// the job fails with exit 2, like the trainer's own configuration errors. A node declared dead
// during the step is the dead-node path's (job_policy_end.cc), not this one's. The health probe
// after a failed step names nodes that answer but cannot train (`ftrain health`): the same.
#include <algorithm>

#include "orch/job_policy.h"
#include "orch/job_policy_util.h"

namespace ftrain::orch {

using policy_util::Contains;
using policy_util::Join;
using policy_util::LastStop;
using policy_util::WithNodes;

namespace {

// The first reason each host gave, in the order of the hosts' first lines.
std::string ReasonOf(const std::vector<NodeFaultLine>& lines, const std::string& host) {
  for (const auto& l : lines) {
    if (l.host == host) return l.reason.substr(0, 500);
  }
  return "";
}

}  // namespace

// After a failed step: the training nodes the step's new lines of RUN/node_faults.jsonl name,
// and what the job does about them. Nothing ({"", {}}): no training node is named (an exit 76
// without a line is then a rank failure like any other).
Decision JobPolicy::NodeFaultAfterStep() {
  const int rc = st_.rc;
  const bool failed = rc != 0 && rc != kExitRequeue;
  if (!failed || st_.stop_requested || !st_.detect_node.empty()) return {"", {}};
  if (rc != kExitNodeFault && st_.step_node_faults.empty()) return {"", {}};
  const std::vector<std::string>& training = st_.spares ? st_.train_nodes : st_.all_nodes;
  std::vector<std::string> bad;  // named training nodes, in the order of their first lines
  for (const auto& l : st_.step_node_faults) {
    if (Contains(training, l.host) && !Contains(bad, l.host)) bad.push_back(l.host);
  }
  if (bad.empty()) return {"", {}};
  const std::string exit = std::to_string(rc);
  std::string why;  // "n2: reason; n3: reason"
  for (const auto& b : bad) {
    why += (why.empty() ? "" : "; ") + b + ": " + ReasonOf(st_.step_node_faults, b);
  }
  if (bad.size() == training.size()) {
    return Fail(
        "step.node_fault_everywhere",
        {Log("FAILED: every training node (" + Join(bad, " ") +
             ") reported that it cannot run its ranks (step exit " + exit + ", " + s_.run_dir +
             "/node_faults.jsonl): " + why),
         Log("the same fault on every node is a configuration error, not a node's (more ranks "
             "per node than GPUs per node, no GPUs asked of Slurm, a data path that exists on "
             "no node): not restarting; fix the settings and submit again"),
         LastStop("config_error"),
         Record("failed", "config_error",
                {records::Int("exit", rc), records::Str("nodes", Join(bad, ",")),
                 records::Str("reason", ReasonOf(st_.step_node_faults, bad[0]))})},
        2);
  }
  return MoveOffFaultyNodes(bad, st_.step_node_faults,
                            "(step exit " + exit + ", RUN/node_faults.jsonl): " + why);
}

// The health probe (`ftrain health` on each node) failed and named the nodes that failed it
// (o.node_faults: one per problem line). A node that answers but cannot train is treated like
// one whose ranks exited 76. Every training node failing it proves nothing about any one
// (the probe itself, the file system): then, as before, the job waits for Slurm.
Decision JobPolicy::NodeFaultAfterProbe(const Observation& o) {
  const std::vector<std::string>& training = st_.spares ? st_.train_nodes : st_.all_nodes;
  std::vector<std::string> bad;
  for (const auto& l : o.node_faults) {
    if (Contains(training, l.host) && !Contains(bad, l.host)) bad.push_back(l.host);
  }
  if (bad.empty() || bad.size() == training.size()) return {"", {}};
  std::string why;
  for (const auto& b : bad)
    why += (why.empty() ? "" : "; ") + b + ": " + ReasonOf(o.node_faults, b);
  return MoveOffFaultyNodes(bad, o.node_faults,
                            "(step exit " + std::to_string(st_.rc) + ", the health probe): " + why);
}

// A spare takes each faulty node's ranks (localise.replaced's path: survivors keep theirs, the
// node is released), else the job is requeued excluding them. Either way they stay in
// st_.faulty: never given ranks again in this job, excluded from its later requeues.
Decision JobPolicy::MoveOffFaultyNodes(const std::vector<std::string>& bad,
                                       const std::vector<NodeFaultLine>& lines,
                                       const std::string& why) {
  const int rc = st_.rc;
  std::vector<Action> acts{Log("node(s) " + Join(bad, " ") + " cannot run their ranks " + why)};
  for (const auto& b : bad) {
    if (!Contains(st_.faulty, b)) st_.faulty.push_back(b);
  }
  if (!st_.spares || bad.size() > st_.spare_nodes.size()) {
    acts.push_back(LastStop("node_fault"));
    acts.push_back(Record(
        "step_failed", "node_fault",
        {records::Str("nodes", Join(bad, ",")), records::Str("reason", ReasonOf(lines, bad[0])),
         records::Raw("@LOST@", ""), records::Int("exit", rc)},
        true));
    acts.push_back(Log("no spare for " + std::string(bad.size() > 1 ? "each" : "it") +
                       ": requeueing job " + st_.job + " excluding " + Join(st_.faulty, ",")));
    for (const auto& b : bad) KeepOutFaulty({b}, ReasonOf(lines, b), &acts);
    return CheckRoomForFaulty("step.node_fault_exclude", bad, acts);
  }
  for (const auto& n : bad) {  // a spare takes each faulty node's ranks; survivors keep theirs
    const std::string spare = TakeSpare(n);
    st_.replacements += 1;
    acts.push_back(Log("its ranks move from " + n + " to spare " + spare + " (" +
                       std::to_string(st_.spare_nodes.size()) + " spare(s) left)"));
    acts.push_back(Record(
        "restarted", "node_fault",
        {records::Str("node", n), records::Str("spare", spare),
         records::Int("spares_left", static_cast<int64_t>(st_.spare_nodes.size())),
         records::Int("replacement", st_.replacements), records::Str("reason", ReasonOf(lines, n)),
         records::Raw("@LOST@", ""), records::Int("exit", rc)},
        true));
  }
  for (const auto& b : bad) KeepOutFaulty({b}, ReasonOf(lines, b), &acts);
  acts.push_back(WithNodes(Action::Kind::kRelease, bad));  // out of the job: not used again
  acts.push_back(WithNodes(Action::Kind::kWriteJobNodes, LiveNodes()));
  return Launch("step.node_fault_replaced", acts);
}

}  // namespace ftrain::orch
