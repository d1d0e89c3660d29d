// orch/agent_policy.cc - the node agent's pure decisions (agent_policy.h).
#include "orch/agent_policy.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ftrain::orch {
namespace {

std::string Secs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

DaemonDecision OnDaemonExit(int rc, bool stopping, int restarts, int max_restarts,
                            double backoff_s) {
  DaemonDecision d;
  d.cleanup = rc != 0;  // a daemon that died (SIGKILL, OOM) leaves its slots in /dev/shm
  const std::string code = std::to_string(rc);
  if (stopping) {
    d.kind = DaemonDecision::Kind::kStopped;
    d.log = "ckptd stopped (exit " + code + ")";
    return d;
  }
  if (rc == 2) {
    d.kind = DaemonDecision::Kind::kRefused;
    d.exit_code = 2;
    d.log = "ckptd refused to start (exit 2: bad settings, see its log); not restarting it";
    return d;
  }
  if (restarts >= max_restarts) {
    d.kind = DaemonDecision::Kind::kGiveUp;
    d.exit_code = 1;
    d.log = "ckptd died (exit " + code + ") " + std::to_string(restarts) +
            " times; giving up: the trainer saves synchronously";
    return d;
  }
  d.kind = DaemonDecision::Kind::kRestart;
  d.backoff_s = backoff_s;
  d.log = "ckptd died (exit " + code + "); restart " + std::to_string(restarts + 1) + "/" +
          std::to_string(max_restarts) + " in " + Secs(backoff_s) + " s";
  return d;
}

size_t BuddyShift(const std::vector<std::string>& ring,
                  const std::map<std::string, std::string>& leaf_switch) {
  const size_t n = ring.size();
  if (n < 2) return 0;
  // Switches as numbers (-1: unknown); the most pairs a shift can put apart.
  std::map<std::string, int> ids;
  std::vector<int> sw(n, -1);
  size_t known = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = leaf_switch.find(ring[i]);
    if (it == leaf_switch.end() || it->second.empty()) continue;
    sw[i] = ids.emplace(it->second, static_cast<int>(ids.size())).first->second;
    ++known;
  }
  const size_t half = n / 2;
  if (ids.size() < 2) return half;  // no topology, or one switch: the far side of the ring
  // Shifts from N/2 outwards: N/2, N/2+1, N/2-1, ...; the first with the most pairs apart.
  size_t best = half, best_apart = 0;
  for (size_t d = 0; d < n; ++d) {
    for (int sign : {+1, -1}) {
      if (d == 0 && sign < 0) continue;
      const long k = static_cast<long>(half) + sign * static_cast<long>(d);
      if (k < 1 || k >= static_cast<long>(n)) continue;
      size_t apart = 0;
      for (size_t i = 0; i < n; ++i) {
        const int a = sw[i], b = sw[(i + static_cast<size_t>(k)) % n];
        if (a >= 0 && b >= 0 && a != b) ++apart;
      }
      if (apart > best_apart) {
        best = static_cast<size_t>(k);
        best_apart = apart;
      }
      if (best_apart == known) return best;  // every known node's buddy is under another switch
    }
  }
  return best;
}

std::string BuddyOf(const std::vector<std::string>& ring, const std::string& node,
                    const std::map<std::string, std::string>& leaf_switch) {
  auto at = std::find(ring.begin(), ring.end(), node);
  if (at == ring.end() || ring.size() < 2) return "";
  const size_t i = static_cast<size_t>(at - ring.begin());
  const std::string& buddy = ring[(i + BuddyShift(ring, leaf_switch)) % ring.size()];
  return buddy == node ? "" : buddy;
}

// The others in ring order starting after the batch host: o[0..k-1]. The watchers are
// o[k/3] and o[2k/3] (a third and two thirds of the way round), never the host's neighbours
// when the ring allows; with k = 1 or 2 every other node watches.
int WatcherRank(const std::vector<std::string>& ring, const std::string& batch_host,
                const std::string& node) {
  if (batch_host.empty() || node == batch_host) return 0;
  std::vector<std::string> others;
  auto at = std::find(ring.begin(), ring.end(), batch_host);
  const size_t start = at == ring.end() ? 0 : static_cast<size_t>(at - ring.begin()) + 1;
  for (size_t i = 0; i < ring.size(); ++i) {
    const std::string& n = ring[(start + i) % ring.size()];
    if (n != batch_host) others.push_back(n);
  }
  const size_t k = others.size();
  if (k == 0) return 0;
  const size_t first = k / 3, second = std::max(first + 1, (2 * k) / 3);
  if (others[first] == node) return 1;
  if (second < k && others[second] == node) return 2;
  return 0;
}

