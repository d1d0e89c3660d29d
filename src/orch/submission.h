// orch/submission.h - a job whose batch host died, submitted again within seconds. Slurm
// cannot do this quickly for the job's owner: the owner may not release the batch host, a
// requeue waits in COMPLETING until Slurm marks the dead node DOWN (SlurmdTimeout), and a
// requeued job is eligible only cred_expire + 1 s later. A new job can start at once.
//   - Capture (the job controller, at its start, once it holds the run lease): RUN/.submit/
//     (0700) gets `job` (slurmctld's record, multi-line, so paths keep their spaces), `env`
//     (the environment the batch script began with, NUL-separated, credentials withheld:
//     their names go to `env.withheld`) and `script` (the batch script as submitted); 0600.
//   - Load (a batch-host watcher): the directory and every file must be this user's, mode
//     0700/0600, and no symbolic link is followed; anything else is refused with the reason.
//   - Options and environment of the new job (pure): the same script with the same options,
//     from the same submit directory, the dead node excluded (the user's own --exclude kept);
//     a spare takes the dead batch host's place (one node and one spare fewer;
//     FTRAIN_RESUBMIT_SAME_SIZE=1: the same size). Withheld credentials come from the
//     watcher's own environment (a step of the same job has them), never from the disk.
// Replayed: --nodes, --ntasks-per-node (or --ntasks), --cpus-per-task, --partition,
// --account, --qos, --job-name, --time, --chdir, --output/--error (the job id back to %j),
// --exclude, --constraint, --reservation, --mem, --mem-per-cpu, --mem-per-gpu, --gres,
// --gpus, --gpus-per-task, --gpus-per-socket, --cpus-per-gpu, --exclusive,
// --mail-user/--mail-type, --no-kill (spares left) and the script's #SBATCH lines. Not
// replayed: --nodelist (it may name the dead node), --dependency and --begin (met: the job
// ran), --comment (used for the submission's idempotency token); jobs waiting on the old job
// are pointed at the new one (RepointDependency).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "orch/slurm.h"

namespace ftrain::orch {

// Is NAME a credential (never written to the shared file system)?
bool IsCredential(const std::string& name);

// Writes RUN/.submit/{job,env,env.withheld,script} (see above). `environ_` is the batch
// script's environment as it began.
Status CaptureSubmission(const std::string& dir, const std::string& show_job_text,
                         const std::vector<std::string>& environment,
                         const std::string& script_path);

struct LoadedSubmission {
  JobInfo job;
  std::vector<std::string> env;             // NAME=VALUE, as captured
  std::map<std::string, std::string> vars;  // the same, by name
  std::vector<std::string> withheld;        // credential names to take from the watcher
  std::string script;                       // path of the saved script
};
// Loads and checks a capture (owner, mode, no links). FailedPrecondition names the problem.
StatusOr<LoadedSubmission> LoadSubmission(const std::string& dir);

// An output path of the old job with its job id put back as %j (a fixed name stays: the new
// job appends to it, train.sh's --open-mode=append).
std::string OutputPattern(const std::string& path, const std::string& job);

struct NewJob {
  std::vector<std::string> options;  // sbatch options (no --parsable, no --comment)
  std::vector<std::string> env;      // the new job's whole environment
  std::string cwd;                   // where sbatch runs (the old submit directory)
  int spares = 0;
};
// The new job's options and environment. `excluded` is `--exclude`'s node list:
// ResubmitExclusions(...). `own_env`: the watcher's environment (withheld credentials).
StatusOr<NewJob> NewJobOf(const LoadedSubmission& s, const std::string& dead,
                          const std::string& old_job, const std::vector<std::string>& excluded,
                          bool same_size, const std::string& home,
                          const std::map<std::string, std::string>& own_env);
// EXC minus DROP (an earlier resubmission's exclusions: a node that came back is used again)
// plus DEAD; the lists expanded already.
std::vector<std::string> ResubmitExclusions(const std::vector<std::string>& exc,
                                            const std::vector<std::string>& drop,
                                            const std::string& dead);
// A dependency naming OLD rewritten to NEW ("afterok:42(unfulfilled)" -> "afterok:4242"),
// nothing if it does not name OLD.
std::optional<std::string> RepointDependency(const std::string& dep, const std::string& old_job,
                                             const std::string& new_job);
// Can the new job ever run? A pending job whose reason says it never will (BadConstraints,
// PartitionConfig, InvalidAccount...) is not a replacement: the old job must not be cancelled.
// A record without a state says nothing against it (sbatch accepted the job).
bool CanRun(const JobInfo& j);

}  // namespace ftrain::orch
