// orch/slurm.h - everything ftrain asks of Slurm, behind one interface. SlurmCli shells out to
// the client commands (squeue, scontrol, sinfo, scancel, sbatch), each bounded by a timeout;
// what changes the job (requeue, cancel, submit) is retried and then verified by reading the
// job back, so a command that failed after acting, or acted after failing, is counted once.
// Tests use a fake (tests/orch_fakes.h) or stand-in commands on PATH.
//
// What Slurm 22.05 does that this code relies on (measured on the local cluster and read in
// SchedMD/slurm tag slurm-22-05-8-1; docs/local-cluster.md has the measurements):
//   - `scancel --signal=SIG JOB.STEP` delivers the signal and then exits 225 ("Invalid job id
//     specified"): its exit status says nothing; only a hang (slurmctld away) is a failure.
//   - srun forwards SIGKILL to its tasks when it gets SIGTERM or SIGHUP (and silently on
//     SIGPIPE); it aborts a whole step, --no-kill or not, on an I/O error with one node's
//     slurmstepd: the node agents run as one single-task step per node, and their sruns are
//     let go (SIGKILL of the srun, which forwards nothing) before a requeue makes Slurm TERM
//     the batch step.
//   - A failed step's record may never end when its survivors exited before the dead node was
//     taken out: it keeps their CPUs and a new step waits for them forever; `srun --overlap`.
//   - The job's owner may shrink a running job (`scontrol update JobId=J NodeList=<the rest>`,
//     ~35 ms); it writes slurm_job_J_resize.{sh,csh} into the working directory (run in TMPDIR,
//     removed). The batch host cannot be released. Without slurmdbd a resized job refuses
//     every later update ("the DB index is being set"), ExcNodeList included.
//   - ExcNodeList is refused on a running job and allowed on a pending or completing one.
//   - `scontrol requeue` of a job whose node is dead and not released waits in COMPLETING
//     until the node is DOWN (SlurmdTimeout). The requeue raises Restarts at once; the job is
//     eligible cred_expire + 1 s later (121 s by default); the scheduler skips a released node
//     once slurmctld flags it not responding (~MessageTimeout + 2 s after the release).
//   - `scontrol requeue` of a cancelled job that is still COMPLETING succeeds and runs it
//     again: a TERM from `scancel` must never be answered with a requeue.
//   - `scontrol -o show job` cuts values with spaces (WorkDir, StdOut...): the multi-line form
//     puts each of those on a line of its own, and that is what is parsed here.
//   - An empty answer is no answer: `squeue -o %N` printing nothing means "unknown", never
//     "the job has no nodes left".
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "orch/process.h"

