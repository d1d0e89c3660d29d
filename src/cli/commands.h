// Entry points of the `ftrain` subcommands. Each parses its own flags (argv[0] is the
// subcommand name) and returns the process exit code; ftrain_main.cc only dispatches.
#pragma once

namespace ftrain::cli {

int RunPlan(int argc, char** argv);       // cmd_plan.cc
int RunLaunch(int argc, char** argv);     // cmd_launch.cc
int RunCommcheck(int argc, char** argv);  // cmd_commcheck.cc

}  // namespace ftrain::cli
