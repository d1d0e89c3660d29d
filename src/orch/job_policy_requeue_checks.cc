// orch/job_policy_requeue_checks.cc - JobPolicy, part 7: what the job checks on its way to a
// requeue. A requeue excluding dead nodes first asks whether the partition can hold the job
// without them (else it pends for ever: its ExcNodeList outlives the repair); a node found
// faulty is kept out of the run's later starts and requeues (a RUN/quarantine.jsonl line, cause
// node_fault, for FTRAIN_FAULTY_KEEP_S); a user's cancel that comes while the requeue is on its
// way is honoured (slurmctld is asked, and no try of the requeue runs a cancelled job).
#include "orch/job_policy.h"
#include "orch/job_policy_util.h"
#include "orch/quarantine.h"

namespace ftrain::orch {

using policy_util::Act;
using policy_util::Contains;
using policy_util::Fmt;
using policy_util::Join;
using policy_util::WithNodes;

// A line of RUN/quarantine.jsonl (cause node_fault) for each node, and the node among this
// start's quarantined ones: the exclusion of the next requeue alone would not hold (a later
// requeue's ExcNodeList replaces it).
void JobPolicy::KeepOutFaulty(const std::vector<std::string>& nodes, const std::string& reason,
                              std::vector<Action>* acts) {
  for (const auto& n : nodes) {
    // Excluded by every requeue of this start too (a spare took its ranks: a later requeue).
    if (!Contains(st_.quarantined, n)) st_.quarantined.push_back(n);
    Action q = WithNodes(Action::Kind::kQuarantine, {n});
    q.text = kFaultyCause;
    q.record.fields = {records::Str("reason", reason), records::Int("exit", st_.rc)};
    acts->push_back(q);
  }
  if (nodes.empty()) return;
  acts->push_back(
      Log("node(s) " + Join(nodes, " ") + " stay out of this run's starts and requeues for " +
          (s_.faulty_keep_s > 0 ? Fmt(s_.faulty_keep_s) + " s (FTRAIN_FAULTY_KEEP_S)"
                                : std::string("the whole run (FTRAIN_FAULTY_KEEP_S=0)")) +
          ": " + s_.run_dir + "/quarantine.jsonl, cause " + kFaultyCause +
          "; ftrain quarantine clear " + s_.run_dir +
          " --host NODE once it is repaired uses it again sooner"));
}

// No spare for the faulty nodes: they are kept out like quarantined ones, so the requeue asks the
// partition first (job_policy_quarantine.cc, RoomKnown): fewer spares, or FAILED naming them
// when the partition cannot hold the job without them (it would pend for ever).
Decision JobPolicy::CheckRoomForFaulty(std::string rule, const std::vector<std::string>& bad,
                                       std::vector<Action> acts) {
  for (const auto& b : bad) {
    if (!Contains(st_.quarantined, b)) st_.quarantined.push_back(b);
  }
  st_.quarantine_bad = bad;
  st_.room_for = RoomFor::kQuarantine;
  st_.phase = Phase::kCheckingRoom;
  acts.push_back(Act(Action::Kind::kQueryRoom));
  return {std::move(rule), acts};
}

// sinfo did not answer the room question: true while it is asked again (every kRoomAskEveryS
// for FTRAIN_REQUEUE_RETRY_S, a slurmctld failover's length), false once that is over and the
// caller goes on without the answer. A requeue sent blind may pend for ever in a partition
// that cannot hold the job (simulation seed 4073).
bool JobPolicy::RoomUnanswered(double now) {
  if (st_.room_unknown_since < 0) st_.room_unknown_since = now;
  if (now - st_.room_unknown_since >= s_.requeue_retry_s) return false;
  st_.room_ask_at = now + kRoomAskEveryS;
  return true;
}

// The partition's room is known (or sinfo stays silent past the retry): what it was asked for
// decides.
Decision JobPolicy::RoomAnswered(const Observation& o) {
  if (!o.known && RoomUnanswered(o.now)) return {"", {}};
  st_.room_unknown_since = st_.room_ask_at = -1;
  if (st_.room_for == RoomFor::kAfterRequeue) return RoomAfterRequeue(o);
  st_.room_known = true;
  return st_.room_for == RoomFor::kDead ? DeadRoomKnown(o) : RoomKnown(o);
}

Decision JobPolicy::RoomAskAgain(const Observation& o) {
  if (st_.room_ask_at < 0 || o.now < st_.room_ask_at) return {"", {}};
  st_.room_ask_at = -1;
  return {"room.ask_again",
          {Log("sinfo did not answer the partition's room (" + Fmt(o.now - st_.room_unknown_since) +
               " s): asking again"),
           Act(Action::Kind::kQueryRoom)}};
}

// The dead nodes are flagged (or the wait is over): can the partition hold the job without
// them and the run's faulty and quarantined nodes?
Decision JobPolicy::AskRoomForDead(const std::string& flagged) {
  st_.dead_seen = flagged;
  st_.room_for = RoomFor::kDead;
  st_.phase = Phase::kCheckingRoom;
  return {"end.room", {Act(Action::Kind::kQueryRoom)}};
}

Decision JobPolicy::DeadRoomKnown(const Observation& o) {
  std::vector<std::string> kept;  // the run's faulty and quarantined nodes
  for (const auto& v : {st_.faulty, st_.quarantined}) {
    for (const auto& n : v) {
      if (!Contains(kept, n)) kept.push_back(n);
    }
  }
  size_t room = 0, room_with_dead = 0;
  for (const auto& n : o.nodes) {
    if (Contains(kept, n)) continue;
    room_with_dead += 1;
    room += Contains(st_.declared, n) ? 0 : 1;
  }
  const size_t all = st_.all_nodes.size();
  const size_t train = st_.spares ? st_.train_nodes.size() : all;
  const std::string seen = "Slurm sees: " + st_.dead_seen;
  if (!o.known || room >= all) {
    return NodeRequeue("end.requeue_excluding",
                       {Log("requeueing job " + st_.job + " excluding " + Join(st_.declared, ",") +
                            " (released: " + (st_.released ? "1" : "0") + "; " + seen + ")"),
                        Record("requeue_excluding", "node_failure",
                               {records::Str("nodes", Join(st_.declared, ",")),
                                records::Int("released", st_.released ? 1 : 0)})},
                       st_.declared, "node_failure");
  }
  if (room >= train) {  // only the spares give way (as a quarantine's requeue_fewer)
    st_.requeue_nodes = static_cast<int>(room);
    return NodeRequeue(
        "end.requeue_fewer",
        {Log("requeueing job " + st_.job + " excluding " + Join(st_.declared, ",") + " on " +
             std::to_string(room) + " node(s) (" + std::to_string(train) +
             " training, as before): the job's partition has no more besides them and " +
             (kept.empty() ? "none kept out" : Join(kept, ",")) + " (" + seen + ")"),
         Record("requeue_excluding", "node_failure",
                {records::Str("nodes", Join(st_.declared, ",")),
                 records::Int("released", st_.released ? 1 : 0),
                 records::Int("num_nodes", static_cast<int64_t>(room))})},
        st_.declared, "node_failure");
  }
  // Excluded, they would stay excluded after their repair: the job would pend for ever. Slurm
  // schedules no node while it is down: without the exclusion the job pends until enough are
  // back, then runs (with fewer spares if the kept-out nodes leave too few for them).
  st_.exclude.clear();
  if (room_with_dead < all && room_with_dead >= train) {
    st_.requeue_nodes = static_cast<int>(room_with_dead);
  }
  return NodeRequeue(
      "end.requeue_no_room",
      {Log("the job's partition has " + std::to_string(room) + " node(s) besides " +
           Join(st_.declared, ",") + (kept.empty() ? "" : " and " + Join(kept, ",")) +
           " for the job's " + std::to_string(train) + " training node(s): requeueing job " +
           st_.job + " without excluding the dead node(s) " + Join(st_.declared, ",") +
           " (Slurm does not schedule a node while it is down; the job pends until enough "
           "nodes are back; " +
           seen + ")"),
       Record("requeue_no_room", "node_failure",
              {records::Str("nodes", Join(st_.declared, ",")),
               records::Int("room", static_cast<int64_t>(room)),
               records::Int("released", st_.released ? 1 : 0)})},
      {}, "node_failure");
}

// A requeue that did not ask the partition (a stop, a rank failure, the run lease) but excludes
// the run's kept-out nodes: without room for the job the requeued job would pend for ever.
// Asked after the requeue landed (the stop paths race the time limit; ExcNodeList is set on
// the pending job anyway).
bool JobPolicy::NeedsRoomAfterRequeue() const {
  if (st_.room_known) return false;
  return !st_.exclude.empty() || !st_.faulty.empty() || !st_.quarantined.empty();
}

Decision JobPolicy::RoomAfterRequeue(const Observation& o) {
  st_.room_known = true;
  st_.phase = Phase::kRequeueing;
  Observation requeued = *st_.held_requeued;
  st_.held_requeued.reset();
  std::vector<std::string> out = st_.exclude;
  for (const auto& v : {st_.faulty, st_.quarantined}) {
    for (const auto& n : v) {
      if (!Contains(out, n)) out.push_back(n);
    }
  }
  size_t room = 0;
  for (const auto& n : o.nodes) room += Contains(out, n) ? 0 : 1;
  const size_t train = st_.spares ? st_.train_nodes.size() : st_.all_nodes.size();
  std::vector<Action> acts;
  std::string rule = "end.room_ok";
  if (o.known && room < st_.all_nodes.size() && room >= train) {
    st_.requeue_nodes = static_cast<int>(room);  // fewer spares, the same training nodes
    rule = "end.requeued_fewer";
    acts.push_back(Log("the job's partition has " + std::to_string(room) + " node(s) besides " +
                       Join(out, ",") + " for the job's " + std::to_string(st_.all_nodes.size()) +
                       ": the requeued job " + st_.job + " gets " + std::to_string(room) +
                       " node(s) (" + std::to_string(train) + " training, as before)"));
  } else if (o.known && room < train) {
    // Dead nodes: Slurm skips them while they are down (see DeadRoomKnown). Faulty or
    // quarantined ones leave too few: say so; the pending job waits for an operator.
    st_.exclude.clear();
    rule = "end.requeued_no_room";
    acts.push_back(Log(
        "WARNING: the job's partition has " + std::to_string(room) + " node(s) besides " +
        Join(out, ",") + " for the job's " + std::to_string(train) +
        " training node(s): the dead ones are not excluded (Slurm skips a node while it is "
        "down); if job " +
        st_.job +
        " still pends, the run's kept-out nodes leave too few: scancel it and submit again with "
        "fewer nodes, or delete the lines of repaired nodes from " +
        s_.run_dir + "/quarantine.jsonl"));
  }
  Decision d = RequeueDone(requeued);
  acts.insert(acts.end(), d.actions.begin(), d.actions.end());
  return {rule + "+" + d.rule, acts};
}

// A TERM while the job is on its way to a requeue (releasing dead nodes, waiting for their
// flag, asking the partition's room): a user's scancel must not be requeued. Slurm's own TERM
// after the requeue comes later, in kRequeueing or kDraining, and is ignored there.
Decision JobPolicy::TermWhileEnding(const Observation& o) {
  (void)o;
  if (st_.term_ending) return {"", {}};  // asked already
  st_.term_ending = true;
  Action ask = Act(Action::Kind::kQueryJobState);
  ask.seconds = kTermAskBoundS;
  return {"term.ask_ending",
          {Log("TERM while job " + st_.job + " is on its way to a requeue (" +
               PhaseName(st_.phase) + "): asking slurmctld whether it is cancelled"),
           ask}};
}

Decision JobPolicy::EndingJobState(const Observation& o) {
  const TermAnswer answer = ClassifyTermAnswer(o.job_state, o.reason);
  const bool before_requeue = st_.phase == Phase::kReleasing || st_.phase == Phase::kWaitingFlag ||
                              st_.phase == Phase::kCheckingRoom;
  if (answer == TermAnswer::kCancelled && before_requeue) {
    return Fail("term.cancelled_ending",
                {Log("TERM: job " + st_.job + " is cancelled (" + o.job_state +
                     (o.reason.empty() ? "" : ", " + o.reason) +
                     "): not requeueing it (a cancelled job stays cancelled); stopping"),
                 Record("stopped", "cancelled", {records::Str("during", PhaseName(st_.phase))})},
                0);
  }
  return {"term.ending_goes_on",
          {Log("TERM while ending: slurmctld says " +
               (o.job_state.empty() ? std::string("nothing") : o.job_state + ", " + o.reason) +
               ": the requeue goes on (no try of it requeues a job slurmctld says is "
               "cancelled)")}};
}

// The runner's requeue found the job cancelled (a scancel while the controller decided): the
// job ends as the user asked, exit 0, never requeued.
Decision JobPolicy::RequeueRefusedCancelled(const Observation& o) {
  st_.exit_code = 0;
  std::vector<Action> acts{
      Log("not requeueing job " + st_.job + ": " + o.detail +
          " (a user cancelled it while the controller was deciding; it stays cancelled)"),
      Record("stopped", "cancelled", {records::Str("during", "the requeue")})};
  if (st_.agents) {
    Action w = Act(Action::Kind::kWaitAgents);
    w.seconds = 10;
    acts.push_back(w);
    st_.phase = Phase::kDraining;
    return {"end.requeue_cancelled", acts};
  }
  st_.phase = Phase::kDone;
  Action exit = Act(Action::Kind::kExit);
  exit.code = 0;
  acts.push_back(exit);
  return {"end.requeue_cancelled", acts};
}

}  // namespace ftrain::orch
