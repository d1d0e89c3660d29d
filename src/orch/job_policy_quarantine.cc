// orch/job_policy_quarantine.cc - JobPolicy, part 5: quarantined nodes. RUN/quarantine.jsonl
// names hosts that computed wrong bits (the replica check: the trainer exits 77) or where a
// hang repeated (exit 78; this controller writes their line). Such a host never gets ranks of
// this run again: after the step's end a spare takes its ranks, else the job is requeued
// excluding it; at every start (the file is read each time) a quarantined node of the
// allocation is left out for a clean spare, else the job fails naming it. docs/operations.md
// ("Quarantined nodes") says why and how an operator clears a node.
#include <algorithm>
#include <cmath>

#include "orch/job_policy.h"
#include "orch/job_policy_util.h"
#include "orch/quarantine.h"

namespace ftrain::orch {

using policy_util::Act;
using policy_util::Contains;
using policy_util::Join;
using policy_util::LastStop;
using policy_util::WithNodes;
using records::Field;

// The quarantined nodes that would get ranks: training nodes (spares) or every node.
std::vector<std::string> JobPolicy::QuarantinedInUse() const {
  std::vector<std::string> out;
  for (const auto& n : st_.spares ? st_.train_nodes : st_.all_nodes) {
    if (Contains(st_.quarantined, n)) out.push_back(n);
  }
  return out;
}

namespace {

// Quarantined spares are dropped: a spare runs no ranks yet, but must never take some.
// "in this run" or "within 6 h" / "within 90 s": the span the hang count covers.
std::string HangWindowText(double window_s) {
  if (window_s <= 0) return "in this run";
  if (window_s >= 3600 && std::fmod(window_s, 3600) == 0) {
    return "within " + std::to_string(static_cast<int64_t>(window_s / 3600)) + " h";
  }
  return "within " + std::to_string(static_cast<int64_t>(window_s)) + " s";
}

void DropQuarantinedSpares(const std::vector<std::string>& quarantined,
                           std::vector<std::string>* spares, std::vector<std::string>* dropped) {
  std::vector<std::string> keep;
  for (const auto& s : *spares) (Contains(quarantined, s) ? dropped : &keep)->push_back(s);
  *spares = keep;
}

}  // namespace

// After a step's exit 77 or 78: which hosts are quarantined now, and what the job does.
// Both replicas of a two-way split are quarantined alike (docs/operations.md says why).
Decision JobPolicy::QuarantineAfterStep() {
  std::vector<Action> acts;
  std::string rule;
  for (const auto& h : QuarantinedHosts(st_.step_quarantine, st_.step_end_wall,
                                        {s_.faulty_keep_s, s_.hang_quarantine_keep_s})) {
    if (!Contains(st_.quarantined, h)) st_.quarantined.push_back(h);
  }
  if (st_.rc == kExitHang) {
    // Only hangs close together repeat (FTRAIN_HANG_REPEAT_WINDOW_S): two months apart, the
    // whole run's history would quarantine one healthy host after another.
    // An operator's clear (`ftrain quarantine clear`) starts the host's count afresh.
    const std::vector<HangLine> recent = RecentHangs(
        HangsSinceCleared(st_.step_hangs, st_.step_quarantine), s_.hang_repeat_window_s);
    for (const auto& h : RepeatedHangHosts(recent)) {
      if (Contains(st_.quarantined, h)) continue;
      st_.quarantined.push_back(h);
      HangLine last;
      int64_t count = 0;
      for (const auto& x : recent) {
        if (x.host != h) continue;
        last = x;
        ++count;
      }
      Action q = WithNodes(Action::Kind::kQuarantine, {h});
      q.text = kHangCause;
      q.record.fields = {records::Int("node", last.node), records::Int("rank", last.rank),
                         records::Int("step", last.step), records::Int("hangs", count)};
      acts.push_back(Log("a rank hung on " + h + " again (" + std::to_string(count) +
                         " hang records " + HangWindowText(s_.hang_repeat_window_s) +
                         "): quarantining " + h));
      acts.push_back(q);
      rule = "step.hang_repeated+";
    }
  }
  const std::vector<std::string> bad = QuarantinedInUse();
  if (bad.empty()) return {"", {}};  // nothing of this job's placement is quarantined
  const std::string exit = std::to_string(st_.rc);
  std::vector<std::string> dropped;
  DropQuarantinedSpares(st_.quarantined, &st_.spare_nodes, &dropped);
  for (const auto& d : dropped) {
    acts.push_back(Record("spare_lost", "quarantine", {records::Str("node", d)}));
  }
  if (st_.spares && st_.spare_nodes.empty() && s_.elastic) {
    Decision d = QuarantineShrink(bad, rule, &acts);
    if (!d.rule.empty()) return d;
  }
  if (!st_.spares || bad.size() > st_.spare_nodes.size()) {
    // A requeue excluding them must still find enough nodes: first ask the partition.
    st_.quarantine_bad = bad;
    st_.phase = Phase::kCheckingRoom;
    st_.room_for = RoomFor::kQuarantine;
    acts.push_back(Act(Action::Kind::kQueryRoom));
    return {rule + "step.quarantine_room", acts};
  }
  for (const auto& n : bad) {  // a spare takes each quarantined node's ranks
    const std::string spare = TakeSpare(n);
    st_.replacements += 1;
    acts.push_back(Log("node " + n + " is quarantined (RUN/quarantine.jsonl; step exit " + exit +
                       "): its ranks move to spare " + spare + " (" +
                       std::to_string(st_.spare_nodes.size()) +
                       " spare(s) left); it stays in the allocation, unused"));
    acts.push_back(
        Record("restarted", "quarantine",
               {records::Str("node", n), records::Str("spare", spare),
                records::Int("spares_left", static_cast<int64_t>(st_.spare_nodes.size())),
                records::Int("replacement", st_.replacements), records::Raw("@LOST@", ""),
                records::Int("exit", st_.rc)},
               true));
  }
  // Out of the replication ring and the detector's watch; not released (see the docs).
  acts.push_back(WithNodes(Action::Kind::kWriteJobNodes, LiveNodes()));
  return Launch(rule + "step.quarantine_replaced", acts);
}

// FTRAIN_ELASTIC with no spare left: the quarantined training nodes' ranks are dropped and the
// run goes on on the rest of its nodes, as after a death (simulation seed 16623: a requeue
// excluding them found no room and the job failed). The hosts stay in the allocation, unused.
// Nothing ({"", {}}) when fewer than FTRAIN_ELASTIC_MIN_NODES would be left.
Decision JobPolicy::QuarantineShrink(const std::vector<std::string>& bad, const std::string& rule,
                                     std::vector<Action>* acts) {
  const size_t left = st_.train_nodes.size() - bad.size();
  if (bad.size() >= st_.train_nodes.size() || left < static_cast<size_t>(s_.elastic_min_nodes)) {
    return {"", {}};
  }
  for (const auto& n : bad) {
    const int64_t world = DropTrainingNode(n);
    acts->push_back(Log("node " + n + " is quarantined (RUN/quarantine.jsonl; step exit " +
                        std::to_string(st_.rc) + ") and no spare is left: shrinking to " +
                        std::to_string(st_.train_nodes.size()) + " node(s), " +
                        std::to_string(world) +
                        " ranks (FTRAIN_ELASTIC); it stays in the "
                        "allocation, unused"));
    acts->push_back(Record("restarted", "shrink",
                           {records::Str("node", n),
                            records::Int("nodes", static_cast<int64_t>(st_.train_nodes.size())),
                            records::Int("world", world), records::Int("shrink", st_.shrinks),
                            records::Str("why", "quarantine"), records::Raw("@LOST@", ""),
                            records::Int("exit", st_.rc)},
                           true));
  }
  acts->push_back(WithNodes(Action::Kind::kWriteJobNodes, LiveNodes()));
  return Launch(rule + "step.quarantine_shrunk", *acts);
}

namespace {
// `first` then `rest`.
std::vector<Action> With(std::vector<Action> first, const std::vector<Action>& rest) {
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}
}  // namespace

// Too few nodes in the partition for the training nodes without the quarantined ones: the
// hosts that only node faults keep out, and that did not fail in this step, are let back in,
// oldest fault first, until the training nodes fit (quarantine.h, FaultOnlyHosts). Each gets
// a "cleared" line in RUN/quarantine.jsonl (history appended, never edited): a node that is
// still faulty fails the next start's check and is kept out again, and those requeues count
// against FTRAIN_MAX_NODE_REQUEUES. Nothing is let in when even that would not make room.
void JobPolicy::ReadmitFaultyForRoom(const std::vector<std::string>& partition, size_t train,
                                     std::vector<Action>* acts) {
  size_t room = 0;
  for (const auto& n : partition) room += Contains(st_.quarantined, n) ? 0 : 1;
  if (room >= train) return;
  std::vector<std::string> back;
  for (const auto& h :
       FaultOnlyHosts(st_.step_quarantine, st_.step_end_wall,
                      {s_.faulty_keep_s, s_.hang_quarantine_keep_s}, st_.quarantined)) {
    if (room + back.size() >= train) break;
    if (!Contains(st_.quarantine_bad, h) && Contains(partition, h)) back.push_back(h);
  }
  if (room + back.size() < train) return;
  for (const auto& h : back) {
    st_.quarantined.erase(std::find(st_.quarantined.begin(), st_.quarantined.end(), h));
    Action q = WithNodes(Action::Kind::kQuarantine, {h});
    q.text = records::kClearedCause;
    q.record.fields = {
        records::Str("by", "ftrain job"),
        records::Str("reason", "no room without it: checked again at the next start")};
    acts->push_back(q);
  }
  acts->push_back(Log("the job's partition has no room for its " + std::to_string(train) +
                      " training node(s) without node(s) " + Join(back, " ") +
                      ", kept out only by node faults (RUN/quarantine.jsonl, cause " +
                      kFaultyCause +
                      "): they are let back in (a \"cleared\" line each) and "
                      "checked again at the next start rather than failing the job"));
}

// No spare for each quarantined node: requeue excluding every quarantined node of the run.
// When the job's partition would be left with too few nodes for the whole job but enough for
// its training nodes, the requeued job gets fewer nodes: fewer spares, or none. With too few
// even for the training nodes (the requeued job would pend for ever) it ends FAILED naming
// them. Slurm not answering: requeue (it may fit).
Decision JobPolicy::RoomKnown(const Observation& o) {
  const std::vector<std::string>& bad = st_.quarantine_bad;
  const std::string exit = std::to_string(st_.rc);
  const size_t train = st_.spares ? st_.train_nodes.size() : st_.all_nodes.size();
  std::vector<Action> readmitted;
  if (o.known) ReadmitFaultyForRoom(o.nodes, train, &readmitted);
  size_t room = 0;
  for (const auto& n : o.nodes) room += Contains(st_.quarantined, n) ? 0 : 1;
  if (o.known && room < st_.all_nodes.size() && room >= train) {
    // Too few nodes only for the spares: requeue with fewer (NumNodes lowered with the
    // exclusion, on the pending job), as many training nodes as before (a resume is
    // bit-identical only on the same layout), and the spares that fit, maybe none.
    st_.faulty = st_.quarantined;
    st_.requeue_nodes = static_cast<int>(room);
    const size_t spares_after = room - train;
    const std::string spares = spares_after == 0
                                   ? "without its spare(s)"
                                   : "with " + std::to_string(spares_after) + " of its " +
                                         std::to_string(st_.all_nodes.size() - train) + " spare(s)";
    return NodeRequeue(
        "step.quarantine_requeue_fewer",
        With(readmitted,
             {Log("requeued " + spares + ": node(s) " + Join(bad, " ") +
                  " quarantined (RUN/quarantine.jsonl; step exit " + exit +
                  "), no spare for each, and the job's partition has " + std::to_string(room) +
                  " other node(s) for its " + std::to_string(st_.all_nodes.size()) + ": job " +
                  st_.job + " is requeued on " + std::to_string(room) + " node(s) (" +
                  std::to_string(train) + " training, as before) excluding " +
                  Join(st_.quarantined, ",")),
              LastStop("quarantine"),
              Record("step_failed", "quarantine",
                     {records::Str("nodes", Join(bad, ",")),
                      records::Str("action", "requeue_fewer_spares"),
                      records::Int("num_nodes", static_cast<int64_t>(room)),
                      records::Int("spares", static_cast<int64_t>(spares_after)),
                      records::Raw("@LOST@", ""), records::Int("exit", st_.rc)},
                     true)}),
        {}, "quarantine");
  }
  if (o.known && room < st_.all_nodes.size()) {
    return Fail("step.quarantine_no_room",
                {Log("FAILED: node(s) " + Join(bad, " ") +
                     " quarantined (RUN/quarantine.jsonl; step exit " + exit +
                     "), no spare for each, and the job's partition has " + std::to_string(room) +
                     " other node(s) for its " + std::to_string(st_.all_nodes.size()) +
                     ": not requeueing (it would never start). Submit again with --exclude=" +
                     Join(st_.quarantined, ",") +
                     " and fewer nodes or more spares, or, once a diagnosis cleared a node, "
                     "ftrain quarantine clear " +
                     s_.run_dir + " --host NODE"),
                 LastStop("quarantine"),
                 Record("failed", "quarantined",
                        {records::Str("nodes", Join(bad, ",")), records::Raw("@LOST@", ""),
                         records::Int("exit", st_.rc), records::Int("room", room)},
                        true)},
                1);
  }
  st_.faulty = st_.quarantined;
  std::vector<Action> acts = readmitted;
  std::vector<Action> requeue{
      Log("node(s) " + Join(bad, " ") + " quarantined (RUN/quarantine.jsonl; step exit " + exit +
          ") and no spare for " + (bad.size() > 1 ? "each" : "it") + ": requeueing job " + st_.job +
          " excluding " + Join(st_.quarantined, ",")),
      LastStop("quarantine"),
      Record("step_failed", "quarantine",
             {records::Str("nodes", Join(bad, ",")), records::Str("action", "requeue_excluding"),
              records::Raw("@LOST@", ""), records::Int("exit", st_.rc)},
             true)};
  acts.insert(acts.end(), requeue.begin(), requeue.end());
  return NodeRequeue("step.quarantine_requeue", acts, {}, "quarantine");
}

// At a start, after the spares were chosen: a quarantined node of the allocation gets no
// ranks. A clean spare takes its place; without one the job fails (a requeue would not help:
// the exclusion of the last requeue did not hold, or this is a new submission on them).
Decision JobPolicy::QuarantineAtStart(std::vector<Action>* acts, std::string* rule) {
  if (st_.quarantined.empty()) return {"", {}};
  std::vector<std::string> dropped;
  if (st_.spares) DropQuarantinedSpares(st_.quarantined, &st_.spare_nodes, &dropped);
  const std::vector<std::string> bad = QuarantinedInUse();
  std::vector<std::string> in_job = dropped;
  in_job.insert(in_job.end(), bad.begin(), bad.end());
  if (in_job.empty()) return {"", {}};
  if (bad.size() > st_.spare_nodes.size() || (!st_.spares && !bad.empty())) {
    acts->push_back(
        Log("FAILED: node(s) " + Join(bad, " ") + " of job " + st_.job +
            " are quarantined for this run (" + s_.run_dir +
            "/quarantine.jsonl) and no clean spare can take their ranks: submit again with "
            "--exclude=" +
            Join(st_.quarantined, ",") +
            " (or, once a diagnosis cleared a node, ftrain quarantine clear " + s_.run_dir +
            " --host NODE)"));
    acts->push_back(LastStop("quarantine"));
    acts->push_back(Record("failed", "quarantined", {records::Str("nodes", Join(bad, ","))}));
    Action exit = Act(Action::Kind::kExit);
    exit.code = 1;
    acts->push_back(exit);
    st_.phase = Phase::kDone;
    return {*rule + "+start.quarantined", *acts};
  }
  for (const auto& n : bad) {
    TakeSpare(n);
  }
  acts->push_back(Log("quarantined node(s) " + Join(in_job, " ") +
                      " (RUN/quarantine.jsonl) get no ranks: training on " +
                      Join(st_.train_nodes, " ") + ", spare " +
                      (st_.spare_nodes.empty() ? "none" : Join(st_.spare_nodes, " "))));
  acts->push_back(Record("quarantine_skipped", "quarantine",
                         {records::Str("nodes", Join(in_job, ",")),
                          records::Str("train_nodes", Join(st_.train_nodes, ","))}));
  *rule += "+start.quarantined_spared";
  return {"", {}};
}

}  // namespace ftrain::orch
