// `ftrain-data`: the torch-free binary behind `ftrain pack` and `ftrain data` (see
// sibling_exec.cc). Usable directly: `ftrain-data pack ...`, `ftrain-data data verify DIR`.
#include <iostream>
#include <string>

#include "cli/cli_util.h"
#include "cli/data_commands.h"

int main(int argc, char** argv) {
  const ftrain::Status log = ftrain::cli::InitLogLevel(&argc, argv);
  if (!log.ok()) return ftrain::cli::Fail("ftrain-data", log);
  const std::string usage =
      "usage: ftrain-data pack [flags] INPUT... | ftrain-data pack merge OUT PARTS... |\n"
      "       ftrain-data data inspect|verify|batches SRC\n"
      "(the same as 'ftrain pack' and 'ftrain data'; add --help for the flags)\n";
  if (argc < 2) {
    std::cerr << usage;
    return ftrain::cli::kExitUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "pack") return ftrain::cli::RunPackLocal(argc - 1, argv + 1);
  if (cmd == "data") return ftrain::cli::RunDataLocal(argc - 1, argv + 1);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << usage;
    return ftrain::cli::kExitOk;
  }
  std::cerr << "ftrain-data: unknown command '" << cmd << "'\n" << usage;
  return ftrain::cli::kExitUsage;
}
