// orch/job_policy_end.cc - JobPolicy, part 4: what a training step's end means (finished,
// stopped, a configuration error, a dead node, an unhealthy node, a rank failure), the spare
// swap, the localisation of a bad node, and the job's end: a requeue (issued before the
// agents are drained, retried and verified by the runner), a failure or the finish.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "orch/job_policy.h"
#include "orch/job_policy_util.h"

namespace ftrain::orch {
namespace {

using policy_util::Act;
using policy_util::Contains;
using policy_util::Fmt;
using policy_util::Join;
using policy_util::LastStop;
using policy_util::WithNodes;
using records::Field;

Field Lost() { return records::Raw("@LOST@", ""); }

void Append(std::vector<Action>* to, const std::vector<Action>& from) {
  to->insert(to->end(), from.begin(), from.end());
}

}  // namespace

int NextFailedStartCount(const std::string& failed_starts_text, const std::string& newest) {
  std::istringstream in(failed_starts_text);
  std::string prev, count;
  in >> prev >> count;
  const bool numeric = !count.empty() && count.find_first_not_of("0123456789") == std::string::npos;
  return prev == newest && numeric && count.size() < 9 ? std::stoi(count) + 1 : 1;
}

std::vector<std::string> BlameNodes(const std::vector<std::string>& nodes,
                                    const std::vector<bool>& alone_ok,
                                    const std::vector<bool>& pair_ok) {
  std::vector<std::string> bad;
  for (size_t i = 0; i < nodes.size() && i < alone_ok.size(); ++i) {
    if (!alone_ok[i]) bad.push_back(nodes[i]);
  }
  // Every node failing alone is no node's fault (the software, a setting, a timeout): blaming
  // them all would exclude the whole allocation.
  if (!bad.empty() && bad.size() == nodes.size()) return {};
  const size_t n = nodes.size();
  if (!bad.empty() || n < 3 || pair_ok.size() != n) return bad;
  // pair i is (nodes[i], nodes[i+1 mod n]).
  bool some_pass = false;
  for (bool ok : pair_ok) some_pass = some_pass || ok;
  if (!some_pass) return bad;  // every pair fails: the network, not a node
  for (size_t i = 0; i < n; ++i) {
    if (!pair_ok[i] && !pair_ok[(i + n - 1) % n]) bad.push_back(nodes[i]);
  }
  return bad;
}

std::vector<Field> JobPolicy::DetectionFields(const std::string& node, double wall) const {
  if (node == st_.detect_node && !st_.detect_fields.empty()) return st_.detect_fields;
  return {records::Num("detected", wall, 6), records::Str("detected_by", "slurm")};
}

// ---- the step's end -------------------------------------------------------------------------

Decision JobPolicy::StepExited(const Observation& o) {
  std::vector<Action> grow_acts;
  GrowAbandoned(o.rc, &grow_acts);
  st_.rc = o.rc;
  st_.step_end_wall = o.wall;
  st_.config_error = o.config_error;
  st_.step_quarantine = o.quarantine;
  st_.step_hangs = o.hangs;
  st_.step_node_faults = o.node_faults;
  st_.localised = false;
  st_.lease_retry_until = -1;  // a step ran: the run lease was renewed
  if (!o.checkpoint.empty()) st_.newest_checkpoint = o.checkpoint;
  // A 79 is a rollback only when rank 0 recorded it (it appends before any rank exits): a 79
  // without a new line of RUN/rollbacks.jsonl is a rank failure like any other.
  const int rollbacks_before = st_.rollbacks_seen;
  st_.rollback_recorded = o.rc == kExitRollback && o.rollbacks >= 0 && rollbacks_before >= 0 &&
                          o.rollbacks > rollbacks_before;
  st_.rollbacks_seen = o.rollbacks;
  // A hang's step may end with a task killed (128 + 9: srun's SIGKILL a KillWait after the
  // first exit 78, to a rank whose wait outlasted it) rather than 78: a new record of
  // RUN/hangs.jsonl says what the step's end was.
  const bool new_hang = st_.hangs_seen >= 0 && static_cast<int>(o.hangs.size()) > st_.hangs_seen;
  st_.hangs_seen = static_cast<int>(o.hangs.size());
  if (new_hang && st_.rc > 128 && st_.detect_node.empty()) st_.rc = kExitHang;
  if (o.rc != kExitStorage) {  // any other end of a step ends a storage outage
    st_.storage_since = -1;
    st_.storage_exits = 0;
    st_.storage_backoff_s = kStorageBackoffS;
  }
  // A step that ended 0 after one of its nodes was declared dead did not finish.
  if (st_.rc == 0 && !st_.detect_node.empty()) st_.rc = 1;
  const bool intended = st_.rc == 0 || st_.rc == kExitRequeue || st_.rc == kExitConfig ||
                        st_.rc == kExitStorage ||
                        (st_.rc == kExitRollback && st_.rollback_recorded);
  Decision d;
  if (!intended && !st_.stop_requested && st_.detect_node.empty() && !st_.watch.empty()) {
    // A node whose slurmd refuses may have died a moment ago (its peers' collectives broke at
    // once): its heartbeat gets the time to confirm it.
    st_.phase = Phase::kConfirming;
    d = {"step.confirm", {WithNodes(Action::Kind::kConfirmDeath, st_.watch)}};
  } else {
    d = Decide(o.now);
  }
  if (st_.rc == kExitRollback && !st_.rollback_recorded && !st_.stop_requested &&
      st_.detect_node.empty()) {
    d.actions.insert(d.actions.begin(),
                     Log("the step exited 79 but RUN/rollbacks.jsonl has no new record (" +
                         (o.rollbacks < 0 ? std::string("unreadable")
                                          : std::to_string(o.rollbacks) + " records, " +
                                                std::to_string(rollbacks_before) + " before") +
                         "): not a rollback; treated as a rank failure"));
  }
  d.actions.insert(d.actions.begin(), grow_acts.begin(), grow_acts.end());
  return d;
}

Decision JobPolicy::AfterConfirm(const Observation& o) {
  std::vector<Action> acts;
  if (!o.node.empty()) {
    st_.declared.push_back(o.node);
    st_.detect_node = o.node;
    st_.detect_fields = o.fields;
    acts.push_back(Log(o.detail));
    if (st_.spares && !st_.spare_nodes.empty()) {
      acts.push_back(WithNodes(Action::Kind::kRelease, st_.declared));
    }
  }
  Decision d = Decide(o.now);
  acts.insert(acts.end(), d.actions.begin(), d.actions.end());
  return {o.node.empty() ? d.rule : "step.confirmed_dead", acts};
}

// rc is known, every sign looked at: finish, stop, fail, or find out more.
Decision JobPolicy::Decide(double now) {
  const int rc = st_.rc;
  const std::string exit = std::to_string(rc);
  if (rc == 0) {
    return Fail("step.finished",
                {Log("training finished"), Record("finished", "complete"), LastStop("complete")},
                0);
  }
  if (StoppedToGrow(rc)) return Grow();
  if (rc == kExitRequeue || st_.stop_requested) {
    return Requeue(
        "step.stopped",
        {Log("ranks checkpointed and stopped (exit " + exit + "); requeueing job " + st_.job),
         LastStop("preempted"), Record("stopped", "preempted", {Lost()})},
        {});
  }
  if (Decision nf = NodeFaultAfterStep(); !nf.rule.empty()) return nf;  // exit 76
  if ((rc == kExitConfig || !st_.config_error.empty()) &&
      st_.train_nodes.size() < st_.train_target) {
    // A shrunk elastic run the trainer refused (its plan does not fit the smaller world's
    // memory, checked before the model is allocated): the full allocation may fit; a real
    // configuration error fails the requeued start as always.
    const std::string why = st_.config_error.empty() ? "see the ranks' messages above"
                                                     : st_.config_error.substr(0, 2000);
    return Requeue(
        "step.shrunk_refused",
        {Log("the trainer refused the shrunk world of " + std::to_string(st_.train_nodes.size()) +
             " of " + std::to_string(st_.train_target) + " training nodes (exit " + exit +
             "): " + why + "; requeueing job " + st_.job + " for its full size"),
         LastStop("shrunk_refused"),
         Record("step_failed", "shrunk_refused", {records::Int("exit", rc)})},
        {});
  }
  if (rc == kExitConfig || !st_.config_error.empty()) {
    const std::string why = st_.config_error.empty() ? "see the ranks' messages above"
                                                     : st_.config_error.substr(0, 2000);
    return Fail(
        "step.config_error",
        {Log("FAILED: the trainer refused its configuration or input (exit " + exit + "): " + why),
         Log("not restarting (a restart cannot fix this); fix the settings and submit "
             "again"),
         LastStop("config_error"), Record("failed", "config_error", {records::Int("exit", rc)})},
        2);
  }
  if (rc == kExitStorage && st_.detect_node.empty()) return StorageOutage(now);
  if (rc == kExitRollback && st_.detect_node.empty() && st_.rollback_recorded) return Rollback();
  if ((rc == kExitSdc || rc == kExitHang) && !st_.stop_requested) {
    Decision q = QuarantineAfterStep();  // else: a rank failure like any other
    if (!q.rule.empty()) return q;
  }
  if (!st_.detect_node.empty() && !st_.spares) {
    std::vector<Field> f{records::Str("node", st_.detect_node), Lost(), records::Int("exit", rc)};
    for (const auto& x : st_.detect_fields) f.push_back(x);
    return RequeueExcludingDead(
        "step.dead_requeue",
        {LastStop("node_failure"), Record("step_failed", "node_failure", f, true)});
  }
  if (st_.spares) {
    st_.phase = Phase::kFindingDead;
    return {"step.find_dead", {Act(Action::Kind::kQueryNodesInJob)}};
  }
  st_.phase = Phase::kProbing;
  st_.probe_for_spares = false;
  (void)now;
  return {"step.probe", {WithNodes(Action::Kind::kProbeHealth, st_.all_nodes)}};
}

// The training nodes no longer in the job (Slurm took them out) or declared dead. When
// slurmctld did not answer, only the declared ones: an empty answer is never "all dead".
std::vector<std::string> JobPolicy::DeadOf(const Observation& o) const {
  std::vector<std::string> dead;
  for (const auto& n : st_.train_nodes) {
    const bool gone = o.known && !Contains(o.nodes, n);
    if (gone || Contains(st_.declared, n)) dead.push_back(n);
  }
  return dead;
}

Decision JobPolicy::FoundDead(const Observation& o) {
  std::vector<Action> acts;
  if (o.known) DropLostSpares(o.nodes, "", &acts);
  const std::vector<std::string> dead = DeadOf(o);
  if (dead.empty()) {
    // The training nodes only: an idle spare that does not answer costs nothing yet.
    st_.phase = Phase::kProbing;
    st_.probe_for_spares = true;
    acts.push_back(WithNodes(Action::Kind::kProbeHealth, st_.train_nodes));
    return {"step.probe", acts};
  }
  return ReplaceOrRequeue(dead, st_.step_end_wall, acts);
}

Decision JobPolicy::Probed(const Observation& o) {
  const std::string exit = std::to_string(st_.rc);
  if (o.ok) return RankFailure(o.now);
  if (Decision nf = NodeFaultAfterProbe(o); !nf.rule.empty()) return nf;  // alive, cannot train
  st_.wait_until = o.now + s_.health_wait_s;
  if (st_.probe_for_spares) {
    st_.phase = Phase::kHealthPoll;
    st_.next_poll = o.now + 1;
    return {"step.unhealthy_spares",
            {Log("training step failed (exit " + exit +
                 ") and a node does not answer: waiting "
                 "up to " +
                 Fmt(s_.health_wait_s) + " s for Slurm to take it out of the job")}};
  }
  std::vector<Action> acts{
      Log("training step failed (exit " + exit +
          ") and a node does not answer: leaving it "
          "to Slurm's node-failure requeue for up to " +
          Fmt(s_.health_wait_s) + " s"),
      Record("step_failed", "node_failure", {Lost(), records::Int("exit", st_.rc)}, true)};
  // Slurm's own requeue ends this script without asking: it is counted now, as one of the
  // run's node requeues (the healthwait.timeout requeue is the same one, not counted again).
  Decision spent = CountNodeRequeue("step.unhealthy", &acts, "node_failure");
  if (!spent.rule.empty()) return spent;
  st_.phase = Phase::kHealthWait;
  return {"step.unhealthy", acts};
}

// Spares: a node does not answer; Slurm's view of the job is asked every second.
Decision JobPolicy::HealthPollTick(const Observation& o) {
  if (o.now < st_.next_poll) return {"", {}};
  st_.next_poll = o.now + 1;
  return {"healthpoll.look", {Act(Action::Kind::kQueryNodesInJob)}};
}

Decision JobPolicy::HealthPolled(const Observation& o) {
  std::vector<Action> acts;
  if (o.known) DropLostSpares(o.nodes, "", &acts);
  const std::vector<std::string> dead = DeadOf(o);
  if (!dead.empty()) {
    Decision d = ReplaceOrRequeue(dead, o.wall, acts);
    d.rule = "healthpoll.found";
    return d;
  }
  if (o.now < st_.wait_until) return {acts.empty() ? "" : "healthpoll.spare_lost", acts};
  acts.push_back(Log("no node was taken out of the job within " + Fmt(s_.health_wait_s) +
                     " s: requeueing job " + st_.job));
  acts.push_back(
      Record("step_failed", "node_failure", {Lost(), records::Int("exit", st_.rc)}, true));
  return NodeRequeue("healthpoll.timeout", acts, {}, "node_failure");
}

Decision JobPolicy::HealthWait(const Observation& o) {
  if (o.now < st_.wait_until) return {"", {}};
  return Requeue("healthwait.timeout",  // counted when the wait began (step.unhealthy)
                 {Log("Slurm did not requeue within " + Fmt(s_.health_wait_s) +
                      " s: requeueing job " + st_.job),
                  LastStop("node_failure")},
                 {});
}

// A rank failed and every node answers.
Decision JobPolicy::RankFailure(double now) {
  const std::string exit = std::to_string(st_.rc);
  // A failure that repeats in this start may be a bad GPU or port on a live node: with the
  // pre-flight on, check each node alone (and in pairs) before restarting on the same nodes.
  const std::vector<std::string>& nodes = st_.spares ? st_.train_nodes : st_.all_nodes;
  if (st_.injob_restarts >= 1 && s_.preflight && !st_.localised && !nodes.empty()) {
    st_.localised = true;
    st_.localise_after = LocaliseAfter::kRankFailure;
    st_.phase = Phase::kLocalising;
    return {"step.localise",
            {Log("training step failed again (exit " + exit +
                 ") with every node answering: "
                 "checking the nodes alone and in pairs for a bad GPU or port"),
             WithNodes(Action::Kind::kLocalise, nodes)}};
  }
  if (st_.injob_restarts >= s_.max_injob_restarts) {
    st_.phase = Phase::kCounting;
    st_.counting = Counting::kRankFailure;
    return {"step.count_failed_start", {Act(Action::Kind::kCountFailedStart)}};
  }
  st_.injob_restarts += 1;
  st_.phase = Phase::kBackoff;
  st_.storage_wait = false;
  st_.wait_until = now + st_.backoff_s;
  return {"step.rank_failure_restart",
          {Log("training step failed (exit " + exit + ") with healthy nodes: in-job restart " +
               std::to_string(st_.injob_restarts) + "/" + std::to_string(s_.max_injob_restarts) +
               " in " + Fmt(st_.backoff_s) + " s"),
           Record("restarted", "rank_failure",
                  {Lost(), records::Int("exit", st_.rc), records::Int("injob", st_.injob_restarts)},
                  true)}};
}

Decision JobPolicy::Counted(const Observation& o) {
  const std::string exit = std::to_string(st_.rc);
  const std::string n = std::to_string(o.count), k = std::to_string(s_.max_failed_starts);
  if (st_.counting == Counting::kRollback) return RollbackCounted(o);
  if (o.count >= s_.max_failed_starts) {
    return Fail(
        "failed_start.fail",
        {Log("FAILED: the training step failed (exit " + exit + ") on healthy nodes in " + n +
             " starts in a row (" + std::to_string(s_.max_injob_restarts + 1) +
             " tries each) with no checkpoint newer than " + o.checkpoint +
             " in between: not requeueing (FTRAIN_MAX_FAILED_STARTS=" + k +
             "); find the cause in the ranks' errors above, fix it, then submit again (it "
             "resumes from " +
             o.checkpoint + ")"),
         LastStop("rank_failure"),
         Record("failed", "rank_failure_repeated",
                {Lost(), records::Int("exit", st_.rc), records::Int("failed_starts", o.count),
                 records::Str("checkpoint", o.checkpoint)},
                true)},
        1);
  }
  return Requeue(
      "failed_start.requeue",
      {Log("training step failed (exit " + exit + ") " + std::to_string(st_.injob_restarts) +
           " times with healthy nodes: requeueing (failed start " + n + " of at most " + k +
           " with no newer checkpoint than " + o.checkpoint + ")"),
       LastStop("rank_failure"),
       Record("step_failed", "rank_failure_requeue", {Lost(), records::Int("exit", st_.rc)}, true)},
      {});
}

Decision JobPolicy::Backoff(const Observation& o) {
  if (o.now < st_.wait_until) return {"", {}};
  if (!st_.storage_wait) st_.backoff_s *= 2;  // a storage outage keeps its own (StorageOutage)
  st_.storage_wait = false;
  return Launch("backoff.relaunch");
}

// ---- nodes: replace by a spare, exclude, localise -------------------------------------------

Decision JobPolicy::ReplaceOrRequeue(const std::vector<std::string>& dead, double wall,
                                     std::vector<Action> acts) {
  const std::string exit = std::to_string(st_.rc);
  const int replaced_before = st_.replacements;
  for (const auto& d : dead) {
    std::vector<Field> f{records::Str("node", d), Lost(), records::Int("exit", st_.rc)};
    for (const auto& x : DetectionFields(d, wall)) f.push_back(x);
    acts.push_back(Record("step_failed", "node_failure", f, true));
    if (st_.spare_nodes.empty() && s_.elastic && Shrink(d, DetectionFields(d, wall), &acts)) {
      continue;
    }
    if (st_.spare_nodes.empty()) {
      acts.push_back(Log("training node " + d + " failed (step exit " + exit +
                         ") and no spare is left: requeueing job " + st_.job));
      if (!st_.declared.empty()) return RequeueExcludingDead("step.dead_no_spare_left", acts);
      return NodeRequeue("step.dead_no_spare_left", acts, {}, "node_failure");
    }
    const std::string spare = TakeSpare(d);
    st_.replacements += 1;
    acts.push_back(Log("training node " + d + " failed (step exit " + exit +
                       "): its ranks move to spare " + spare + " (" +
                       std::to_string(st_.spare_nodes.size()) +
                       " spare(s) left); relaunching in this allocation"));
    std::vector<Field> r{records::Str("node", d), records::Str("spare", spare),
                         records::Int("spares_left", static_cast<int64_t>(st_.spare_nodes.size())),
                         records::Int("replacement", st_.replacements)};
    for (const auto& x : DetectionFields(d, wall)) r.push_back(x);
    acts.push_back(Record("restarted", "node_failure", r));
  }
  // The agents re-form the replication ring and choose the batch-host watchers anew.
  acts.push_back(WithNodes(Action::Kind::kWriteJobNodes, LiveNodes()));
  return Launch(st_.replacements > replaced_before ? "step.dead_replaced" : "step.dead_shrunk",
                acts);
}

int64_t JobPolicy::DropTrainingNode(const std::string& n) {
  st_.train_nodes.erase(std::remove(st_.train_nodes.begin(), st_.train_nodes.end(), n),
                        st_.train_nodes.end());
  st_.rank_hosts.erase(std::remove(st_.rank_hosts.begin(), st_.rank_hosts.end(), n),
                       st_.rank_hosts.end());
  st_.shrinks += 1;
  return static_cast<int64_t>(st_.rank_hosts.size());
}

bool JobPolicy::Shrink(const std::string& d, const std::vector<Field>& detection,
                       std::vector<Action>* acts) {
  const size_t left = st_.train_nodes.size() - (Contains(st_.train_nodes, d) ? 1 : 0);
  if (left < static_cast<size_t>(s_.elastic_min_nodes) || left == 0) return false;
  const int64_t world = DropTrainingNode(d);
  acts->push_back(Log("training node " + d + " failed (step exit " + std::to_string(st_.rc) +
                      ") and no spare is left: shrinking to " + std::to_string(left) +
                      " node(s), " + std::to_string(world) +
                      " ranks, in this allocation (FTRAIN_ELASTIC; the global batch is "
                      "unchanged, spread over fewer ranks)"));
  std::vector<Field> r{records::Str("node", d), records::Int("nodes", static_cast<int64_t>(left)),
                       records::Int("world", world), records::Int("shrink", st_.shrinks)};
  for (const auto& x : detection) r.push_back(x);
  acts->push_back(Record("restarted", "shrink", r));
  return true;
}

Decision JobPolicy::Localised(const Observation& o) {
  const bool after_preflight = st_.localise_after == LocaliseAfter::kPreflight;
  if (o.nodes.empty()) {
    if (after_preflight) return PreflightFailed();
    return RankFailure(o.now);  // every node passes alone: not a node's fault
  }
  std::vector<Action> acts{Log("node(s) " + Join(o.nodes, " ") +
                               " failed a check alone or with both neighbours: a bad GPU or "
                               "network port on a live node")};
  std::vector<std::string> bad_train;
  for (const auto& n : o.nodes) {
    if (Contains(st_.spare_nodes, n)) {  // a bad spare is dropped: it would fail a relaunch
      st_.spare_nodes.erase(std::find(st_.spare_nodes.begin(), st_.spare_nodes.end(), n));
      acts.push_back(Record("spare_lost", "node_fault", {records::Str("node", n)}));
    } else {
      bad_train.push_back(n);
    }
  }
  if (!st_.spares || bad_train.size() > st_.spare_nodes.size()) {
    st_.faulty = o.nodes;
    acts.push_back(LastStop("node_fault"));
    acts.push_back(Record(after_preflight ? "preflight_failed" : "step_failed", "node_fault",
                          {records::Str("nodes", Join(o.nodes, ",")),
                           records::Str("after", LocaliseAfterName(st_.localise_after))}));
    acts.push_back(Log("requeueing job " + st_.job + " excluding " + Join(o.nodes, ",")));
    KeepOutFaulty(
        o.nodes,
        std::string("failed the localisation after the ") + LocaliseAfterName(st_.localise_after),
        &acts);
    return CheckRoomForFaulty("localise.exclude", o.nodes, acts);
  }
  for (const auto& n : bad_train) {  // a spare takes each bad node's ranks
    const std::string spare = TakeSpare(n);
    st_.replacements += 1;
    acts.push_back(Log("its ranks move from " + n + " to spare " + spare + " (" +
                       std::to_string(st_.spare_nodes.size()) + " spare(s) left)"));
    acts.push_back(
        Record("restarted", "node_fault",
               {records::Str("node", n), records::Str("spare", spare),
                records::Int("spares_left", static_cast<int64_t>(st_.spare_nodes.size())),
                records::Int("replacement", st_.replacements)}));
  }
  KeepOutFaulty(
      o.nodes,
      std::string("failed the localisation after the ") + LocaliseAfterName(st_.localise_after),
      &acts);
  acts.push_back(WithNodes(Action::Kind::kRelease, o.nodes));  // out of the job: not used again
  acts.push_back(WithNodes(Action::Kind::kWriteJobNodes, LiveNodes()));
  if (after_preflight) {
    Decision d = StartAgentsOrLaunch();
    Append(&acts, d.actions);
    return {"localise.replaced+" + d.rule, acts};
  }
  return Launch("localise.replaced", acts);
}

// The first spare takes `node`'s ranks and its place among the training nodes; returns it.
std::string JobPolicy::TakeSpare(const std::string& node) {
  const std::string spare = st_.spare_nodes.front();
  st_.spare_nodes.erase(st_.spare_nodes.begin());
  std::replace(st_.rank_hosts.begin(), st_.rank_hosts.end(), node, spare);
  std::replace(st_.train_nodes.begin(), st_.train_nodes.end(), node, spare);
  return spare;
}

// ---- the job's end --------------------------------------------------------------------------

// No spare: release the dead nodes (else the requeued job waits in COMPLETING for them), wait
// until slurmctld flags them not responding (the scheduler then skips them), requeue, and
// exclude them (ExcNodeList, settable while the job is pending).
Decision JobPolicy::RequeueExcludingDead(std::string rule, std::vector<Action> acts) {
  st_.exclude = st_.declared;
  st_.phase = Phase::kReleasing;
  acts.push_back(WithNodes(Action::Kind::kRelease, st_.declared));
  return {std::move(rule), acts};
}

Decision JobPolicy::Requeue(std::string rule, std::vector<Action> acts,
                            std::vector<std::string> exclude) {
  if (!exclude.empty()) st_.exclude = exclude;
  if (st_.agents) {
    // TERM to the agents' steps and their sruns let go (SIGKILL): Slurm's TERM to the batch
    // step after the requeue would make an srun forward SIGKILL to its agent mid-drain.
    Action sig = Act(Action::Kind::kSignalAgents);
    sig.text = "TERM";
    acts.push_back(sig);
  }
  Action rq = Act(Action::Kind::kRequeue);
  rq.seconds = RequeueBudget();
  // A user's scancel may come while the controller decides (a signal waits for the running
  // action): no try requeues a job slurmctld says is cancelled (Slurm 22.05 would run it again).
  rq.text = "unless_cancelled";
  acts.push_back(rq);
  st_.phase = Phase::kRequeueing;
  return {std::move(rule), acts};
}

Decision JobPolicy::RequeueStopped(const std::string& during) {
  return Requeue(
      "stop.requeue_now",
      {Log(st_.stop_signal + " arrived during " + during +
           ": nothing new to checkpoint; requeueing job " + st_.job),
       LastStop("preempted"), Record("stopped", "preempted", {records::Str("during", during)})},
      {});
}

Decision JobPolicy::Fail(std::string rule, std::vector<Action> acts, int code) {
  st_.exit_code = code;
  if (st_.agents) {
    st_.phase = Phase::kDraining;
    acts.push_back(Act(Action::Kind::kStopAgents));
    return {std::move(rule), acts};
  }
  st_.phase = Phase::kDone;
  Action e = Act(Action::Kind::kExit);
  e.code = code;
  acts.push_back(e);
  return {std::move(rule), acts};
}

// ---- the job's end: release, the flag, the requeue, the agents -------------------------------

Decision JobPolicy::Released(const Observation& o) {
  st_.released = o.ok;
  st_.phase = Phase::kWaitingFlag;
  Action w = WithNodes(Action::Kind::kWaitNotResponding, st_.declared);
  w.seconds = s_.norespond_wait_s;
  return {"end.released", {w}};
}

Decision JobPolicy::FlagWaited(const Observation& o) {
  return AskRoomForDead(o.detail);  // job_policy_requeue_checks.cc
}

// A verified requeue whose exclusion leaves the partition short waits for its room
// (RoomAfterRequeue); every other one ends here.
Decision JobPolicy::Requeued(const Observation& o) {
  if (o.ok && NeedsRoomAfterRequeue()) {
    st_.held_requeued = o;
    st_.room_for = RoomFor::kAfterRequeue;
    st_.phase = Phase::kCheckingRoom;
    return {"end.room_after_requeue", {Act(Action::Kind::kQueryRoom)}};
  }
  return RequeueDone(o);
}

Decision JobPolicy::RequeueDone(const Observation& o) {
  std::vector<Action> acts;
  st_.exit_code = 0;
  if (!o.ok) {
    // Never COMPLETED (afterok dependents would start) and never "requeueing" in silence.
    st_.exit_code = 1;
    acts.push_back(Log("FAILED: could not requeue job " + st_.job + " (" + o.detail +
                       "); the job ends FAILED, so that nothing waiting on it starts: submit "
                       "it again (it resumes from the newest complete checkpoint)"));
    acts.push_back(Record("failed", "requeue_failed", {records::Str("why", o.detail)}));
  } else if (!st_.exclude.empty() || !st_.faulty.empty() || !st_.quarantined.empty()) {
    Action ex = WithNodes(Action::Kind::kExclude, st_.exclude);
    ex.faulty = st_.faulty;
    // Every quarantined node of the run stays excluded, whatever this requeue is for (the
    // runner replaces ftrain's earlier exclusions with this list).
    for (const auto& q : st_.quarantined) {
      if (!Contains(ex.faulty, q)) ex.faulty.push_back(q);
    }
    ex.released = st_.released;
    ex.num_nodes = st_.requeue_nodes;
    ex.train_count = st_.requeue_nodes > 0 ? static_cast<int>(st_.train_nodes.size()) : 0;
    acts.push_back(ex);
  }
  const std::string rule = o.ok ? "end.requeued" : "end.requeue_failed";
  if (st_.agents) {
    Action w = Act(Action::Kind::kWaitAgents);
    w.seconds = 10;
    acts.push_back(w);
    st_.phase = Phase::kDraining;
    return {rule, acts};
  }
  st_.phase = Phase::kDone;
  Action exit = Act(Action::Kind::kExit);
  exit.code = st_.exit_code;
  acts.push_back(exit);
  return {rule, acts};
}

Decision JobPolicy::Drained(const Observation&) {
  st_.phase = Phase::kDone;
  st_.agents = false;
  Action exit = Act(Action::Kind::kExit);
  exit.code = st_.exit_code;
  return {"end.exit", {exit}};
}

}  // namespace ftrain::orch
