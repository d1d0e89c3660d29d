// orch/agent_policy.h - the node agent's decisions (`ftrain agent`), pure: what to do when the
// node's checkpoint daemon exits, which node is this one's buddy and who watches the batch
// host, and the watcher's handling of a dead batch host (WatcherPolicy, a transition function
// like the job controller's). The agent runner (orch/agent_runner.h) does the I/O.
//
// The batch host's watchers are chosen apart from it: two live nodes a third and two thirds of
// the ring away from the batch host (not its neighbours in host-name order, which usually share
// its rack and die with it). With spares the job is --no-kill: nobody else would notice. The
// buddy is placed away from its node the same way (issue 44, hole 12): see BuddyOf.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "orch/settings.h"
#include "records/restarts.h"

namespace ftrain::orch {

// ---- ckptd supervision ----------------------------------------------------------------------
struct DaemonDecision {
  enum class Kind { kStopped, kRefused, kGiveUp, kRestart } kind;
  double backoff_s = 0;
  std::string log;
  int exit_code = 0;     // of the agent, for the three that end it
  bool cleanup = false;  // a daemon that died leaves its shared-memory slots: ckptd --cleanup
};
// The daemon exited with `rc`; `stopping`: the agent was told to stop; `restarts` so far.
DaemonDecision OnDaemonExit(int rc, bool stopping, int restarts, int max_restarts,
                            double backoff_s);

// ---- the ring -------------------------------------------------------------------------------
// The node whose daemon holds `node`'s memory replica ("" when alone or not in `ring`): the
// far side of the ring, node i's buddy is i + k mod N with one shift k for the whole ring, so
// every node holds exactly one replica. Without a topology k = N/2 (N = 2: the other node;
// odd N: the node (N-1)/2 further on, so a node's buddy and the node whose replica it holds
// differ). With `leaf_switch` (node -> its leaf switch, `scontrol show topology`; nodes
// missing from it count as unknown) k is the shift that puts the most buddies under another
// leaf switch than their node, the nearest to N/2 among equals.
std::string BuddyOf(const std::vector<std::string>& ring, const std::string& node,
                    const std::map<std::string, std::string>& leaf_switch = {});
// That shift (0 when the ring has fewer than 2 nodes).
size_t BuddyShift(const std::vector<std::string>& ring,
                  const std::map<std::string, std::string>& leaf_switch);
// 1 or 2 when `node` watches `batch_host` (first or second watcher), 0 otherwise.
int WatcherRank(const std::vector<std::string>& ring, const std::string& batch_host,
                const std::string& node);
// RUN/.job-nodes ("JOB NODE...") when it is this job's, else the job's node list.
std::vector<std::string> RingOf(const std::string& job_nodes_text, const std::string& job,
                                const std::vector<std::string>& job_nodelist);

// ---- the batch-host watcher -----------------------------------------------------------------
struct WatcherObs {
  enum class Kind {
    kTick,
    kHostView,    // left: Slurm took the batch host out (spares; --no-kill), known
    kDeclared,    // the batch host declared dead or hung: fields, log
    kLate,        // its heartbeat is late, its slurmd answers: fields, log
    kClaim,       // ok: this watcher holds the claim; else by: who does
    kClaimWatch,  // the claim's holder: outcome recorded (done) or declared dead (dead)
    kLease,       // ok: this watcher took the run lease
    kSubmitted,   // job: the new job ("" : failed, error), can_run
    kRestarts,    // count (-1: slurmctld did not answer)
    kRequeued,    // ok
  };
  Kind kind = Kind::kTick;
  double now = 0;
  double wall = 0;  // unix seconds (records)
  bool left = false, known = true, ok = false, done = false, dead = false, can_run = true;
  std::string by, job, error, log, options;
  std::vector<records::Field> fields;
  int count = 0;
};

struct WatcherAct {
  enum class Kind {
    kLog,
    kRecord,
    kClaim,
    kWatchClaim,
    kTakeOverClaim,
    kTakeLease,
    kSubmit,
    kCancelNewJob,
    kMarkReplaced,     // text: the new job: RUN/.submit/replaced-<job>, the lease handed off
    kNotifyAndCancel,  // text: the new job: the old job's output, dependents, scancel (verified)
    kQueryRestarts,
    kRequeue
  };
  Kind kind;
  std::string text;
  records::RestartRecord record;
};

// The watcher of one node: rank (1 or 2) decides who acts first; the second waits 5 s.
class WatcherPolicy {
 public:
  WatcherPolicy(const AgentSettings& s, std::string job, int restart_count)
      : s_(s), job_(std::move(job)), restart_count_(restart_count) {}
  std::vector<WatcherAct> On(const WatcherObs& o);
  void SetRank(int rank) { rank_ = rank; }
  int rank() const { return rank_; }
  bool watching_heartbeat() const { return hb_watch_ && state_ == State::kWatching; }
  bool done() const { return state_ == State::kDone; }
  static constexpr double kSecondWatcherDelayS = 5;

 private:
  enum class State {
    kWatching,
    kDelay,
    kClaiming,
    kWaitingClaim,
    kLeasing,
    kSubmitting,
    kRequeueDelay,
    kRequeueing,
    kDone
  };
  std::vector<WatcherAct> Declared(const WatcherObs& o);
  std::vector<WatcherAct> Leased(const WatcherObs& o);
  std::vector<WatcherAct> Restarts(const WatcherObs& o);
  std::vector<WatcherAct> Claimed();
  std::vector<WatcherAct> Submitted(const WatcherObs& o);
  std::vector<WatcherAct> NotResubmitted(const std::string& why);
  WatcherAct Record(const std::string& event, const std::string& cause,
                    std::vector<records::Field> f) const;
  WatcherAct Log(const std::string& text) const;

  AgentSettings s_;
  std::string job_;
  int restart_count_;
  int rank_ = 0;
  State state_ = State::kWatching;
  bool hb_watch_ = true;   // the heartbeat watch; off once a resubmission failed
  int absent_ = 0;         // looks in a row without the batch host (Slurm's view)
  double act_at_ = 0;      // the second watcher's delay
  bool recorded_ = false;  // the batch host's failure was recorded by this watcher
  std::vector<records::Field> evidence_;
  std::string evidence_words_;
};

}  // namespace ftrain::orch
