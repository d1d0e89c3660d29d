// The data subcommands as they run inside `ftrain-data` (the torch-free helper binary that
// `ftrain pack` and `ftrain data` exec; see sibling_exec.cc). Same flags, same exit codes.
#pragma once

namespace ftrain::cli {

int RunPackLocal(int argc, char** argv);  // cmd_pack.cc
int RunDataLocal(int argc, char** argv);  // cmd_data.cc

}  // namespace ftrain::cli
