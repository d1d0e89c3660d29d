// Entry points of the `ftrain` subcommands. Each parses its own flags (argv[0] is the
// subcommand name) and returns the process exit code; ftrain_main.cc (the torch-free `ftrain`)
// and ftrain_torch_main.cc (`ftrain-torch`, what it execs for train/eval/launch/commcheck)
// only dispatch.
#pragma once

namespace ftrain::cli {

int RunPlan(int argc, char** argv);        // cmd_plan.cc
int RunLaunch(int argc, char** argv);      // cmd_launch.cc
int RunCommcheck(int argc, char** argv);   // cmd_commcheck.cc
int RunTrain(int argc, char** argv);       // cmd_train.cc
int RunReport(int argc, char** argv);      // cmd_report.cc
int RunPaths(int argc, char** argv);       // cmd_paths.cc
int RunHealth(int argc, char** argv);      // cmd_health.cc
int RunEval(int argc, char** argv);        // cmd_eval.cc
int RunJob(int argc, char** argv);         // cmd_job.cc (the Slurm job controller)
int RunAgent(int argc, char** argv);       // cmd_job.cc (the node agent)
int RunSim(int argc, char** argv);         // cmd_sim.cc (the controller's simulation)
int RunQuarantine(int argc, char** argv);  // cmd_quarantine.cc (list or clear kept-out hosts)
int RunPack(int argc, char** argv);        // sibling_exec.cc (runs ftrain-data pack)
int RunData(int argc, char** argv);        // sibling_exec.cc (runs ftrain-data data)
// sibling_exec.cc: exec `ftrain-torch SUBCOMMAND argv[1..]` with argv[0] = argv0.
int ExecTorchCommand(const char* argv0, const char* subcommand, int argc, char** argv);

}  // namespace ftrain::cli
