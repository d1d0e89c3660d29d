// orch/settings.h - every FTRAIN_* setting of the job controller (`ftrain job`) and the node
// agent (`ftrain agent`), read from the environment once, checked, with the defaults
// slurm/train.sh documents. A value that is not a number where one is needed is an
// InvalidArgument naming the variable (the command exits 2). Nothing here decides anything.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::orch {

// Reads a variable; the default is used when it is unset or empty.
using Getenv = std::function<std::string(const std::string&)>;
Getenv ProcessEnv();                                     // std::getenv
Getenv MapEnv(std::map<std::string, std::string> vars);  // for tests and --dry-run
// The process's variable `name` (ProcessEnv), or `def` when it is unset or empty: the I/O
// runners' own FTRAIN_* knobs (job_runner.cc, agent_runner.cc).
std::string EnvOr(const std::string& name, const std::string& def = "");

// Detection (shared by the controller's watch of the training nodes and the agents' watch of
// the batch host): see orch/detect.h.
struct DetectSettings {
  bool on = true;                  // FTRAIN_DETECT
  double heartbeat_timeout_s = 3;  // FTRAIN_HEARTBEAT_TIMEOUT_S: silence before a probe
  double probe_timeout_s = 2;      // FTRAIN_PROBE_TIMEOUT_S: TCP connect to slurmd
  double hung_after_s = 60;        // FTRAIN_HUNG_AFTER_S: silence before a paused node is lost
  double blip_s = 10;              // FTRAIN_BLIP_S: silence a probe *timeout* must outlast
  double heartbeat_period_s = 1;   // FTRAIN_HEARTBEAT_PERIOD_S (agents)
  double detect_period_s = 0.5;    // FTRAIN_DETECT_PERIOD_S (watchers)
};

struct JobSettings {
  std::string home, bin, config, run_dir, data;
  std::vector<std::string> train_args;  // FTRAIN_ARGS, split on white space
  std::string ckpt_root_override;       // FTRAIN_CKPT_ROOT
  int ranks_per_node = 1;               // FTRAIN_RANKS_PER_NODE (else SLURM_NTASKS_PER_NODE)
  bool preflight = true;
  double preflight_timeout_s = 120;
  int max_injob_restarts = 2;
  int max_failed_starts = 3;
  // FTRAIN_MAX_ROLLBACK_RESTARTS: exits 79 (guard.policy = rollback) restarted in place with no
  // newer complete checkpoint; past it a failed start is counted (2 x guard.max_rollbacks).
  int max_rollback_restarts = 6;
  // FTRAIN_MAX_NODE_REQUEUES: requeues in a row for a node's failure, fault or quarantine with
  // no newer complete checkpoint (RUN/.node_requeues); one more ends the job FAILED.
  int max_node_requeues = 5;
  // FTRAIN_STORAGE_OUTAGE_S: how long the trainer's exit 74 (the checkpoint storage unreadable
  // at resume) is restarted in place, from the first 74 in a row; past it the job FAILS.
  double storage_outage_s = 1800;
  double restart_backoff_s = 5;
  double health_timeout_s = 20;
  // The GPUs `ftrain health` wants on each node: the ranks per node when the config (with
  // FTRAIN_ARGS) says train.device = cuda, else 0.
  int health_gpus = 0;
  double health_wait_s = 300;
  double stop_timeout_s = 90;
  bool ckptd = true;
  double ckptd_start_timeout_s = 60;
  std::string spare_nodes = "0";  // FTRAIN_SPARE_NODES: checked by the policy (a record)
  std::string spare_nodelist;
  double spare_check_s = 5;
  // FTRAIN_ELASTIC: auto | 1 | 0. On, a training node that dies when no spare is left shrinks
  // the run onto the survivors in this allocation (at least FTRAIN_ELASTIC_MIN_NODES) instead
  // of requeueing it; auto is on when the config (with FTRAIN_ARGS) sets dist.reduce = exact,
  // the reduction whose bits do not depend on the number of ranks.
  bool elastic = false;
  int elastic_min_nodes = 1;
  // FTRAIN_ELASTIC_GROW_S: while an elastic run is shrunk, how often the controller asks Slurm
  // for nodes to grow back to its training size in this allocation (salloc
  // --dependency=expand, which needs SchedulerParameters=permit_job_expansion); 0: never (the
  // run grows back at its next requeue).
  double elastic_grow_s = 30;
  // FTRAIN_REPLICATION: auto | 1 | 0; auto becomes 1 when the config (with FTRAIN_ARGS) sets
  // ckpt.memory_every_steps or _seconds > 0 (the memory tier needs the buddy's copy), else
  // spares decide.
  std::string replication = "auto";
  double norespond_wait_s = 30;
  // FTRAIN_USR1_LEAD_S: train.sh's --signal=B:USR1@<lead>. Unset, the lead of a USR1 is taken
  // from the job's EndTime and the partition's GraceTime (orch/stop_lead.h), this the default
  // when Slurm does not say; set, it overrides them (usr1_lead_set).
  double usr1_lead_s = 120;
  bool usr1_lead_set = false;
  // FTRAIN_TERM_ASK_S: after a TERM, how long an unanswered question to slurmctld (cancelled,
  // at the time limit, or running?) is asked again before the job is requeued as at the time
  // limit; with the requeue's 15 s it ends inside Slurm's default KillWait (30 s).
  double term_ask_s = 10;
  // FTRAIN_REQUEUE_RETRY_S: the budget of a requeue that does not race the time limit (a node
  // failure, rank failures, a quarantine, the run lease): a slurmctld failover takes longer
  // than the 15 s of the stop paths.
  double requeue_retry_s = 180;
  // FTRAIN_LEASE_RETRY_S: how long a launch retries renewing the run lease after an I/O error
  // before the job is requeued (never a silent exit 0).
  double lease_retry_s = 60;
  int max_resubmits = 3;
  // FTRAIN_HANG_REPEAT_WINDOW_S: two hang records of a host at most this far apart (the
  // newest record's time back) quarantine it; 0 = any two of the run.
  double hang_repeat_window_s = 21600;
  // FTRAIN_FAULTY_KEEP_S: a node that failed a localisation or reported a node fault (exit 76)
  // has a "node_fault" line in RUN/quarantine.jsonl and stays out of every start and requeue of
  // the run for this long after its newest such line; 0 = for the whole run. Deleting its lines
  // returns it at once (docs/operations.md, "Faulty nodes").
  double faulty_keep_s = 86400;
  // FTRAIN_HANG_QUARANTINE_KEEP_S: a host quarantined for repeated hangs (a "hang" line in
  // RUN/quarantine.jsonl) stays out for this long after its line; 0 = for the whole run.
  // `ftrain quarantine clear` returns it at once (docs/operations.md, "Quarantined nodes").
  double hang_quarantine_keep_s = 86400;
  DetectSettings detect;
};

