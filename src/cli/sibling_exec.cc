// The torch-free `ftrain` dispatcher runs its heavy subcommands by exec'ing a sibling binary
// (same directory as /proc/self/exe, or an env override) with the same arguments and argv[0]:
//  - `ftrain-torch` (train, eval, launch, commcheck): LibTorch's shared libraries (the CUDA
//    build's are over a GB) take seconds to load, which every `ftrain paths` in the Slurm
//    scripts, `ftrain report` and `ftrain plan` paid before; now only the commands that compute
//    with tensors do. The exec keeps the PID, so srun, signals and `pgrep -f '^.../ftrain train'`
//    see the same process.
//  - `ftrain-data` (pack, data): Debian's libsentencepiece exports its bundled copy of
//    protobuf-lite, which collides with the libprotobuf that LibTorch loads (a crash in static
//    initialisation before main).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace ftrain::cli {
namespace {

StatusOr<std::string> SelfExe() {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return Status::FailedPrecondition("cannot resolve /proc/self/exe");
  exe[len] = '\0';
  return std::string(exe);
}

// Runs `<tool> <subcommand> argv[1..]`; argv0 is what the new process sees as argv[0].
int ExecSibling(const char* tool_name, const char* env_override, const char* argv0,
                const char* subcommand, int argc, char** argv) {
  const std::string program = std::string("ftrain ") + subcommand;
  std::string tool;
  if (const char* env = std::getenv(env_override); env != nullptr && *env != '\0') {
    tool = env;
  } else {
    StatusOr<std::string> self = SelfExe();
    if (!self.ok()) return Fail(program, self.status());
    tool = self->substr(0, self->rfind('/') + 1) + tool_name;
    // `ftrain launch` starts its ranks through this dispatcher, so they look like any other
    // `ftrain train` process.
    setenv("FTRAIN_DISPATCHER", self->c_str(), 1);
  }
  std::vector<char*> args;
  args.push_back(const_cast<char*>(argv0));
  args.push_back(const_cast<char*>(subcommand));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  return Fail(program, Status::FailedPrecondition(
                           "cannot run " + tool + ": " + std::strerror(errno) + " (build the '" +
                           tool_name + "' target, or set " + env_override + ")"));
}

}  // namespace

int RunPack(int argc, char** argv) {
  return ExecSibling("ftrain-data", "FTRAIN_DATA_BIN", "ftrain-data", "pack", argc, argv);
}
int RunData(int argc, char** argv) {
  return ExecSibling("ftrain-data", "FTRAIN_DATA_BIN", "ftrain-data", "data", argc, argv);
}
int ExecTorchCommand(const char* argv0, const char* subcommand, int argc, char** argv) {
  return ExecSibling("ftrain-torch", "FTRAIN_TORCH_BIN", argv0, subcommand, argc, argv);
}

}  // namespace ftrain::cli
