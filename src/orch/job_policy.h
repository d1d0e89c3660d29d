// orch/job_policy.h - the job controller's decisions as a pure, typed transition function:
// JobPolicy::On(observation) -> the rule that fired and its actions. No I/O, no clock, no
// Slurm in here: the runner (orch/job_runner.h) turns actions into processes and Slurm
// commands and their outcomes into observations; the unit tests (tests/orch_job_policy_test.cc)
// drive it with synthetic observations in milliseconds; `ftrain job --dry-run` prints the
// decisions for a recorded sequence. The machine is data: Routes() (job_machine.cc) maps (phase,
// observation kind, guard) to the handler that decides; docs/design.md holds its print. Each
// handler names the rule(s) of kRules (job_rules.cc) it applied: docs/operations.md's table of
// what the job script handles is checked against kRules, and every rule has a unit test (the
// test binary fails when one never fired).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "orch/job_types.h"
#include "orch/policy_table.h"
#include "orch/settings.h"
#include "orch/stop_lead.h"
#include "records/exit_codes.h"

namespace ftrain::orch {

enum class Phase {
  kStart,         // waiting for the start's facts
  kLease,         // asked for the run lease
  kPreflight,     // the pre-flight commcheck runs
  kLocalising,    // per-node checks: which node fails
  kAgents,        // the node agents start, their daemons must answer
  kTraining,      // the training step runs (detection and spare checks on ticks)
  kStopping,      // USR1/TERM forwarded: the ranks checkpoint and stop
  kConfirming,    // the step failed: a node whose slurmd does not answer is confirmed or not
  kFindingDead,   // the step failed (spares): which training nodes left the job
  kHealthPoll,    // spares: a node does not answer; polling until Slurm takes it out
  kProbing,       // does every training node run a task?
  kHealthWait,    // no spares: a node does not answer; waiting for Slurm's requeue
  kCounting,      // counting a failed start
  kBackoff,       // before an in-job restart
  kLeaseRetry,    // a launch could not renew the run lease (I/O error): waiting to try again
  kAskingJob,     // a TERM came: is the job cancelled, timed out, or still running?
  kReleasing,     // requeue excluding: releasing the dead nodes
  kWaitingFlag,   // requeue excluding: waiting for slurmctld to flag them not responding
  kCheckingRoom,  // quarantined nodes, no spare: can the partition hold the job without them?
  kRequeueing,    // the requeue is issued and verified
  kDraining,      // waiting for the agents, then exit
  kDone,
};
const char* PhaseName(Phase p);

// The sub-states of a phase, typed. What the partition's room is asked for (kCheckingRoom):
// a requeue excluding quarantined or faulty nodes, one excluding dead nodes
// (job_policy_requeue_checks.cc), or a verified requeue held for the answer.
enum class RoomFor { kNone, kQuarantine, kDead, kAfterRequeue };
// What a localisation (kLocalising) follows: the pre-flight check, or repeated rank failures.
enum class LocaliseAfter { kPreflight, kRankFailure };
const char* LocaliseAfterName(LocaliseAfter a);  // "preflight", "rank_failure" (records)
// What a failed start's count (kCounting) is for: rank failures, or a rollback (exit 79).
enum class Counting { kRankFailure, kRollback };

extern const std::vector<Rule> kRules;

// Everything the policy knows about the job, in one struct (no hidden state).
struct JobState {
  Phase phase = Phase::kStart;
  std::string job, batch_host, resubmitted_from;
  int restart_count = 0;
  std::vector<std::string> all_nodes, train_nodes, spare_nodes, rank_hosts;
  bool spares = false;  // a spare job (FTRAIN_SPARE_NODES > 0)
  int replacements = 0;
  int shrinks = 0;  // training nodes dropped without a spare (FTRAIN_ELASTIC)
  // FTRAIN_ELASTIC's grow-back: the training node count of the start, the nodes the job gained
  // (their agents start, then the ranks checkpoint and stop), whether the step was asked to
  // stop to grow, how often it grew, when Slurm is asked again and what it said last.
  size_t train_target = 0;
  std::vector<std::string> grow_nodes;
  bool growing = false;
  int grows = 0;
  double next_grow_ask = -1;
  std::string grow_detail;
  bool agents = false;  // node agents were started (and not yet stopped)
  bool watch_batch_host = false;
  bool stop_requested = false;
  double stop_deadline = -1, kill_at = -1;
  double stop_budget_s = 0;  // the ranks' stop timeout of the current stop
  JobEnd job_end;            // kStarted: EndTime, GraceTime (orch/stop_lead.h)
  double wall = 0;           // the latest observation's wall clock (the stop's lead only)
  int injob_restarts = 0;
  double backoff_s = 0;
  double wait_until = -1, next_poll = -1, next_spare_check = -1;
  std::vector<std::string> watch;     // nodes whose heartbeats the detector reads
  std::vector<std::string> declared;  // declared dead/hung in this start
  std::string detect_node;            // declared during the current step
  std::vector<records::Field> detect_fields;
  int rc = 0;                        // of the step that ended
  bool localised = false;            // the current failure was localised already
  std::vector<std::string> exclude;  // the requeue's exclusion
  int exit_code = 0;                 // of the job's end
  // Facts of the start (kStarted).
  std::string nodelist, last_stop;
  int resubmits = 0;
  std::vector<std::string> spare_list;  // FTRAIN_SPARE_NODELIST, expanded
  // Where things stand.
  LocaliseAfter localise_after = LocaliseAfter::kPreflight;
  Phase asked_from = Phase::kStart;  // the phase a TERM's question interrupted
  // A TERM's question: when the TERM came, when to ask again, whether slurmctld's silence was
  // seen already, and a step's exit that came while asking (handled once the answer is known).
  double term_at = -1, next_ask = -1;
  bool term_unanswered = false;
  bool term_stop_sent = false;  // the ranks got USR1 when slurmctld did not answer
  std::optional<Observation> held_exit;
  // The partition's room was asked and sinfo did not answer: since when, and when to ask again
  // (-1: not waiting). Asked again for FTRAIN_REQUEUE_RETRY_S before a requeue goes on blind.
  double room_unknown_since = -1, room_ask_at = -1;
  // The run lease could not be renewed for a launch (I/O error): until when it is retried.
  double lease_retry_until = -1;
  std::string stop_signal = "USR1";
  double step_end_wall = 0;  // when the step ended (unix s): Slurm-view detection records
  bool released = false;     // requeue excluding: the dead nodes left the job
  bool probe_for_spares = false;
  std::string config_error;         // RUN/.config_error of the step that ended
  std::vector<std::string> faulty;  // alive nodes that failed the localisation: excluded
  // Hosts quarantined for this run (RUN/quarantine.jsonl, read at every start and after a
  // step's exit 77 or 78): never given ranks again; excluded from every requeue.
  std::vector<std::string> quarantined;
  std::vector<QuarantineLine> step_quarantine;  // RUN/quarantine.jsonl when the step ended
  std::vector<HangLine> step_hangs;             // RUN/hangs.jsonl when the step ended
  std::vector<NodeFaultLine> step_node_faults;  // RUN/node_faults.jsonl: the step's new lines
  std::vector<std::string> quarantine_bad;      // quarantined nodes that held ranks
  // A requeue with fewer spares (quarantined nodes, the partition too small for the whole
  // job): NumNodes of the requeued job, 0 when unchanged. train_count: the training node
  // count a start of this job keeps (kStarted; 0 when no such requeue happened).
  int requeue_nodes = 0;
  int train_count = 0;
  // The newest complete checkpoint as the runner last saw it (the start, a step's end).
  std::string newest_checkpoint;
  // Exit 79 (guard.policy = rollback): RUN/rollbacks.jsonl's records after the previous step
  // (-1: unreadable); whether the step that ended added one; the rollbacks restarted in place
  // since rollback_checkpoint became the newest checkpoint.
  int rollbacks_seen = -1;
  int hangs_seen = -1;  // RUN/hangs.jsonl's records at the start or the last step's end
  bool rollback_recorded = false;
  std::string rollback_checkpoint;
  int rollback_restarts = 0;
  Counting counting = Counting::kRankFailure;
  // Exit 74 (the checkpoint storage unreadable at resume): when the current run of 74s began
  // (-1: none), how many, the next back-off; storage_wait: the back-off is the outage's.
  double storage_since = -1;
  std::string storage_checkpoint;  // the newest checkpoint when the outage began
  int storage_exits = 0;
  double storage_backoff_s = 0;
  bool storage_wait = false;
  // RUN/.node_requeues ("NEWEST COUNT") as this start found it, then as it wrote it.
  std::string node_requeues;
  RoomFor room_for = RoomFor::kNone;
  std::string dead_seen;    // Slurm's view of the dead nodes after the wait for the flag
  bool room_known = false;  // this end asked the partition's room already
  std::optional<Observation> held_requeued;  // a verified requeue, held for the room's answer
  bool term_ending = false;  // a TERM came while the job was already ending: slurmctld asked
};

// What slurmctld's answer to a TERM's question says. Only an explicit answer counts: an empty
// one (slurmctld did not answer) or a state not listed here is kUnknown, never "cancelled".
// Slurm 22.05 shows a job that `scancel` ended as COMPLETING (Reason=None) while its batch
// script still runs (KillWait), CANCELLED once it ended; one at its time limit as COMPLETING
// or TIMEOUT with Reason=TimeLimit (measured, docs/local-cluster.md).
enum class TermAnswer { kUnknown, kRunning, kTimeLimit, kCancelled };
TermAnswer ClassifyTermAnswer(const std::string& job_state, const std::string& reason);

// Pure helpers of the policy's questions, executed by the runner.
// The failed-start count after one more failed start: RUN/.failed_starts holds "NEWEST COUNT";
// the count starts again at 1 whenever a newer checkpoint was committed since (the crash-loop
// budget resets on progress).
int NextFailedStartCount(const std::string& failed_starts_text, const std::string& newest);
// Which nodes a localisation blames: those that failed a check alone (unless every node did:
// then it is no node's fault); if none did and there are 3 or more, those that failed with
// both ring neighbours while another pair passed. None: no single node is to blame (the
// network between them, the software, or nothing).
std::vector<std::string> BlameNodes(const std::vector<std::string>& nodes,
                                    const std::vector<bool>& alone_ok,
                                    const std::vector<bool>& pair_ok);

class JobPolicy {
 public:
  explicit JobPolicy(JobSettings settings);
  // The machine (job_machine.cc): the first row of Routes() whose phase, observation kind and
  // guard match decides; an observation no row takes changes nothing (a tick, or an answer
  // nobody waits for any more).
  Decision On(const Observation& o);
  static std::vector<MachineRow> Machine();
  const JobState& state() const { return st_; }
  // The stop timeout: FTRAIN_STOP_TIMEOUT_S, shortened so that the ranks' stop, the kill
  // grace and the requeue's budget end inside the USR1 lead (FTRAIN_USR1_LEAD_S; with `lead_s`,
  // that lead: a stop uses the one derived from EndTime/GraceTime, StopLeadNow).
  double StopTimeout() const { return StopTimeout(s_.usr1_lead_s); }
  double StopTimeout(double lead_s) const;
  // The lead of a USR1 seen now (orch/stop_lead.h), from the facts of the start.
  StopLead StopLeadNow() const;
  // The trainer's exit codes: records/exit_codes.h.
  static constexpr double kKillGraceS = 5;        // TERM -> KILL of a step that did not stop
  static constexpr double kRequeueBudgetS = 15;   // every try of the requeue, verified
  static constexpr double kLeadMarginS = 5;       // left over before the time limit
  static constexpr double kTermAskEveryS = 2;     // TERM, slurmctld silent: how often to ask
  static constexpr double kRoomAskEveryS = 10;    // sinfo silent on the room: how often to ask
  static constexpr double kTermAskBoundS = 5;     // the bound of one such question
  static constexpr double kLeaseRetryEveryS = 5;  // the run lease's renewal failed: try again
  // Exit 74: the back-off before a restart in place, doubling up to the cap.
  static constexpr double kStorageBackoffS = 10;
  static constexpr double kStorageBackoffMaxS = 120;

