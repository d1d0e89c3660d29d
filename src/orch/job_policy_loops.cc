// orch/job_policy_loops.cc - JobPolicy, part 7: the bounds of the loops a step's end can start
// (issue 44). A rollback (exit 79) restarts in place only when RUN/rollbacks.jsonl has its
// record, and only FTRAIN_MAX_ROLLBACK_RESTARTS times per newest checkpoint; then failed
// starts count. A storage outage at resume (exit 74) restarts in place after a back-off until
// FTRAIN_STORAGE_OUTAGE_S; then the job fails, the checkpoints untouched. A requeue for a
// node's failure, fault or quarantine counts in RUN/.node_requeues against the newest
// checkpoint; one past FTRAIN_MAX_NODE_REQUEUES ends the job FAILED. No I/O here.
#include <algorithm>

#include "orch/job_policy.h"
#include "orch/job_policy_util.h"

namespace ftrain::orch {

using policy_util::Act;
using policy_util::Fmt;
using policy_util::LastStop;

namespace {

records::Field Lost() { return records::Raw("@LOST@", ""); }

std::string Newest(const std::string& checkpoint) {
  return checkpoint.empty() ? "none" : checkpoint;
}

}  // namespace

// Exit 79 with its record: rank 0 rolled the run back and every rank exited. No back-off, no
// in-job restart counted; guard.max_rollbacks in the trainer ends a diverging run (exit 2).
// A trainer that exits 79 again and again without ever committing a newer checkpoint (its
// budget window never fills, or it rolls back at resume) is a crash loop all the same.
Decision JobPolicy::Rollback() {
  const std::string newest = Newest(st_.newest_checkpoint);
  if (newest != st_.rollback_checkpoint) {
    st_.rollback_checkpoint = newest;
    st_.rollback_restarts = 0;
  }
  st_.rollback_restarts += 1;
  const std::string n = std::to_string(st_.rollback_restarts);
  const std::string k = std::to_string(s_.max_rollback_restarts);
  if (st_.rollback_restarts > s_.max_rollback_restarts) {
    st_.phase = Phase::kCounting;
    st_.counting = Counting::kRollback;
    return {"step.rollback_budget",
            {Log("the trainer rolled the run back (exit 79) " + n +
                 " times with no checkpoint newer than " + newest +
                 ": past FTRAIN_MAX_ROLLBACK_RESTARTS=" + k +
                 ", so not restarting in place again; counting a failed start"),
             Act(Action::Kind::kCountFailedStart)}};
  }
  return Launch("step.rollback",
                {Log("the trainer rolled the run back (exit 79, RUN/rollbacks.jsonl): restarting "
                     "in place at once; it resumes the newest restorable snapshot and skips the "
                     "rolled-back steps (rollback restart " +
                     n + " of at most " + k + " with no checkpoint newer than " + newest + ")"),
                 Record("restarted", "rollback",
                        {Lost(), records::Int("exit", st_.rc),
                         records::Int("rollback_restarts", st_.rollback_restarts)},
                        true)});
}

// The failed start a rollback past its budget counted (Counted for rank failures).
Decision JobPolicy::RollbackCounted(const Observation& o) {
  const std::string n = std::to_string(o.count), k = std::to_string(s_.max_failed_starts);
  const std::string r = std::to_string(s_.max_rollback_restarts);
  if (o.count >= s_.max_failed_starts) {
    return Fail(
        "failed_start.fail",
        {Log("FAILED: the trainer rolled the run back (exit 79) more than " + r +
             " times (FTRAIN_MAX_ROLLBACK_RESTARTS) with no checkpoint newer than " + o.checkpoint +
             ", in " + n + " starts in a row: not requeueing (FTRAIN_MAX_FAILED_STARTS=" + k +
             "); the run diverges before it can checkpoint: look at the steps of " + s_.run_dir +
             "/rollbacks.jsonl, then submit again with a lower train.lr or --data.skip (it "
             "resumes from " +
             o.checkpoint + ")"),
         LastStop("rollback"),
         Record("failed", "rollback_repeated",
                {Lost(), records::Int("exit", st_.rc), records::Int("failed_starts", o.count),
                 records::Str("checkpoint", o.checkpoint)},
                true)},
        1);
  }
  return Requeue(
      "failed_start.requeue",
      {Log("the trainer rolled the run back (exit 79) more than " + r +
           " times with no newer checkpoint: requeueing (failed start " + n + " of at most " + k +
           " with no newer checkpoint than " + o.checkpoint + ")"),
       LastStop("rollback"),
       Record("step_failed", "rollback_requeue", {Lost(), records::Int("exit", st_.rc)}, true)},
      {});
}

// Exit 74: the trainer could not read the checkpoint storage at resume (an outage, not
// damage: it moved nothing aside). Restart in place after a back-off, counted neither as an
// in-job restart nor a failed start (nothing crashed), until the outage - since the first 74
// in a row - reaches FTRAIN_STORAGE_OUTAGE_S. A restart that saved a newer checkpoint before
// its own 74 read the storage in between: that 74 starts a new outage (ftrain sim's seed 17498
// failed a job whose outage 'lasted' 3 h of training). A stop request in the back-off requeues
// (Phase::kBackoff, job_policy_stop.cc).
Decision JobPolicy::StorageOutage(double now) {
  if (st_.storage_since >= 0 && st_.newest_checkpoint != st_.storage_checkpoint) {
    st_.storage_since = -1;
    st_.storage_exits = 0;
    st_.storage_backoff_s = kStorageBackoffS;
  }
  if (st_.storage_since < 0) {
    st_.storage_since = now;
    st_.storage_checkpoint = st_.newest_checkpoint;
  }
  st_.storage_exits += 1;
  const double outage = now - st_.storage_since;
  const std::vector<records::Field> f{records::Int("exit", st_.rc),
                                      records::Num("outage_s", outage, 1),
                                      records::Int("tries", st_.storage_exits)};
  const std::string limit = "FTRAIN_STORAGE_OUTAGE_S=" + Fmt(s_.storage_outage_s);
  if (outage >= s_.storage_outage_s) {
    return Fail(
        "step.storage_outage",
        {Log("FAILED: the checkpoint storage could not be read at resume (exit 74) for " +
             Fmt(outage) + " s (" + std::to_string(st_.storage_exits) + " tries in a row): past " +
             limit +
             ", not restarting. The checkpoints are untouched (the trainer moved nothing "
             "aside): once the checkpoint storage is back (mounted and readable on every node), "
             "submit the job again; it resumes from the newest complete checkpoint"),
         LastStop("storage_outage"), Record("failed", "storage_outage", f)},
        1);
  }
  const double wait = st_.storage_backoff_s;
  st_.storage_backoff_s = std::min(2 * wait, kStorageBackoffMaxS);
  st_.storage_wait = true;
  st_.phase = Phase::kBackoff;
  st_.wait_until = now + wait;
  return {"step.storage_retry",
          {Log("the checkpoint storage could not be read at resume (exit 74; the trainer moved "
               "nothing aside): restarting in place in " +
               Fmt(wait) + " s (outage " + Fmt(outage) + " s so far, at most " + limit +
               "; counted neither as an in-job restart nor a failed start)"),
           Record("restarted", "storage_outage", f)}};
}

// A requeue for a node's failure, fault or quarantine. Counted in RUN/.node_requeues against
// the newest complete checkpoint (a newer one starts the count again, so a node failure a day
// never comes near the bound): a workload that brings its node down at the same step would
// otherwise be requeued for ever, a node fewer each time. One past FTRAIN_MAX_NODE_REQUEUES
// ends the job FAILED instead; the actions of the rule that chose the requeue (its records,
// the release of dead nodes) stand.
Decision JobPolicy::NodeRequeue(std::string rule, std::vector<Action> acts,
                                std::vector<std::string> exclude, const std::string& cause) {
  Decision spent = CountNodeRequeue(rule, &acts, cause);
  if (!spent.rule.empty()) return spent;
  return Requeue(std::move(rule), acts, std::move(exclude));
}

// One more node requeue in RUN/.node_requeues (its write appended to `acts`); past
// FTRAIN_MAX_NODE_REQUEUES without a newer checkpoint, the job's FAILED end instead (a
// decision with its rule; an empty rule: counted, go on).
Decision JobPolicy::CountNodeRequeue(const std::string& rule, std::vector<Action>* out,
                                     const std::string& cause) {
  std::vector<Action>& acts = *out;
  const std::string newest = Newest(st_.newest_checkpoint);
  const int count = NextFailedStartCount(st_.node_requeues, newest);
  const std::string k = std::to_string(s_.max_node_requeues);
  if (count > s_.max_node_requeues) {
    acts.push_back(Log(
        "FAILED: not requeueing after all: job " + st_.job + " was requeued " +
        std::to_string(count - 1) + " times in a row for a node's failure, fault or quarantine (" +
        cause + " now) with no checkpoint newer than " + newest +
        " (FTRAIN_MAX_NODE_REQUEUES=" + k +
        "): the workload may bring its nodes down at the same point, or the nodes keep failing. "
        "Find the cause in the records (ftrain report " +
        s_.run_dir + ") and the nodes' logs, fix it, then submit again (it resumes from " + newest +
        "; a new submission starts a new count)"));
    acts.push_back(Record("failed", "node_requeues_repeated",
                          {records::Str("after", cause), records::Int("node_requeues", count - 1),
                           records::Str("checkpoint", newest)}));
    return Fail(rule + "+requeue.no_progress", acts, 1);
  }
  st_.node_requeues = newest + " " + std::to_string(count);
  Action w = Act(Action::Kind::kWriteNodeRequeues);
  w.text = st_.node_requeues;
  acts.push_back(w);
  acts.push_back(Log("node requeue " + std::to_string(count) + " of at most " + k +
                     " with no checkpoint newer than " + newest));
  return {"", {}};
}

}  // namespace ftrain::orch
