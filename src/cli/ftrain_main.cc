// `ftrain`: dispatches to a subcommand. Nothing else lives here. This binary does not link
// LibTorch: report, paths, plan, job and agent run in it directly (milliseconds to start,
// which a recovery relies on); train, eval, launch and commcheck exec `ftrain-torch`, pack and
// data exec `ftrain-data` (sibling_exec.cc says why).
#include <cstring>
#include <iostream>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/version.h"

namespace {

const char* g_argv0 = "ftrain";

template <const char* kName>
int Torch(int argc, char** argv) {
  return ftrain::cli::ExecTorchCommand(g_argv0, kName, argc, argv);
}
constexpr char kTrain[] = "train";
constexpr char kEval[] = "eval";
constexpr char kLaunch[] = "launch";
constexpr char kCommcheck[] = "commcheck";

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

const Subcommand kSubcommands[] = {
    {"train", Torch<kTrain>, "train a model (FSDP, checkpoints, exact resume)"},
    {"eval", Torch<kEval>, "mean loss and perplexity of weights on packed data"},
    {"report", ftrain::cli::RunReport, "summary and SVG timeline of a run directory"},
    {"paths", ftrain::cli::RunPaths, "where a run directory keeps its files (for scripts)"},
    {"health", ftrain::cli::RunHealth,
     "can this node run its ranks (run dir, GPUs)? the job's probe"},
    {"plan", ftrain::cli::RunPlan, "memory per GPU for DDP/ZeRO/FSDP and the checkpoint interval"},
    {"launch", Torch<kLaunch>, "start N local ranks with an env rendezvous (torchrun-like)"},
    {"commcheck", Torch<kCommcheck>, "check collectives for correctness and print bus bandwidth"},
    {"pack", ftrain::cli::RunPack, "tokenize text into shards of fixed-length token rows"},
    {"data", ftrain::cli::RunData, "inspect | verify | batches of a packed dataset (dir or URL)"},
    {"job", ftrain::cli::RunJob, "the Slurm job controller (slurm/train.sh execs it)"},
    {"agent", ftrain::cli::RunAgent, "the node agent: ckptd, heartbeat, batch-host watch"},
    {"sim", ftrain::cli::RunSim, "the job controller under a seeded simulation of faults"},
    {"quarantine", ftrain::cli::RunQuarantine,
     "list the hosts RUN/quarantine.jsonl keeps out, or clear one"},
};

void Usage(std::ostream& out) {
  out << "usage: ftrain <command> [args]\n\ncommands:\n";
  for (const auto& s : kSubcommands) out << "  " << s.name << "\t" << s.help << "\n";
  out << "\n'ftrain <command> --help' describes a command's flags. Every command takes\n"
         "--log-level debug|info|warning|error (default: $FTRAIN_LOG_LEVEL, else info).\n";
}

}  // namespace

int main(int argc, char** argv) {
  g_argv0 = argv[0];
  const ftrain::Status log = ftrain::cli::InitLogLevel(&argc, argv);
  if (!log.ok()) return ftrain::cli::Fail("ftrain", log);
  if (argc < 2) {
    Usage(std::cerr);
    return ftrain::cli::kExitUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    Usage(std::cout);
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "ftrain " << ftrain::CodeVersion() << "\n";
    return 0;
  }
  for (const auto& s : kSubcommands) {
    if (cmd == s.name) return s.run(argc - 1, argv + 1);
  }
  std::cerr << "ftrain: unknown command '" << cmd << "'; run 'ftrain --help' for the list\n";
  return ftrain::cli::kExitUsage;
}
