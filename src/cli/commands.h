// Entry points of the `ftrain` subcommands. Each parses its own flags (argv[0] is the
// subcommand name) and returns the process exit code; ftrain_main.cc only dispatches.
#pragma once

namespace ftrain::cli {

int RunPlan(int argc, char** argv);       // cmd_plan.cc
int RunLaunch(int argc, char** argv);     // cmd_launch.cc
int RunCommcheck(int argc, char** argv);  // cmd_commcheck.cc
int RunTrain(int argc, char** argv);      // cmd_train.cc
int RunReport(int argc, char** argv);     // cmd_report.cc
int RunPaths(int argc, char** argv);      // cmd_paths.cc
int RunEval(int argc, char** argv);       // cmd_eval.cc
int RunPack(int argc, char** argv);       // data_exec.cc (runs ftrain-data pack)
int RunData(int argc, char** argv);       // data_exec.cc (runs ftrain-data data)

}  // namespace ftrain::cli
