// `ftrain job` and `ftrain agent`: the Slurm job controller that slurm/train.sh execs (same PID,
// so `--signal=B:USR1` reaches it) and the node agent that runs on every node of the job (one
// step each). Flags and settings only; the work is in src/orch (job_runner.h, agent_runner.h).
// `ftrain job --dry-run FILE` prints the policy's decisions for recorded observations;
// `ftrain job --table` the table of what the job script handles (docs/operations.md);
// `ftrain job --machine` the controller's routes, phases, observations and actions
// (docs/design.md).
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/env.h"
#include "orch/agent_runner.h"
#include "orch/dry_run.h"
#include "orch/job_runner.h"
#include "orch/settings.h"
#include "orch/slurm.h"

namespace ftrain::cli {

namespace po = boost::program_options;

namespace {

// --dry-run FILE ('-': stdin) through `replay` (the job's or the watcher's); exit 2 when the
// file cannot be read or a line is bad, naming it.
int DryRun(const std::string& program, const std::string& file,
           Status (*replay)(const std::string&, std::ostream&)) {
  std::stringstream text;
  if (file == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) return Fail(program, Status::InvalidArgument("--dry-run: cannot read '" + file + "'"));
    text << in.rdbuf();
  }
  Status s = replay(text.str(), std::cout);
  return s.ok() ? kExitOk : Fail(program, s);
}

}  // namespace

int RunJob(int argc, char** argv) {
  const std::string program = "ftrain job";
  po::options_description opts(
      "ftrain job [--script PATH] | --dry-run FILE | --table | --machine\n"
      "The Slurm job controller (slurm/train.sh execs it; settings: FTRAIN_* variables, see\n"
      "docs/operations.md)");
  std::string script, dry_run;
  bool table = false, machine = false;
  opts.add_options()("help,h", "show this help")(
      "script", po::value<std::string>(&script),
      "the batch script as Slurm runs it (saved for a resubmission if the batch host dies)")(
      "dry-run", po::value<std::string>(&dry_run),
      "print the decisions for the observations in FILE ('-': stdin); runs nothing")(
      "table", po::bool_switch(&table), "print the table of what the job script handles")(
      "machine", po::bool_switch(&machine),
      "print the controller's machine: (phase, observation) -> handler, and its kinds");
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, {}, &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  if (table) {
    std::cout << orch::HandledTable();
    return kExitOk;
  }
  if (machine) {
    std::cout << orch::MachineTable();
    return kExitOk;
  }
  if (!dry_run.empty()) return DryRun(program, dry_run, orch::DryRun);
  auto settings = orch::LoadJobSettings(orch::ProcessEnv());
  if (!settings.ok()) return Fail(program, settings.status());
  orch::SlurmCli slurm;
  orch::JobRunner runner(*settings, orch::ContextFromEnvironment(script), &slurm, Env::Default());
  return runner.Run();
}

int RunAgent(int argc, char** argv) {
  const std::string program = "ftrain agent";
  po::options_description opts(
      "ftrain agent | --dry-run FILE\nThe node agent: runs this node's ckptd, its heartbeat, and "
      "the batch-host watch (started by `ftrain job`, one step per node; settings: FTRAIN_* "
      "variables)");
  std::string dry_run;
  opts.add_options()("help,h", "show this help")(
      "dry-run", po::value<std::string>(&dry_run),
      "print the batch-host watcher's decisions for the observations in FILE ('-': stdin); "
      "runs nothing");
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, {}, &vm);
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  if (!dry_run.empty()) return DryRun(program, dry_run, orch::WatcherDryRun);
  auto settings = orch::LoadAgentSettings(orch::ProcessEnv());
  if (!settings.ok()) return Fail(program, settings.status());
  orch::AgentRunner runner(*settings, Env::Default());
  return runner.Run();
}

}  // namespace ftrain::cli