std::vector<std::string> RingOf(const std::string& job_nodes_text, const std::string& job,
                                const std::vector<std::string>& job_nodelist) {
  std::istringstream in(job_nodes_text);
  std::string owner;
  if (in >> owner && owner == job) {
    std::vector<std::string> ring;
    for (std::string n; in >> n;) ring.push_back(n);
    if (!ring.empty()) return ring;
  }
  return job_nodelist;
}

// ---- WatcherPolicy ----------------------------------------------------------------------------

WatcherAct WatcherPolicy::Record(const std::string& event, const std::string& cause,
                                 std::vector<records::Field> f) const {
  WatcherAct a{WatcherAct::Kind::kRecord, "", {}};
  a.record.job = job_;
  a.record.restart_count = restart_count_;
  a.record.event = event;
  a.record.cause = cause;
  a.record.fields = std::move(f);
  return a;
}

WatcherAct WatcherPolicy::Log(const std::string& text) const {
  return {WatcherAct::Kind::kLog, text, {}};
}

WatcherDecision WatcherPolicy::Late(const WatcherObs& o) {
  return {"watch.late", {Log(o.log), Record("heartbeat_late", "none", o.fields)}};
}

WatcherDecision WatcherPolicy::Declared(const WatcherObs& o) {
  evidence_ = o.fields;
  std::vector<WatcherAct> acts{Log(o.log)};
  if (rank_ == 2) {
    state_ = State::kDelay;
    act_at_ = o.now + kSecondWatcherDelayS;
    return {"watch.declared_second", acts};
  }
  state_ = State::kClaiming;
  acts.push_back({WatcherAct::Kind::kClaim, "", {}});
  return {"watch.declared", acts};
}

WatcherDecision WatcherPolicy::HostView(const WatcherObs& o) {
  absent_ = o.left ? absent_ + 1 : 0;
  if (absent_ < 2) return {o.left ? "watch.host_absent_once" : "watch.host_in_job", {}};
  // Confirmed by a second look.
  state_ = State::kRequeueDelay;
  act_at_ = o.now + (rank_ - 1) * kSecondWatcherDelayS;
  return {"watch.host_left", {}};
}

WatcherDecision WatcherPolicy::DelayTick(const WatcherObs&) {
  state_ = State::kClaiming;
  return {"watch.second_claims", {{WatcherAct::Kind::kClaim, "", {}}}};
}

WatcherDecision WatcherPolicy::RequeueDelayTick(const WatcherObs&) {
  state_ = State::kRequeueing;
  return {"watch.query_restarts", {{WatcherAct::Kind::kQueryRestarts, "", {}}}};
}

WatcherDecision WatcherPolicy::Claimed(const WatcherObs& o) {
  if (o.ok) {
    state_ = State::kLeasing;
    return {"watch.claimed", {{WatcherAct::Kind::kTakeLease, "", {}}}};
  }
  state_ = State::kWaitingClaim;
  return {"watch.claim_held", {{WatcherAct::Kind::kWatchClaim, o.by, {}}}};
}

WatcherDecision WatcherPolicy::ClaimWatched(const WatcherObs& o) {
  if (o.dead) {
    state_ = State::kClaiming;
    return {"watch.claim_taken_over",
            {Log("the other watcher " + (o.by.empty() ? "?" : o.by) + " claimed job " + job_ +
                 "'s resubmission and died: taking it over"),
             {WatcherAct::Kind::kTakeOverClaim, "", {}}}};
  }
  state_ = State::kDone;
  return {"watch.claim_outcome",
          {Log("job " + job_ + " is being submitted again by the other watcher" +
               (o.by.empty() ? "" : " (" + o.by + ")"))}};
}