struct AgentSettings {
  std::string home, bin, ckptd_bin, run_dir, ckpt_root, ckptd_args;
  std::string node;        // SLURMD_NODENAME, else the short host name
  std::string batch_host;  // FTRAIN_BATCH_HOST: watched by two agents ("" : nobody watches)
  int spare_nodes = 0;
  bool replication = false;
  int max_restarts = 3;          // FTRAIN_CKPTD_MAX_RESTARTS
  double watch_period_s = 2;     // FTRAIN_AGENT_PERIOD_S
  double sbatch_timeout_s = 60;  // FTRAIN_SBATCH_TIMEOUT_S: the bound of the resubmission
  int max_resubmits = 3;
  int resubmits = 0;       // FTRAIN_RESUBMITS: resubmissions so far of this job
  bool same_size = false;  // FTRAIN_RESUBMIT_SAME_SIZE
  std::string peer_host, peer_port = "0", peer_advertise;
  std::string replica_memory_gb = "8";
  std::string replication_mbps = "0";  // FTRAIN_REPLICATION_MBPS: ckptd's cap; 0 = unlimited
  DetectSettings detect;
};

StatusOr<JobSettings> LoadJobSettings(const Getenv& env);

// The arguments after `ftrain train` with which the controller launches each start (the srun
// line, job_runner.cc): the config, the job's data, run directory and checkpoint root, the
// daemon mode, and FTRAIN_ARGS last, so that they win as they do on a command line.
std::vector<std::string> TrainerArgs(const JobSettings& s);
// What the trainer launched with TrainerArgs will run, read as it reads it
// (train::TrainConfig::LoadFile): the controller's facts about the run (the memory tier, GPUs,
// exact reduction, the checkpoint root) come from here, never from the keys read again.
// Errors: those the trainer exits 2 with.
StatusOr<train::TrainConfig> TrainerConfig(const JobSettings& s);
StatusOr<AgentSettings> LoadAgentSettings(const Getenv& env);

// Splits on white space (FTRAIN_ARGS, FTRAIN_CKPTD_ARGS: lists of flags, as the scripts did).
std::vector<std::string> SplitWords(const std::string& s);

}  // namespace ftrain::orch
