// orch/job_policy_start.cc - JobPolicy, part 1: the start (the lease, the start's records, the
// spares), the pre-flight and the agents, up to the first launch.
#include <algorithm>

#include "core/run_layout.h"
#include "orch/job_policy.h"
#include "orch/job_policy_util.h"
#include "orch/quarantine.h"

namespace ftrain::orch {

using policy_util::Act;
using policy_util::Contains;
using policy_util::Fmt;
using policy_util::Join;
using policy_util::LastStop;
using policy_util::WithNodes;
using records::Field;

// ---- the start ------------------------------------------------------------------------------

Decision JobPolicy::Start(const Observation& o) {
  st_.job = o.job;
  st_.job_end.end_wall = o.job_end_wall;
  st_.job_end.grace_s = o.grace_s;
  st_.restart_count = o.restart_count;
  st_.resubmitted_from = o.resubmitted_from;
  st_.batch_host = o.batch_host;
  st_.all_nodes = o.nodes;
  if (!o.replaced_by.empty()) {
    st_.phase = Phase::kDone;
    return {"start.replaced",
            {Log("job " + st_.job + " was submitted again as job " + o.replaced_by +
                 " when its batch host died: this start of it ends here"),
             Record("superseded", "replaced", {records::Str("new_job", o.replaced_by)}), [] {
               Action a = Act(Action::Kind::kExit);
               a.code = 0;
               return a;
             }()}};
  }
  // FTRAIN_ELASTIC runs the spares' bookkeeping (training nodes, a host per rank) with none.
  st_.spares = s_.spare_nodes != "0" || s_.elastic;
  st_.watch_batch_host = st_.spares || (s_.ckptd && s_.detect.on && st_.all_nodes.size() > 1);
  st_.nodelist = o.nodelist;
  st_.last_stop = o.last_stop;
  st_.resubmits = o.resubmits;
  st_.spare_list = o.spare_list;
  st_.train_count = o.train_count;
  st_.quarantined =
      QuarantinedHosts(o.quarantine, o.wall, {s_.faulty_keep_s, s_.hang_quarantine_keep_s});
  st_.rollbacks_seen = o.rollbacks;
  st_.hangs_seen = static_cast<int>(o.hangs.size());
  st_.newest_checkpoint = o.checkpoint;
  st_.node_requeues = o.node_requeues;
  st_.phase = Phase::kLease;
  return {"start.lease", {Act(Action::Kind::kAcquireLease)}};
}

Decision JobPolicy::Leased(const Observation& o) {
  if (o.lease_ok) return AfterLease();
  st_.phase = Phase::kDone;
  Action exit = Act(Action::Kind::kExit);
  if (o.superseded) {
    exit.code = 0;
    return {"start.superseded",
            {Log("run " + s_.run_dir + " is trained by " + o.holder +
                 ", which took this job's place: this start of job " + st_.job + " ends here"),
             Record("superseded", "lease", {records::Str("holder", o.holder)}), exit}};
  }
  if (o.ckpt_root_held) {
    exit.code = 2;  // a configuration error: two runs configured on one checkpoint root
    return {"start.ckpt_root_held",
            {Log("FAILED: checkpoint root " + o.detail + " is used by another run: " + o.holder +
                 " holds its lease; run " + s_.run_dir + " (job " + st_.job +
                 ") does not train there (two runs on one checkpoint root would overwrite each "
                 "other's checkpoints): give this run its own ckpt.root (or FTRAIN_CKPT_ROOT), "
                 "or end the other run"),
             Record("refused", "ckpt_root_held",
                    {records::Str("holder", o.holder), records::Str("ckpt_root", o.detail)}),
             exit}};
  }
  exit.code = 1;
  return {"start.lease_held",
          {Log("FAILED: run " + s_.run_dir + " is trained by " + o.holder +
               " (its run lease); two jobs must never train one run, so job " + st_.job +
               " does not start: cancel one of them (if the other is gone, this job takes the "
               "run over at its next start)"),
           Record("refused", "lease_held", {records::Str("holder", o.holder)}), exit}};
}

Decision JobPolicy::AfterLease() {
  std::vector<Action> acts;
  if (st_.watch_batch_host) acts.push_back(Act(Action::Kind::kCaptureSubmission));
  const std::string& nodelist = st_.nodelist;
  acts.push_back(Log("start: restart count " + std::to_string(st_.restart_count) + ", nodes " +
                     (nodelist.empty() ? "?" : nodelist) + " (" +
                     std::to_string(st_.all_nodes.size()) + "), " +
                     std::to_string(s_.ranks_per_node) + " ranks per node"));
  acts.push_back(Log("settings: config " + s_.config + ", data " + s_.data + ", run dir " +
                     s_.run_dir + ", ftrain " + s_.bin));
  std::string rule;
  if (st_.restart_count != 0) {
    rule = "start.requeued";
    acts.push_back(Record("requeued", st_.last_stop.empty() ? "node_failure" : st_.last_stop,
                          {records::Raw("@LOST@", "")}));
    acts.push_back(Log("this is a requeued start (cause: " +
                       (st_.last_stop.empty() ? std::string("node_failure") : st_.last_stop) +
                       "); resuming from the newest complete checkpoint"));
  } else if (!st_.resubmitted_from.empty()) {
    rule = "start.resubmitted";
    acts.push_back(Record("requeued", "node_failure",
                          {records::Str("resubmitted_from", st_.resubmitted_from),
                           records::Int("resubmits", st_.resubmits), records::Raw("@LOST@", "")}));
    acts.push_back(Log("this is job " + st_.resubmitted_from +
                       " submitted again (its batch host died; resubmission " +
                       std::to_string(st_.resubmits) + " of at most " +
                       std::to_string(s_.max_resubmits) +
                       "); resuming from the newest complete checkpoint"));
    Action cancel = Act(Action::Kind::kCancelPending);
    cancel.text = st_.resubmitted_from;
    acts.push_back(cancel);
  } else {
    rule = "start.first";
    acts.push_back(Record("started", "initial"));
    acts.push_back(Act(Action::Kind::kResetFailedStarts));
    st_.node_requeues.clear();  // a new submission: a new budget
  }
  Action last = Act(Action::Kind::kWriteLastStop);
  last.text = "node_failure";  // what a start after a silent death assumes
  acts.push_back(last);
  if (st_.spares) {
    Decision bad = ChooseSpares(&acts);
    if (!bad.rule.empty()) return bad;
  }
  Decision quarantined = QuarantineAtStart(&acts, &rule);
  if (!quarantined.rule.empty()) return quarantined;
  if (StopTimeout() < s_.stop_timeout_s) {
    acts.push_back(Log("WARNING: FTRAIN_STOP_TIMEOUT_S=" + Fmt(s_.stop_timeout_s) +
                       " does not fit the USR1 lead of " + Fmt(s_.usr1_lead_s) +
                       " s with the kill grace and the requeue: the ranks get " +
                       Fmt(StopTimeout()) + " s to stop"));
  }
  if (s_.preflight) {
    st_.phase = Phase::kPreflight;
    acts.push_back(Log("pre-flight: ftrain commcheck over all ranks"));
    acts.push_back(Act(Action::Kind::kRunPreflight));
    return {rule, acts};
  }
  Decision d = StartAgentsOrLaunch();
  acts.insert(acts.end(), d.actions.begin(), d.actions.end());
  return {rule + "+" + d.rule, acts};
}

// Spares: the last FTRAIN_SPARE_NODES nodes of the job that are not the batch host (or
// FTRAIN_SPARE_NODELIST); the rank of every node's slots in a host file (-m arbitrary), so
// that a spare takes exactly the ranks of the node it replaces and every survivor keeps its
// own. Returns a decision only when they do not fit (FAILED, exit 2).
Decision JobPolicy::ChooseSpares(std::vector<Action>* acts) {
  int want = -1;
  bool numeric = !s_.spare_nodes.empty() &&
                 s_.spare_nodes.find_first_not_of("0123456789") == std::string::npos &&
                 s_.spare_nodes.size() < 6;
  if (numeric) want = std::stoi(s_.spare_nodes);
  if (st_.train_count > 0) {
    // Requeued with fewer nodes (quarantined nodes, too few left for the spares): the
    // training nodes stay as many as before, the spares are what is left.
    numeric = true;
    want = static_cast<int>(st_.all_nodes.size()) - st_.train_count;
    acts->push_back(
        Log("this job was requeued with fewer nodes than it was submitted with "
            "(quarantined nodes): " +
            std::to_string(st_.train_count) + " training node(s), " +
            std::to_string(std::max(want, 0)) + " spare(s)"));
  }
  if (!st_.spare_list.empty() && st_.train_count == 0) {
    st_.spare_nodes = st_.spare_list;
  } else if (numeric) {
    for (auto it = st_.all_nodes.rbegin();
         it != st_.all_nodes.rend() && static_cast<int>(st_.spare_nodes.size()) < want; ++it) {
      if (*it != st_.batch_host) st_.spare_nodes.insert(st_.spare_nodes.begin(), *it);
    }
  }
  for (const auto& n : st_.all_nodes) {
    if (!Contains(st_.spare_nodes, n)) st_.train_nodes.push_back(n);
  }
  const bool fits = numeric && static_cast<int>(st_.spare_nodes.size()) == want &&
                    st_.train_nodes.size() + want == st_.all_nodes.size() &&
                    !st_.train_nodes.empty();
  if (!fits) {
    acts->push_back(
        Log("FAILED: FTRAIN_SPARE_NODES=" + s_.spare_nodes +
            " (FTRAIN_SPARE_NODELIST=" + (s_.spare_nodelist.empty() ? "unset" : s_.spare_nodelist) +
            ") does not fit the job's nodes " + Join(st_.all_nodes, " ") +
            ": submit with --nodes=N+S and name spares among them"));
    Action last = Act(Action::Kind::kWriteLastStop);
    last.text = "config_error";
    acts->push_back(last);
    acts->push_back(Record("failed", "config_error", {records::Str("why", "spare nodes")}));
    Action exit = Act(Action::Kind::kExit);
    exit.code = 2;
    acts->push_back(exit);
    st_.phase = Phase::kDone;
    return {"start.spares_invalid", *acts};
  }
  for (const auto& n : st_.train_nodes) {
    for (int i = 0; i < s_.ranks_per_node; ++i) st_.rank_hosts.push_back(n);
  }
  st_.train_target = st_.train_nodes.size();
  if (!st_.spare_nodes.empty() || !s_.elastic) {
    acts->push_back(Log("spares: " + std::to_string(st_.rank_hosts.size()) + " ranks on " +
                        Join(st_.train_nodes, " ") + ", spare " + Join(st_.spare_nodes, " ") +
                        "; a failed training node is replaced in this allocation only if the "
                        "job was submitted with --no-kill (else Slurm requeues it as without "
                        "spares)"));
  } else {
    acts->push_back(Log(std::to_string(st_.rank_hosts.size()) + " ranks on " +
                        Join(st_.train_nodes, " ") + ", no spare"));
  }
  if (s_.elastic) {
    acts->push_back(
        Log("elastic (FTRAIN_ELASTIC): with no spare left, a failed training node's "
            "ranks are dropped and the run goes on on the survivors (at least " +
            std::to_string(s_.elastic_min_nodes) + " node(s), --no-kill needed); it grows " +
            "back when Slurm gives the job nodes again" +
            (s_.elastic_grow_s > 0 ? " (asked every " + Fmt(s_.elastic_grow_s) + " s)"
                                   : " (FTRAIN_ELASTIC_GROW_S=0: at the next requeue)")));
  }
  return {"", {}};
}

// ---- pre-flight, agents, launch -------------------------------------------------------------

Decision JobPolicy::Preflight(const Observation& o) {
  // commcheck exits 3 when every collective was correct but rank 0 could not write the record;
  // srun may report a peer that --kill-on-bad-exit ended instead, so the runner also probes the
  // record's directory (o.record_error: the OS error of creating a file there).
  std::string record_error = o.record_error;
  if (o.rc != 0 && record_error.empty() && o.rc == 3) {
    record_error = "see rank 0's commcheck error line above";
  }
  if (o.rc != 0 && !record_error.empty()) {
    const std::string file = RunLayout(s_.run_dir).commcheck();
    return Fail("preflight.record_error",
                {Log("pre-flight: cannot write " + file + ": " + record_error +
                     "; not starting the training (make the run directory writable, or free "
                     "space on its file system)"),
                 Record("preflight_failed", "commcheck_record", {records::Str("file", file)})},
                1);
  }
  if (o.rc != 0) {
    if (st_.all_nodes.size() >= 2 && !st_.localised) {
      st_.localised = true;
      st_.phase = Phase::kLocalising;
      st_.localise_after = LocaliseAfter::kPreflight;
      Action loc = Act(Action::Kind::kLocalise);
      loc.nodes = st_.all_nodes;
      return {"preflight.localise",
              {Log("pre-flight commcheck FAILED (exit " + std::to_string(o.rc) +
                   "): checking the nodes alone and in pairs to find a bad one"),
               loc}};
    }
    return PreflightFailed();
  }
  Decision d = StartAgentsOrLaunch();
  d.rule = "preflight.passed+" + d.rule;
  return d;
}

Decision JobPolicy::PreflightFailed() {
  return Fail("preflight.failed",
              {Log("pre-flight commcheck FAILED: not starting the training (fix the nodes or the "
                   "network)"),
               Record("preflight_failed", "commcheck")},
              1);
}

Decision JobPolicy::StartAgentsOrLaunch() {
  if (!s_.ckptd) return Launch("agents.none");
  std::vector<Action> acts;
  if (s_.replication == "1" || (s_.replication == "auto" && st_.spares)) {
    acts.push_back(Act(Action::Kind::kMakeSecret));
    acts.push_back(
        Log("buddy replication on: each node's daemon copies its snapshots to the next node's"));
  }
  Action jn = Act(Action::Kind::kWriteJobNodes);
  jn.nodes = LiveNodes();
  acts.push_back(jn);
  Action start = Act(Action::Kind::kStartAgents);
  start.nodes = LiveNodes();
  acts.push_back(start);
  st_.phase = Phase::kAgents;
  return {"agents.start", acts};
}

Decision JobPolicy::Agents(const Observation& o) {
  st_.agents = true;
  std::vector<Action> acts{Log("ckptd: " + std::to_string(o.count) + " of " +
                               std::to_string(st_.all_nodes.size()) + " nodes serving")};
  if (st_.stop_requested) {
    Decision d = RequeueStopped("pre-flight or agent start-up");
    acts.insert(acts.end(), d.actions.begin(), d.actions.end());
    return {d.rule, acts};
  }
  Decision d = Launch("agents.ready");
  acts.insert(acts.end(), d.actions.begin(), d.actions.end());
  return {d.rule, acts};
}

}  // namespace ftrain::orch