 private:
  using Handler = Decision (JobPolicy::*)(const Observation&);
  using Guard = bool (JobPolicy::*)(const Observation&) const;
  // One row of the machine: in one of `phases` (empty: every phase), an observation of `kind`
  // for which `when` holds (nullptr: always) goes to `handle`.
  struct Route {
    std::vector<Phase> phases;
    Observation::Kind kind;
    Guard when;
    const char* when_text;
    Handler handle;
    const char* handler;
  };
  static const std::vector<Route>& Routes();
  // The guards.
  bool IsTerm(const Observation& o) const { return o.signal == "TERM"; }
  bool IsUsr1(const Observation& o) const { return o.signal == "USR1"; }
  bool TermAsked(const Observation&) const { return st_.term_ending; }
  bool RefusedAsCancelled(const Observation& o) const {
    return !o.ok && o.job_state == "CANCELLED";
  }

  Decision Start(const Observation& o);
  Decision Leased(const Observation& o);
  Decision AfterLease();
  Decision Preflight(const Observation& o);
  Decision Localised(const Observation& o);
  Decision Agents(const Observation& o);
  Decision NodeDeclared(const Observation& o);
  Decision HeartbeatLate(const Observation& o);
  Decision TrainingTick(const Observation& o);
  Decision SparesInJob(const Observation& o);
  Decision StopTick(const Observation& o);
  Decision AfterConfirm(const Observation& o);
  Decision FoundDead(const Observation& o);
  Decision Decide(double now);
  Decision HealthPollTick(const Observation& o);
  Decision HealthPolled(const Observation& o);
  Decision Probed(const Observation& o);
  Decision HealthWait(const Observation& o);
  Decision Counted(const Observation& o);
  Decision Backoff(const Observation& o);
  Decision JobStateKnown(const Observation& o);
  Decision HoldExit(const Observation& o);
  Decision TermAskTick(const Observation& o);
  Decision TermAsk(const Observation& o);
  Decision Usr1(const Observation& o);
  Decision TermUnanswered(double now);
  Decision TermRequeue(std::string rule, const std::string& sig, std::string why);
  Decision LeaseRenewFailed(const Observation& o);
  Decision LeaseRetry(const Observation& o);
  double RequeueBudget() const;
  Decision Released(const Observation& o);
  Decision FlagWaited(const Observation& o);
  Decision Requeued(const Observation& o);
  Decision RequeueDone(const Observation& o);
  Decision Drained(const Observation& o);

