// orch/job_types.h - what the job controller's policy (orch/job_policy.h) sees and does:
// typed observations in, typed actions out. Plain data, no behaviour; `ToText` spells an
// action the way `ftrain job --dry-run` prints it and the unit tests compare it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "records/hangs.h"
#include "records/quarantine.h"
#include "records/restarts.h"

namespace ftrain::orch {

// One line of RUN/quarantine.jsonl and one record of RUN/hangs.jsonl (records/quarantine.h,
// records/hangs.h own them).
using QuarantineLine = records::QuarantineRecord;
using HangLine = records::HangRecord;

// One line of RUN/node_faults.jsonl (records/node_faults.h): a rank whose node could not run
// it (the trainer exits 76).
struct NodeFaultLine {
  std::string host, reason;
  int rank = -1, node = -1;
  double time = -1;
};

// What the policy is told. `now` is the controller's monotonic clock (seconds).
struct Observation {
  enum class Kind {
    kStarted,             // the start's facts (below); the first observation
    kLease,               // AcquireLease's answer: lease_ok, else lease_holder (live) / superseded
    kPreflightExited,     // rc; record_error ("" when the commcheck record could be written)
    kLocalised,           // nodes: those that failed a check alone or with both neighbours
    kAgentsReady,         // count of nodes whose daemon answers, of nodes.size()
    kStepExited,          // rc of the training step's srun; config_error: RUN/.config_error text
    kSignal,              // signal: "USR1" or "TERM"
    kTick,                // time passes (the runner ticks every 0.5 s)
    kNodesInJob,          // nodes (known) or unknown: Slurm's view of the allocation
    kJobState,            // job_state, reason: slurmctld's view of this job (asked after a TERM)
    kNodeDeclared,        // node declared dead/hung by the detector; fields: the evidence
    kHeartbeatLate,       // node silent but its slurmd answers: fields for the record
    kConfirmed,           // ConfirmDeath's answer: node ("" : nobody) + fields
    kHealth,              // ProbeHealth's answer: ok
    kFailedStartCounted,  // count, checkpoint (the newest complete one, "none")
    kReleased,            // Release's answer: ok
    kNotRespondingWaited,
    kRoom,      // QueryRoom's answer: nodes (of the job's partition) or unknown
    kRequeued,  // Requeue's answer: ok (verified), detail
    kAgentsStopped,
    kLeaseRenewFailed,  // a launch could not renew the run lease (an I/O error; detail): no
                        // step was started. A lease provably taken over ends the job instead.
    kExpanded,          // Expand's answer: ok, nodes (those the job gained), detail (why not)
  };
  Kind kind = Kind::kTick;
  double now = 0;
  double wall = 0;  // unix seconds when it was seen (records about it; never compared)
  // kStarted
  std::string job;               // SLURM_JOB_ID
  int restart_count = 0;         // SLURM_RESTART_COUNT
  std::string resubmitted_from;  // FTRAIN_RESUBMITTED_FROM
  int resubmits = 0;             // FTRAIN_RESUBMITS
  std::string replaced_by;       // RUN/.submit/replaced-<job>: the job that replaced this one
  std::string last_stop;         // RUN/.last_stop of the previous start ("" : none)
  std::string batch_host;        // this host (SLURMD_NODENAME)
  std::string nodelist;          // SLURM_JOB_NODELIST as given (for the log)
  std::vector<std::string> spare_list;  // FTRAIN_SPARE_NODELIST, expanded
  int train_count = 0;  // kStarted: RUN/.submit/train-nodes-JOB (a requeue with fewer spares)
  // kStarted: the job's EndTime (unix seconds, 0 unknown) and its partition's GraceTime (-1
  // unknown), what the stop's budget is derived from (orch/stop_lead.h)
  double job_end_wall = 0;
  double grace_s = -1;
  // kStarted, kStepExited: RUN/quarantine.jsonl and RUN/hangs.jsonl as they are now
  std::vector<QuarantineLine> quarantine;
  std::vector<HangLine> hangs;
  // kStepExited: the lines RUN/node_faults.jsonl gained while the step ran; kHealth: one per
  // problem `ftrain health` reported (host, reason)
  std::vector<NodeFaultLine> node_faults;
  // kStarted, kStepExited: the records of RUN/rollbacks.jsonl (-1: unreadable), and the newest
  // complete checkpoint ("checkpoint" below; "none")
  int rollbacks = 0;
  // kStarted: RUN/.node_requeues as it is ("NEWEST COUNT"; "" : none)
  std::string node_requeues;
  // kStarted (all nodes of the job), kLocalised, kNodesInJob, kAgentsReady
  std::vector<std::string> nodes;
  bool known = true;  // kNodesInJob: false when slurmctld did not answer
  int count = 0;      // kAgentsReady, kFailedStartCounted
  // kLease
  bool lease_ok = false;
  int64_t epoch = 0;
  std::string holder;       // who holds it, in words
  bool superseded = false;  // the holder is this job's resubmission
  // kLease, not lease_ok: the run lease is ours but another run's job holds the checkpoint
  // root's lease (holder names it and its run directory, detail the root; orch/lease.h)
  bool ckpt_root_held = false;
  // kPreflightExited, kStepExited
  int rc = 0;
  std::string record_error, config_error;
  // kSignal
  std::string signal;
  // kNodeDeclared, kHeartbeatLate, kConfirmed
  std::string node, verdict;
  std::vector<records::Field> fields;
  // kHealth, kReleased, kRequeued
  bool ok = false;
  std::string detail;
  // kFailedStartCounted (what the count is against), kStarted, kStepExited: the newest
  // complete checkpoint ("none")
  std::string checkpoint;
  // kJobState
  std::string job_state, reason;
};

// What the policy asks the runner (orch/job_runner.h) to do, in order.
struct Action {
  enum class Kind {
    kLog,                // text
    kRecord,             // record (lost: with the lost-work fields, see below)
    kWriteLastStop,      // text: RUN/.last_stop
    kResetFailedStarts,  // a new submission: RUN/.failed_starts and RUN/.node_requeues removed
    kCountFailedStart,   // -> kFailedStartCounted
    kWriteNodeRequeues,  // text: RUN/.node_requeues ("NEWEST COUNT")
    kAcquireLease,       // -> kLease
    kCaptureSubmission,  // RUN/.submit for the watchers
    kCancelPending,      // text: a job id (the old job of a resubmission, if still pending)
    kRunPreflight,       // -> kPreflightExited
    kLocalise,           // nodes -> kLocalised
    kMakeSecret,         // a new replication secret (0600, no link followed)
    kWriteJobNodes,      // nodes: RUN/.job-nodes (the live ones, in the job's order)
    kStartAgents,        // nodes -> kAgentsReady
    kLaunch,             // hosts (rank -> node; empty: plain srun), nodes, overlap, watch
    kSignalStep,         // text: USR1 | TERM | KILL
    kEndStep,            // scancel of the training step, then its srun
    kQueryNodesInJob,    // -> kNodesInJob
    kQueryJobState,      // seconds: the bound of the question (0: the usual) -> kJobState
    kProbeHealth,        // nodes -> kHealth
    kConfirmDeath,       // nodes -> kConfirmed
    kRelease,            // nodes -> kReleased
    kWaitNotResponding,  // nodes, seconds -> kNotRespondingWaited
    kSignalAgents,       // text: TERM (their steps) ; their sruns are then let go (SIGKILL)
    kRequeue,            // seconds: the time budget; text "unless_cancelled": each try only
                         // once slurmctld says the job is not cancelled -> kRequeued
    kExclude,            // nodes: ExcNodeList of the requeued job (see orch/slurm.h)
    kWaitAgents,         // seconds -> kAgentsStopped
    kStopAgents,         // the normal stop: TERM, drain, then the sruns -> kAgentsStopped
    kQueryRoom,          // the nodes of the job's partition -> kRoom
    kExpand,             // num_nodes more nodes for the job, none of `nodes`, `probe`
                         // only if their slurmd answers -> kExpanded
    kQuarantine,         // nodes[0]: a host; text: the cause; record.fields: the rest of
                         // its RUN/quarantine.jsonl line (time and job added by the runner)
    kExit,               // code
  };
  Kind kind = Kind::kLog;
  std::string text;
  records::RestartRecord record;
  // kRecord: where the lost-work fields go ("lost_s", "last_step", "last_step_time"): at the
  // position of the field named "@LOST@" in record.fields, computed from the metrics' last
  // line as it was when the step ended (lost_at_failure) or now.
  bool lost_at_failure = false;
  std::vector<std::string> nodes;
  std::vector<std::string> hosts;   // kLaunch: the node of every rank (-m arbitrary)
  bool overlap = false;             // kLaunch
  bool released = false;            // kExclude: the dead nodes were released from the job
  std::vector<std::string> faulty;  // kExclude: alive but failing nodes: excluded whatever
                                    // Slurm sees of them
  std::vector<std::string> watch;   // kLaunch: the nodes whose heartbeats the detector reads
  std::vector<std::string> probe;   // kExpand: nodes that died in this job, asked for only
                                    // when their slurmd answers again (a dead node Slurm has
                                    // not yet marked DOWN looks idle to the scheduler)
  // kExclude: NumNodes of the requeued job (0: unchanged) and its training node count, which
  // its starts keep (RUN/.submit/train-nodes-JOB): a requeue with fewer spares.
  int num_nodes = 0;
  int train_count = 0;
  double seconds = 0;
  int code = 0;
};

// One decision: the rules of the transition table that fired ("a+b" when one observation
// took two steps at once: a start without pre-flight goes on to start the agents) and what
// they do.
struct Decision {
  std::string rule;
  std::vector<Action> actions;
};

std::string ToText(const Action& a);
std::string ToText(const Observation& o);
const char* KindName(Observation::Kind k);
const char* KindName(Action::Kind k);
// How many kinds each enum has (they count from 0, the last listed last).
constexpr int kObservationKinds = static_cast<int>(Observation::Kind::kExpanded) + 1;
constexpr int kActionKinds = static_cast<int>(Action::Kind::kExit) + 1;

}  // namespace ftrain::orch