namespace ftrain::orch {

// `scontrol show job` as fields (multi-line form; path fields keep their spaces).
struct JobInfo {
  std::map<std::string, std::string> fields;
  std::string Get(const std::string& key) const;  // "" when absent, "(null)", "N/A", "None"
  std::string State() const { return Get("JobState"); }
  int Restarts() const;
};
JobInfo ParseShowJob(const std::string& text);

// What a guarded requeue checks before each try (Slurm::Requeue).
using RequeueGuard = std::function<Status(const JobInfo&)>;

struct StepInfo {
  std::string id, name, nodes;
};

struct SlurmConfig {
  double message_timeout_s = 10;
  double cred_expire_s = 120;
  double kill_wait_s = 30;
  bool slurmdbd = false;
  int slurmd_port = 6818;
};

// What a submission did: the new job's id, or why there is none.
struct Submitted {
  std::string job;
  std::string error;
};

class Slurm {
 public:
  virtual ~Slurm() = default;
  virtual StatusOr<std::vector<std::string>> Hostnames(const std::string& hostlist) = 0;
  virtual StatusOr<std::string> Hostlist(const std::vector<std::string>& nodes) = 0;
  // The job's nodes now; nothing when slurmctld did not answer (or answered empty).
  virtual std::optional<std::vector<std::string>> NodesOfJob(const std::string& job) = 0;
  virtual StatusOr<JobInfo> ShowJob(const std::string& job) = 0;
  // One try, bounded by `timeout_s` (a question that must fit a deadline, like a TERM's).
  virtual StatusOr<JobInfo> ShowJobWithin(const std::string& job, double timeout_s) = 0;
  virtual StatusOr<std::vector<StepInfo>> Steps(const std::string& job) = 0;
  virtual std::string NodeState(const std::string& node) = 0;  // sinfo %t, "" if unknown
  // The nodes of a partition (a comma list of partitions); nothing when sinfo did not answer.
  virtual std::optional<std::vector<std::string>> PartitionNodes(const std::string& partition) = 0;
  virtual StatusOr<std::string> SlurmdAddress(const std::string& node) = 0;  // "addr port"
  virtual SlurmConfig Config() = 0;
  virtual bool Ping() = 0;  // slurmctld answers
  // Signals a step (scancel --signal); false only when scancel hung.
  virtual bool SignalStep(const std::string& step, const std::string& sig) = 0;
  virtual Status Release(const std::string& job, const std::vector<std::string>& keep) = 0;
  // Requeues the job and verifies it (Restarts above `restarts_before`), retrying within
  // `budget_s`; a requeue that acted though its command failed counts, once. With a `guard`,
  // every try first reads the job and requeues only when slurmctld answered and the guard
  // accepts what it says (its error ends the tries): a requeue that must never hit a cancelled
  // job (22.05 runs a cancelled COMPLETING job again) is never sent blind.
  virtual Status Requeue(const std::string& job, int restarts_before, double budget_s,
                         const RequeueGuard& guard) = 0;
  // ExcNodeList of a pending job; with `num_nodes` > 0 also its NumNodes (min and max),
  // NumTasks and NumCPUs, in the same update (22.05 allows them on a pending job, a requeued
  // one included; with NumNodes alone a job of --ntasks-per-node keeps its task and CPU
  // counts and is never runnable on fewer nodes: BadConstraints).
  virtual Status SetExcludedNodes(const std::string& job, const std::string& hostlist,
                                  int num_nodes = 0, int num_tasks = 0, int num_cpus = 0) = 0;
  // Cancels a job (only while pending when `pending_only`), verified.
  virtual Status Cancel(const std::string& job, bool pending_only) = 0;
  // sbatch with `token` as its comment: an sbatch that timed out after creating the job is
  // found by the token and not submitted twice.
  virtual Submitted Submit(const std::vector<std::string>& options, const std::string& script,
                           const std::vector<std::string>& env, const std::string& cwd,
                           const std::string& token) = 0;
  // The user's pending jobs and their dependencies ("ID" -> "afterok:42...").
  virtual std::vector<std::pair<std::string, std::string>> PendingJobsOfUser() = 0;
  virtual Status SetDependency(const std::string& job, const std::string& dependency) = 0;
  // More nodes for a running job (an elastic run growing back, issue 47): a new allocation of
  // `count` nodes, none of `exclude`, each asked for what the job asked per node (ExpandArgs),
  // with --dependency=expand:JOB and --immediate, handed to JOB (its NumNodes=0, then JOB's
  // NumNodes=ALL), and JOB's nodes read back. Returns the nodes JOB gained; an error says why
  // none (no room now; permit_job_expansion not in SchedulerParameters).
  virtual StatusOr<std::vector<std::string>> Expand(const std::string& job, int count,
                                                    const std::vector<std::string>& exclude) = 0;
};

class SlurmCli : public Slurm {
 public:
  SlurmCli();
  // sbatch's bound (60 s); tests shorten it.
  void set_submit_timeout(double s) { submit_timeout_s_ = s; }
  StatusOr<std::vector<std::string>> Hostnames(const std::string& hostlist) override;
  StatusOr<std::string> Hostlist(const std::vector<std::string>& nodes) override;
  std::optional<std::vector<std::string>> NodesOfJob(const std::string& job) override;
  StatusOr<JobInfo> ShowJob(const std::string& job) override;
  StatusOr<JobInfo> ShowJobWithin(const std::string& job, double timeout_s) override;
  StatusOr<std::vector<StepInfo>> Steps(const std::string& job) override;
  std::string NodeState(const std::string& node) override;
  std::optional<std::vector<std::string>> PartitionNodes(const std::string& partition) override;
  StatusOr<std::string> SlurmdAddress(const std::string& node) override;
  SlurmConfig Config() override;
  bool Ping() override;
  bool SignalStep(const std::string& step, const std::string& sig) override;
  Status Release(const std::string& job, const std::vector<std::string>& keep) override;
  Status Requeue(const std::string& job, int restarts_before, double budget_s,
                 const RequeueGuard& guard) override;
  Status SetExcludedNodes(const std::string& job, const std::string& hostlist, int num_nodes = 0,
                          int num_tasks = 0, int num_cpus = 0) override;
  Status Cancel(const std::string& job, bool pending_only) override;
  Submitted Submit(const std::vector<std::string>& options, const std::string& script,
                   const std::vector<std::string>& env, const std::string& cwd,
                   const std::string& token) override;
  std::vector<std::pair<std::string, std::string>> PendingJobsOfUser() override;
  Status SetDependency(const std::string& job, const std::string& dependency) override;
  StatusOr<std::vector<std::string>> Expand(const std::string& job, int count,
                                            const std::vector<std::string>& exclude) override;

 private:
  // A read-only query: two tries, `timeout_s` each.
  RunResult Query(const std::vector<std::string>& argv, double timeout_s = 10);
  std::string user_;
  double submit_timeout_s_ = 60;
  std::map<std::string, std::string> address_cache_;
  std::optional<SlurmConfig> config_;
};

// Pure helpers of the Slurm side, tested on their own.
// How long a requeue excluding released nodes waits for slurmctld to flag them not
// responding: the flag comes ~MessageTimeout + 2 s after the release (+3 s margin) and a
// requeued job is eligible cred_expire + 1 s after the requeue, so only the difference, at
// most `cap_s`.
double NorespondWaitS(const SlurmConfig& c, double cap_s);
// The nodes to exclude after a requeue: the user's own exclusions, the declared nodes Slurm
// still does not see responding (one that answers again is back: an exclusion lasts one
// requeue) and the faulty ones (alive but failing: excluded whatever Slurm sees).
std::vector<std::string> Exclusions(const std::vector<std::string>& user_excluded,
                                    const std::map<std::string, std::string>& dead_states,
                                    const std::vector<std::string>& faulty);
// salloc's arguments for Expand: the job's per-node request as `scontrol show job` says it
// (NtasksPerN, MinCPUsNode, TresPerNode, OverSubscribe=NO: exclusive), its partition, and
// its own ExcNodeList besides `exclude_hostlist`.
std::vector<std::string> ExpandArgs(const JobInfo& j, const std::string& job, int count,
                                    const std::string& exclude_hostlist);
// The job id in salloc's "Granted job allocation N" line ("" when absent).
std::string GrantedJob(const std::string& salloc_stderr);
// A node state of sinfo's %t that says the node responds (idle, mix, alloc, comp, resv, plnd).
bool Responds(const std::string& sinfo_state);

}  // namespace ftrain::orch
