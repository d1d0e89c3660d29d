// `ftrain launch --nproc N -- <ftrain args | /path/to/program args>`: flags only; the
// supervision lives in comm/launcher.
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "comm/launcher.h"

namespace ftrain::cli {

namespace po = boost::program_options;

int RunLaunch(int argc, char** argv) {
  const std::string program = "ftrain launch";
  // Everything after "--" belongs to the launched command.
  int split = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      split = i;
      break;
    }
  }
  po::options_description opts("ftrain launch --nproc N [--grace-s S] -- <ftrain args>");
  int nproc = 0;
  int grace = 10;
  int nodes = 1;
  opts.add_options()("help,h", "show this help")(
      "nodes", po::value<int>(&nodes)->default_value(1),
      "simulate this many nodes (consecutive blocks of ranks) for hybrid layouts")(
      "nproc", po::value<int>(&nproc)->required(), "number of local ranks to start")(
      "grace-s", po::value<int>(&grace)->default_value(10),
      "seconds between SIGTERM and SIGKILL when stopping the ranks after a failure");
  for (int i = 1; i < split; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << opts
                << "\nStarts N ranks of `ftrain <args>` (or of a program given by path)"
                   " with RANK, WORLD_SIZE,\nLOCAL_RANK, MASTER_ADDR, MASTER_PORT set; a failing"
                   " rank stops the others and its exit\ncode becomes the launcher's.\n";
      return kExitOk;
    }
  }
  po::variables_map vm;
  Status s = ParseFlags(program, split, argv, opts, po::positional_options_description(), &vm);
  if (!s.ok()) return Fail(program, s);
  if (nproc < 1 || nproc > 1024) {
    return Fail(program, Status::InvalidArgument("--nproc must be in [1, 1024], got " +
                                                 std::to_string(nproc)));
  }
  if (grace < 0) return Fail(program, Status::InvalidArgument("--grace-s must be >= 0"));
  if (split + 1 >= argc) {
    return Fail(program,
                Status::InvalidArgument("nothing to launch: give the command after '--', e.g. "
                                        "ftrain launch --nproc 2 -- commcheck"));
  }
  comm::LaunchOptions lo;
  lo.nproc = nproc;
  lo.grace_s = grace;
  lo.nodes = nodes;
  for (int i = split + 1; i < argc; ++i) lo.command.push_back(argv[i]);
  // The ranks run `ftrain <command>` through the torch-free dispatcher that exec'd us (it says
  // where it is), so they look like any other ftrain process; ftrain-torch run directly
  // starts them as itself.
  if (const char* d = std::getenv("FTRAIN_DISPATCHER"); d != nullptr && *d != '\0') {
    lo.self_exe = d;
  } else {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
      return Fail(program, Status::FailedPrecondition("cannot resolve /proc/self/exe"));
    }
    exe[len] = '\0';
    lo.self_exe = exe;
  }
  StatusOr<int> rc = comm::RunLocalJob(lo);
  if (!rc.ok()) return Fail(program, rc.status());
  return *rc;
}

}  // namespace ftrain::cli
