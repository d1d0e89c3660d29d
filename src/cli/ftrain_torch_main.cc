// `ftrain-torch`: the LibTorch half of `ftrain` (train, eval, launch, commcheck). The `ftrain`
// dispatcher execs it with the same arguments; run directly it behaves the same.
#include <iostream>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  const ftrain::Status log = ftrain::cli::InitLogLevel(&argc, argv);
  if (!log.ok()) return ftrain::cli::Fail("ftrain", log);
  const std::string cmd = argc >= 2 ? argv[1] : "";
  if (cmd == "train") return ftrain::cli::RunTrain(argc - 1, argv + 1);
  if (cmd == "eval") return ftrain::cli::RunEval(argc - 1, argv + 1);
  if (cmd == "launch") return ftrain::cli::RunLaunch(argc - 1, argv + 1);
  if (cmd == "commcheck") return ftrain::cli::RunCommcheck(argc - 1, argv + 1);
  std::cerr << "usage: ftrain-torch train|eval|launch|commcheck [args] (the LibTorch half of "
               "'ftrain'; run 'ftrain --help')\n";
  return ftrain::cli::kExitUsage;
}
