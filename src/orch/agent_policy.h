// orch/agent_policy.h - the node agent's decisions (`ftrain agent`), pure: what to do when the
// node's checkpoint daemon exits, which node is this one's buddy and who watches the batch
// host, and the watcher's handling of a dead batch host (WatcherPolicy, a transition function
// in the job controller's idiom: its machine is data, Routes() in watcher_machine.cc, each
// decision names a rule of kWatcherRules, every rule fires in a unit test, and
// `ftrain job --machine` prints it for docs/design.md). The agent runner (orch/agent_runner.h)
// does the I/O.
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

#include "orch/policy_table.h"
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

// What the watcher decided on one observation: the rule of kWatcherRules it applied ("": none
// applies, nothing to do) and its actions, in order.
struct WatcherDecision {
  std::string rule;
  std::vector<WatcherAct> acts;
};
extern const std::vector<Rule> kWatcherRules;
constexpr int kWatcherObsKinds = static_cast<int>(WatcherObs::Kind::kRequeued) + 1;
constexpr int kWatcherActKinds = static_cast<int>(WatcherAct::Kind::kRequeue) + 1;
const char* WatcherKindName(WatcherObs::Kind k);
const char* WatcherKindName(WatcherAct::Kind k);

// The watcher of one node: rank (1 or 2) decides who acts first; the second waits 5 s.
class WatcherPolicy {
 public:
  enum class State {
    kWatching,      // the batch host's heartbeat and Slurm's view of it
    kDelay,         // the second watcher's 5 s before it claims
    kClaiming,      // asked for the claim
    kWaitingClaim,  // the other watcher holds the claim: its outcome
    kLeasing,       // asked for the run lease
    kSubmitting,    // submitting the job again
    kRequeueDelay,  // Slurm took the batch host out: the second watcher's 5 s
    kRequeueing,    // asking the restart count, then requeueing
    kDone
  };
  WatcherPolicy(const AgentSettings& s, std::string job, int restart_count)
      : s_(s), job_(std::move(job)), restart_count_(restart_count) {}
  // The first row of Routes() whose state, kind and guard match decides.
  WatcherDecision On(const WatcherObs& o);
  void SetRank(int rank) { rank_ = rank; }
  int rank() const { return rank_; }
  State state() const { return state_; }
  bool watching_heartbeat() const { return hb_watch_ && state_ == State::kWatching; }
  bool done() const { return state_ == State::kDone; }
  static constexpr double kSecondWatcherDelayS = 5;
  static const char* StateName(State s);
  static constexpr int kStates = static_cast<int>(State::kDone) + 1;
  static std::vector<MachineRow> Machine();

 private:
  using Guard = bool (WatcherPolicy::*)(const WatcherObs&) const;
  using Handler = WatcherDecision (WatcherPolicy::*)(const WatcherObs&);
  struct Route {
    std::vector<State> states;
    WatcherObs::Kind kind;
    Guard when;
    const char* when_text;
    Handler handle;
    const char* handler;
  };
  static const std::vector<Route>& Routes();
  // The guards.
  bool HeartbeatWatched(const WatcherObs&) const { return hb_watch_; }
  bool SparesAndKnown(const WatcherObs& o) const { return s_.spare_nodes > 0 && o.known; }
  bool DelayOver(const WatcherObs& o) const { return o.now >= act_at_; }
  // The handlers (watcher_machine.cc's rows).
  WatcherDecision Late(const WatcherObs& o);
  WatcherDecision Declared(const WatcherObs& o);
  WatcherDecision HostView(const WatcherObs& o);
  WatcherDecision DelayTick(const WatcherObs& o);
  WatcherDecision RequeueDelayTick(const WatcherObs& o);
  WatcherDecision Claimed(const WatcherObs& o);
  WatcherDecision ClaimWatched(const WatcherObs& o);
  WatcherDecision Leased(const WatcherObs& o);
  WatcherDecision Submitted(const WatcherObs& o);
  WatcherDecision Restarts(const WatcherObs& o);
  WatcherDecision Requeued(const WatcherObs& o);
  WatcherDecision NotResubmitted(const std::string& rule, std::vector<WatcherAct> acts,
                                 const std::string& why);
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
};

}  // namespace ftrain::orch
