// RunLayout: the one place that knows where a run directory keeps its files, the way
// ckpt/filename.h knows checkpoint names. Every C++ reader and writer asks it; the shell scripts
// ask `ftrain paths RUN_DIR` (src/cli/cmd_paths.cc) instead of keeping their own copies.
//
//   RUN/metrics.jsonl         one line per step (rank 0; src/train/telemetry/metrics.h)
//   RUN/restarts.jsonl        starts, restarts, stops: written by one writer, the holder of the
//                             run lease (records/restarts.h), merged from the spools below
//   RUN/.records/             restarts-<node>.jsonl: one spool per writer host (the trainer's
//                             rank 0, the node agents); the lease holder merges them
//   RUN/.lease, RUN/.lease.d/ the run lease: which job may train this run (orch/lease.h)
//   RUN/quarantine.jsonl      nodes a replica check found computing wrong bits (rank 0)
//   RUN/hangs.jsonl           ranks the hang guard found stuck while the others waited (one
//                             line per hang, by the lowest rank that was not hung)
//   RUN/node_faults.jsonl     nodes that could not run their ranks (no usable GPU, the driver,
//                             a local data path; the trainer exits 76), one line per rank
//   RUN/progress/             node-<N>.json: the step, phase and collectives launched of each
//                             rank of node N, rewritten every 2 s by one rank of the node
//                             (train/hang_watch.h)
//   RUN/.faults_fired         FTRAIN_FAULT items that ended a process and must not fire again
//   RUN/rollbacks.jsonl       guard.policy = rollback: the steps that rolled the run back (rank 0)
//   RUN/config.resolved.cfg   the configuration the newest start resolved (rank 0)
//   RUN/.config_error         why the trainer refused its configuration (exit 2)
//   RUN/.last_stop            why the previous start ended (slurm/train.sh)
//   RUN/.failed_starts        "NEWEST_CHECKPOINT COUNT": starts in a row whose rank failures
//                             outlasted the in-job restarts with no newer checkpoint (train.sh)
//   RUN/.node_requeues        "NEWEST_CHECKPOINT COUNT": requeues in a row for a node's failure,
//                             fault or quarantine with no newer checkpoint (ftrain job)
//   RUN/logs/                 logs of the node agents and daemons: ckptd-<node>.log
//   RUN/ckptd-<node>/         the node's checkpoint daemon: sock, lock (ckpt/ckptd_protocol.h),
//                             peer-addr (where its buddy-replication port listens),
//                             buddy-addr (slurm/agent.sh: a link to its buddy's peer-addr)
//   RUN/.ckptd-secret         this start's secret for buddy replication (0600, slurm/train.sh)
//   RUN/.job-nodes            the job's live nodes, in ring order (slurm/train.sh writes it,
//                             the node agents follow it: replication ring, batch-host watchers)
//   RUN/checkpoints/          the default checkpoint root (ckpt.root overrides it)
//   RUN/ckpt-staging/         the default staging root of ckpt.root = s3://... (ckpt.staging)
//   RUN/tensorboard/          TensorBoard event files (metrics.tensorboard)
//   RUN/prometheus/           the default Prometheus textfile directory (metrics.prometheus_dir)
//   RUN/profile/              Chrome traces of train.profile_steps: trace-rank<R>.json per rank
//   RUN/commcheck.json        the newest `ftrain commcheck --record` over the job's ranks
//                             (slurm/train.sh's pre-flight); `ftrain report` reads the link from it
#pragma once

#include <string>

#include "core/status.h"

namespace ftrain {

class RunLayout {
 public:
  explicit RunLayout(std::string run_dir) : run_dir_(std::move(run_dir)) {}

  const std::string& run_dir() const { return run_dir_; }
  std::string metrics() const;
  std::string restarts() const;
  // RUN/.records: the per-host spools of restarts.jsonl (records/restarts.h).
  std::string records_dir() const;
  std::string restarts_spool(const std::string& node) const;
  // RUN/quarantine.jsonl: nodes a replica check found computing wrong bits (train/sdc_check.h);
  // written by the trainer's rank 0 alone, read by `ftrain report`.
  std::string quarantine() const;
  // RUN/hangs.jsonl: ranks the hang guard named (train/hang_watch.h); read by `ftrain report`.
  std::string hangs() const;
  // RUN/node_faults.jsonl: ranks whose node could not run them (records/node_faults.h; exit
  // 76); the job controller reads the lines a step added.
  std::string node_faults() const;
  // RUN/progress and RUN/progress/node-<N>.json: the published progress of node N's ranks.
  std::string progress_dir() const;
  std::string node_progress(int node) const;
  // RUN/.faults_fired: the FTRAIN_FAULT items (testing only) that end the process and have
  // fired in this run, one "KIND@STEP:RANK" per line (core/fault_inject.h).
  std::string faults_fired() const;
  // RUN/rollbacks.jsonl: one line per rollback of guard.policy = rollback
  // (train/verdicts/rollback.h); every start reads it to skip the rolled-back steps.
  std::string rollbacks() const;
  // RUN/.lease (the current holder, replaced atomically) and RUN/.lease.d (one entry per
  // epoch, created exclusively): the run lease (orch/lease.h).
  std::string lease() const;
  std::string lease_dir() const;
  std::string resolved_config() const;
  std::string config_error() const;
  std::string last_stop() const;
  std::string failed_starts() const;
  std::string node_requeues() const;
  std::string logs() const;
  std::string daemon_dir(const std::string& node) const;
  std::string daemon_log(const std::string& node) const;
  std::string daemon_peer_addr(const std::string& node) const;
  std::string daemon_buddy_addr(const std::string& node) const;
  std::string replication_secret() const;
  std::string job_nodes() const;
  // RUN/.heartbeats: one file per node agent (slurm/agent.sh), its counter bumped every second;
  // train.sh declares a node dead when its counter stops and its slurmd does not answer.
  std::string heartbeats() const;
  // RUN/.submit: the job's submission as train.sh saw it at its start (sbatch options, the
  // environment, the batch script), replayed by the node agents when the batch host dies.
  std::string submit() const;
  // model.hf's config.json as the run's first start read it ({"source": path, "text": bytes}):
  // a restart whose base directory has moved takes the model from here (formats/hf_config.h).
  std::string hf_config_copy() const;
  // The node of a daemon directory name ("ckptd-n1" -> "n1"); empty if it is not one.
  static std::string NodeOfDaemonDir(const std::string& name);
  // RUN/checkpoints: where checkpoints go unless ckpt.root says otherwise.
  std::string default_checkpoint_root() const;
  // RUN/ckpt-staging: where checkpoints are staged before their commit on S3 when ckpt.root is
  // s3://... and ckpt.staging is not set (ckpt/s3_staging.h).
  std::string default_staging_root() const;
  std::string tensorboard() const;
  std::string profile() const;                // RUN/profile
  std::string profile_trace(int rank) const;  // RUN/profile/trace-rank<R>.json
  std::string default_prometheus_dir() const;
  std::string commcheck() const;  // RUN/commcheck.json

  // The checkpoint root the newest start of this run used: ckpt.root from its resolved config
  // when it has one (its staging root, ckpt.staging, when ckpt.root is s3://), else the default. An
  // unreadable or malformed resolved config is an error naming the file (a wrong root would make a
  // reader miss every checkpoint).
  StatusOr<std::string> CheckpointRoot() const;

 private:
  std::string run_dir_;
};

}  // namespace ftrain