  Decision Launch(std::string rule, std::vector<Action> before = {});
  Decision ChooseSpares(std::vector<Action>* acts);
  Decision QuarantineAtStart(std::vector<Action>* acts, std::string* rule);
  Decision QuarantineAfterStep();
  Decision NodeFaultAfterStep();  // job_policy_node_fault.cc
  Decision NodeFaultAfterProbe(const Observation& health);
  Decision MoveOffFaultyNodes(const std::vector<std::string>& bad,
                              const std::vector<NodeFaultLine>& lines, const std::string& why);
  Decision RoomAnswered(const Observation& o);
  Decision RoomKnown(const Observation& o);
  bool RoomUnanswered(double now);
  Decision RoomAskAgain(const Observation& o);
  void ReadmitFaultyForRoom(const std::vector<std::string>& partition, size_t train,
                            std::vector<Action>* acts);
  // job_policy_requeue_checks.cc: what a requeue checks first (room, a cancel).
  void KeepOutFaulty(const std::vector<std::string>& nodes, const std::string& reason,
                     std::vector<Action>* acts);
  Decision CheckRoomForFaulty(std::string rule, const std::vector<std::string>& bad,
                              std::vector<Action> acts);
  Decision AskRoomForDead(const std::string& flagged);
  Decision DeadRoomKnown(const Observation& o);
  Decision TermWhileEnding(const Observation& o);
  Decision EndingJobState(const Observation& o);
  Decision RequeueRefusedCancelled(const Observation& o);
  bool NeedsRoomAfterRequeue() const;
  Decision RoomAfterRequeue(const Observation& o);
  std::vector<std::string> QuarantinedInUse() const;
  Decision PreflightFailed();
  Decision StartAgentsOrLaunch();
  Decision StepExited(const Observation& o);
  Decision RankFailure(double now);
  Decision Rollback();
  Decision RollbackCounted(const Observation& o);
  Decision StorageOutage(double now);
  std::string TakeSpare(const std::string& node);
  Decision CountNodeRequeue(const std::string& rule, std::vector<Action>* acts,
                            const std::string& cause);
  Decision NodeRequeue(std::string rule, std::vector<Action> acts, std::vector<std::string> exclude,
                       const std::string& cause);
  Decision StopRequest(const std::string& sig, double now);
  void DropLostSpares(const std::vector<std::string>& in_job, const std::string& when,
                      std::vector<Action>* acts);
  std::vector<std::string> DeadOf(const Observation& nodes_in_job) const;
  // FTRAIN_ELASTIC: drops the dead training node `d` and its ranks (no spare left); false
  // when the survivors would be fewer than FTRAIN_ELASTIC_MIN_NODES.
  bool Shrink(const std::string& d, const std::vector<records::Field>& detection,
              std::vector<Action>* acts);
  // FTRAIN_ELASTIC's grow-back (job_policy_grow.cc): while shrunk, ask Slurm for nodes; start
  // the agents of those the job gained; stop the ranks at a checkpoint; relaunch on them.
  // Drops training node `n` and its ranks (a shrink); returns the new world size.
  int64_t DropTrainingNode(const std::string& n);
  Decision QuarantineShrink(const std::vector<std::string>& bad, const std::string& rule,
                            std::vector<Action>* acts);
  Decision GrowAsk(const Observation& o);
  Decision GrowAllocated(const Observation& o);
  Decision GrowAgentsReady(const Observation& o);
  bool StoppedToGrow(int rc) const;
  Decision Grow();
  void GrowAbandoned(int rc, std::vector<Action>* acts);
  Decision ReplaceOrRequeue(const std::vector<std::string>& dead, double wall,
                            std::vector<Action> acts);
  Decision Requeue(std::string rule, std::vector<Action> acts, std::vector<std::string> exclude);
  Decision RequeueExcludingDead(std::string rule, std::vector<Action> acts);
  Decision RequeueStopped(const std::string& during);
  Decision Fail(std::string rule, std::vector<Action> acts, int code);
  std::vector<records::Field> DetectionFields(const std::string& node, double wall) const;
  std::vector<std::string> LiveNodes() const;
  Action Record(const std::string& event, const std::string& cause,
                std::vector<records::Field> fields = {}, bool lost_at_failure = false) const;
  Action Log(const std::string& text) const;

  JobSettings s_;
  JobState st_;
};

}  // namespace ftrain::orch
