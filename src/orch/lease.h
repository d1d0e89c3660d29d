// orch/lease.h - the run lease: which job may train a run directory, so that two jobs never
// train one run, whatever submitted them (a second `sbatch`, a watcher's resubmission racing
// Slurm's requeue, a batch host that wakes up). No clock is involved anywhere: the lease is a
// sequence of epochs on the shared file system.
//   - RUN/.lease.d/<epoch, 12 digits>: one entry per epoch, made with link(2), which creates a
//     name exclusively and atomically on NFS too (an EEXIST after a lost reply is resolved by
//     reading the entry back: ours or not). Whoever makes epoch E+1 holds the run.
//   - RUN/.lease: the current holder's text, replaced by rename (what readers read), with the
//     hand-off a watcher writes after it submitted the job again.
//   - Taking it over: from nobody, from an earlier start of the same job, from the job it was
//     handed to, or from a job Slurm says is not running (pending, ended, cancelled). A
//     running holder keeps it: the other job does not train.
//   - The epoch is the fence: the controller takes a new epoch for every launch of the ranks
//     and gives it to them (FTRAIN_FENCE_EPOCH); checkpoint generations are ordered by it
//     (ckpt::NewGeneration), so a writer of an older epoch is refused by the store whatever
//     any node's clock says.
// The checkpoint root's lease (issue 44, hole 15) is the same mechanism on
// CKPT/.root-lease.d and CKPT/.root-lease (CheckpointRootLease), its holder naming its run
// directory (`run`): any job of the same run takes it over (the run lease fences those), a
// job of another run only from a job Slurm says is not running. Two runs sharing one
// checkpoint root never both train.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::orch {

struct LeaseHolder {
  int64_t epoch = 0;
  std::string job;               // SLURM_JOB_ID of the holder
  int restart = 0;               // its restart count when it took the lease
  std::string host;              // where it runs
  std::string role = "job";      // "job" (a controller) or "watcher" (an agent taking over)
  std::string handoff;           // the job a watcher handed the run to
  std::string from;              // the job this one was submitted again from
  std::string token;             // random: tells our own entry from another's
  std::string run;               // the checkpoint root's lease only: the holder's run directory
  std::string Describe() const;  // "job 42 (epoch 7, on node1)" for logs
};
std::string FormatHolder(const LeaseHolder& h);
std::optional<LeaseHolder> ParseHolder(const std::string& text);

// Whether a job runs, as slurmctld says (nothing: it did not answer).
using JobAlive = std::function<std::optional<bool>(const std::string& job)>;

struct LeaseResult {
  bool ok = false;
  LeaseHolder holder;       // ok: ours; else who holds it
  bool superseded = false;  // not ok: the holder was submitted again from this job
  bool unknown = false;     // not ok: slurmctld could not say whether the holder runs
};

// The checkpoint root's lease files: CKPT/.root-lease and CKPT/.root-lease.d (not checkpoint
// entries: the store ignores names it does not parse, ckpt/filename.h).
std::string RootLeaseFile(const std::string& ckpt_root);
std::string RootLeaseDir(const std::string& ckpt_root);
// Whether `path` is `dir` or inside it, after resolving both (symbolic links, `..`) as far as
// they exist: a checkpoint root inside the run directory is covered by the run lease.
bool PathInside(const std::string& path, const std::string& dir);
// The run directory as the checkpoint root's lease names it (resolved, absolute).
std::string CanonicalRunDir(const std::string& run_dir);

class RunLease {
 public:
  RunLease(std::string lease_file, std::string lease_dir, Env* env)
      : file_(std::move(lease_file)), dir_(std::move(lease_dir)), env_(env) {}
  // The holder now (the highest epoch), nothing when the run was never leased.
  StatusOr<std::optional<LeaseHolder>> Current() const;
  // Takes the lease for `me` (epoch and token are filled in) if the rules above allow; a
  // holder of the same `run` (when set: the checkpoint root's lease) is always taken over.
  StatusOr<LeaseResult> Acquire(LeaseHolder me, const JobAlive& alive);
  // A new epoch for the holder `mine` (a launch). Aborted only when someone else provably took
  // the run (a later epoch that is not ours); any other error (IOError...) says nothing about
  // who holds it, and a retry after one finishes a renewal that made its entry.
  StatusOr<LeaseHolder> Renew(const LeaseHolder& mine);
  // Does `mine` still hold the run (no later epoch but its own renewals)?
  StatusOr<bool> Holds(const LeaseHolder& mine) const;
  // A watcher that took the run over names the job it handed it to.
  Status HandOff(const LeaseHolder& mine, const std::string& new_job);

 private:
  // Makes entry `h.epoch`; false when another made it first.
  StatusOr<bool> Create(const LeaseHolder& h);
  std::string file_, dir_;
  Env* env_;  // the lease's files
};

}  // namespace ftrain::orch
