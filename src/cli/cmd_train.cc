// `ftrain train --config FILE [--section.key=value ...]`: flags only; the loop is in
// src/train. Exit codes: 0 done, 75 checkpointed on a signal (requeue me), 1 bad data, a
// failed rank, a timeout or an I/O error (worth a restart), 2 usage, config or input error
// (a restart cannot help: slurm/train.sh fails the job), 76 this node cannot run its ranks
// (RUN_DIR/node_faults.jsonl names it; `ftrain job` moves them), 77 replicas disagree (silent data
// corruption), 78 a rank hung (the hang guard named it), 79 rolled back (guard.policy =
// rollback): all three restart from a checkpoint.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/env.h"
#include "core/log.h"
#include "records/config_error.h"
#include "records/node_faults.h"
#include "train/trainer.h"

namespace ftrain::cli {

namespace {
constexpr char kHelp[] =
    "usage: ftrain train --config FILE [--section.key=value ...]\n"
    "  Trains the model described by FILE (see configs/ and docs/training.md). Any config key\n"
    "  can be overridden, e.g. --train.steps=100 --ckpt.every_steps=10.\n"
    "  Run it as one process, under `ftrain launch --nproc N --`, or under `srun --mpi=pmix`.\n"
    "exit codes: 0 done, 75 stopped on SIGUSR1/SIGTERM after a checkpoint (requeue me),\n"
    "  1 bad data, a failed rank, a timeout or an I/O error (a restart may help),\n"
    "  2 usage, config or input error (a restart cannot help; RUN_DIR/.config_error says why),\n"
    "  74 the checkpoint storage could not be read at resume for ckpt.resume_retry_s\n"
    "     (nothing was moved aside; retry once the file system answers),\n"
    "  76 this node cannot run its ranks: no usable GPU, fewer GPUs than its ranks, a CUDA\n"
    "     driver failure, a local data.path it cannot read (RUN_DIR/node_faults.jsonl names\n"
    "     the host; the job controller moves its ranks to a spare or requeues without it)\n"
    "  77 replicas disagree: silent data corruption (RUN_DIR/quarantine.jsonl names the nodes),\n"
    "  78 a rank hung while the others waited for it (restart me: RUN_DIR/hangs.jsonl names it),\n"
    "  79 guard.policy = rollback rolled the run back (restart me: RUN_DIR/rollbacks.jsonl)\n";

// A local data path this node cannot read (its file system not mounted here) is this node's
// fault (exit 76); the job controller calls it the configuration's when every training node
// reports it (a path that exists nowhere). A URL is the data server's business.
Status LocalDataReadable(const std::string& path) {
  if (path.empty() || path.find("://") != std::string::npos) return Status::Ok();
  if (::access(path.c_str(), R_OK) == 0) return Status::Ok();
  const int e = errno;
  return Status::NodeFault("data.path '" + path + "' is not readable on this node: " +
                           std::strerror(e) + " (its file system not mounted here?)");
}

}  // namespace

int RunTrain(int argc, char** argv) {
  const std::string program = "ftrain train";
  Env* env = Env::Default();  // this process's files and clock, passed to everything below
  std::string config_path;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return kExitOk;
    }
    if (a == "--config") {
      if (i + 1 >= argc) return Fail(program, Status::InvalidArgument("--config needs a file"));
      config_path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config_path = a.substr(9);
    } else if (a.rfind("--", 0) == 0 && a.find('.') != std::string::npos) {
      overrides.push_back(a);
    } else {
      return Fail(program, Status::InvalidArgument("unexpected argument '" + a +
                                                   "' (want --config FILE and --section.key=value "
                                                   "overrides; see 'ftrain train --help')"));
    }
  }
  if (config_path.empty()) {
    return Fail(program,
                Status::InvalidArgument("--config FILE is required (see 'ftrain train --help')"));
  }
  // A configuration error before the config is loaded is recorded in the run directory
  // named on the command line (slurm/train.sh always passes --run.dir=).
  std::string cli_run_dir;
  for (const auto& o : overrides) {
    if (o.rfind("--run.dir=", 0) == 0) cli_run_dir = o.substr(10);
  }
  auto config_error = [&](const Status& s) {
    Status w = records::RecordConfigError(cli_run_dir, s.message(), env);
    (void)w;  // best effort: the message is on stderr either way
    return Fail(program, s);
  };
  auto tc = train::TrainConfig::LoadFile(config_path, overrides);
  if (!tc.ok()) return config_error(tc.status());
  int exit_code = 0;
  const records::LaunchContext launch = records::LaunchContext::FromEnvironment();
  Status s = LocalDataReadable(tc->data.path);
  try {
    if (s.ok()) s = train::RunTraining(*tc, launch, env, &exit_code);
  } catch (const StatusError& e) {
    // The model validates its inputs by throwing (e.g. a token id outside the vocabulary).
    s = e.status();
  } catch (const std::exception& e) {
    std::string what = e.what();
    s = Status::Internal("unexpected error: " + what.substr(0, what.find('\n')));
  }
  if (!s.ok()) {
    FT_LOG(Error) << program << ": " << s.message();
    // A rendezvous/collective timeout or an I/O error is the environment of this start (a
    // node that did not come up, a full disk): exit 1, so that the job script restarts.
    // Configuration and input errors stay 2 and are recorded for the job script, which then
    // fails the job instead of looping (slurm/train.sh).
    // Checkpoint storage that did not answer for ckpt.resume_retry_s: 74, which `ftrain job`
    // retries as a storage outage (nothing was moved aside).
    if (s.IsStorageUnavailable()) return kExitStorage;
    // This node cannot run its ranks (no usable GPU, too few, the driver): 76, and a line in
    // RUN/node_faults.jsonl naming the host, so that `ftrain job` moves its ranks to a spare
    // or requeues without it (the same on every node: the job fails as a config error).
    if (s.IsNodeFault()) {
      Status w = records::RecordNodeFault(tc->run_dir, launch, s.message(), env);
      if (!w.ok()) FT_LOG(Warning) << "cannot record the node fault: " << w.message();
      return kExitNodeFault;
    }
    if (s.code() == Status::Code::kDeadlineExceeded || s.code() == Status::Code::kIOError) {
      return kExitBad;
    }
    const int code = ExitCodeFor(s);
    if (code == kExitUsage) {
      Status w = records::RecordConfigError(tc->run_dir, s.message(), env);
      if (!w.ok()) FT_LOG(Warning) << "cannot record the error: " << w.message();
    }
    return code;
  }
  return exit_code;
}

}  // namespace ftrain::cli
