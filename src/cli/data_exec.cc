// `ftrain pack` and `ftrain data` inside the ftrain binary: exec `ftrain-data` (same
// directory, or $FTRAIN_DATA_BIN) with the same arguments. Why a second binary: Debian's
// libsentencepiece exports its bundled copy of protobuf-lite, which collides with the
// libprotobuf that LibTorch loads (a crash in static initialisation before main). The trainer
// links only ftrain_data (the reader: no SentencePiece), so it is not affected.
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

int ExecDataTool(const char* subcommand, int argc, char** argv) {
  const std::string program = std::string("ftrain ") + subcommand;
  std::string tool;
  if (const char* env = std::getenv("FTRAIN_DATA_BIN"); env != nullptr && *env != '\0') {
    tool = env;
  } else {
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) return Fail(program, Status::FailedPrecondition("cannot resolve /proc/self/exe"));
    exe[len] = '\0';
    std::string self = exe;
    tool = self.substr(0, self.rfind('/') + 1) + "ftrain-data";
  }
  std::vector<char*> args;
  args.push_back(const_cast<char*>("ftrain-data"));
  args.push_back(const_cast<char*>(subcommand));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(tool.c_str(), args.data());
  return Fail(program, Status::FailedPrecondition(
                           "cannot run " + tool + ": " + std::strerror(errno) +
                           " (build the 'ftrain-data' target, or set FTRAIN_DATA_BIN)"));
}

}  // namespace

int RunPack(int argc, char** argv) { return ExecDataTool("pack", argc, argv); }
int RunData(int argc, char** argv) { return ExecDataTool("data", argc, argv); }

}  // namespace ftrain::cli