WatcherDecision WatcherPolicy::Leased(const WatcherObs& o) {
  if (!o.ok) {
    hb_watch_ = false;
    state_ = State::kWatching;
    return {"watch.lease_refused", {Log("not submitting job " + job_ + " again: " + o.error)}};
  }
  std::vector<records::Field> f{records::Str("node", s_.batch_host),
                                records::Bool("batch_host", true),
                                records::Str("watcher", s_.node)};
  f.insert(f.end(), evidence_.begin(), evidence_.end());
  std::vector<WatcherAct> acts{Record("step_failed", "node_failure", f)};
  recorded_ = true;
  if (s_.resubmits >= s_.max_resubmits) {
    acts.push_back(Log("not submitting job " + job_ + " again: it is resubmission " +
                       std::to_string(s_.resubmits) +
                       " of FTRAIN_MAX_RESUBMITS=" + std::to_string(s_.max_resubmits) +
                       "; Slurm requeues it once it marks " + s_.batch_host + " DOWN"));
    acts.push_back(Record(
        "not_resubmitted", "node_failure",
        {records::Str("why",
                      "FTRAIN_MAX_RESUBMITS=" + std::to_string(s_.max_resubmits) + " reached")}));
    hb_watch_ = false;
    state_ = State::kWatching;
    return {"watch.resubmits_spent", acts};
  }
  state_ = State::kSubmitting;
  acts.push_back({WatcherAct::Kind::kSubmit, "", {}});
  return {"watch.leased", acts};
}

WatcherDecision WatcherPolicy::Restarts(const WatcherObs& o) {
  if (o.count < 0) {  // slurmctld did not answer: look again later
    state_ = State::kWatching;
    return {"watch.restarts_unknown", {}};
  }
  if (o.count != restart_count_) {  // requeued already
    state_ = State::kDone;
    return {"watch.requeued_already", {}};
  }
  std::vector<WatcherAct> acts;
  if (!recorded_) {
    acts.push_back(Log("the batch host " + s_.batch_host + " left job " + job_ +
                       " (node failure): requeueing the job"));
    acts.push_back(Record("step_failed", "node_failure",
                          {records::Str("node", s_.batch_host), records::Bool("batch_host", true),
                           records::Str("watcher", s_.node), records::Num("detected", o.wall, 6),
                           records::Str("detected_by", "slurm")}));
    recorded_ = true;
  }
  acts.push_back(Log("requeueing job " + job_));
  acts.push_back({WatcherAct::Kind::kRequeue, "", {}});
  return {"watch.requeue", acts};
}

WatcherDecision WatcherPolicy::Requeued(const WatcherObs& o) {
  if (o.ok) {
    state_ = State::kDone;
    return {"watch.requeue_done", {}};
  }
  state_ = State::kWatching;
  absent_ = 0;  // look twice again before the next try
  return {"watch.requeue_failed", {Log("the requeue failed (" + o.error + "); trying again")}};
}

WatcherDecision WatcherPolicy::NotResubmitted(const std::string& rule, std::vector<WatcherAct> acts,
                                              const std::string& why) {
  hb_watch_ = false;  // Slurm decides now (its view here, or its own requeue)
  state_ = State::kWatching;
  acts.push_back(Log("could not submit job " + job_ + " again (" + why +
                     "); Slurm requeues it once it marks " + s_.batch_host + " DOWN"));
  acts.push_back(Record("not_resubmitted", "node_failure", {records::Str("why", why)}));
  return {rule, acts};
}

WatcherDecision WatcherPolicy::Submitted(const WatcherObs& o) {
  if (o.job.empty()) return NotResubmitted("watch.submit_failed", {}, o.error);
  if (!o.can_run) {
    // Never cancel the old job for a new one that will not run.
    return NotResubmitted("watch.new_job_cannot_run",
                          {{WatcherAct::Kind::kCancelNewJob, o.job, {}}},
                          "the new job " + o.job + " can never run: " + o.error);
  }
  state_ = State::kDone;
  return {
      "watch.resubmitted",
      {{WatcherAct::Kind::kMarkReplaced, o.job, {}},
       Record("resubmitted", "node_failure",
              {records::Str("node", s_.batch_host), records::Str("new_job", o.job),
               records::Str("excluded", s_.batch_host), records::Int("resubmits", s_.resubmits + 1),
               records::Str("options", o.options)}),
       {WatcherAct::Kind::kNotifyAndCancel, o.job, {}}}};
}

}  // namespace ftrain::orch
