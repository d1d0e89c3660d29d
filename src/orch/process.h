// orch/process.h - child processes for the job controller and the node agent: a command run
// to its end with a deadline (its output captured; TERM, then KILL, when it overstays), and
// background children (srun steps, ckptd) started with a clean signal state. POSIX only; no
// shell in between, so no word splitting and no quoting bugs.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::orch {

struct RunOptions {
  double timeout_s = 30;  // then SIGTERM; SIGKILL kill_after_s later
  double kill_after_s = 1;
  std::string cwd;  // "" : the caller's
  // The child's whole environment ("NAME=VALUE"), as `env -i` would give it; unset: the
  // caller's, plus `add_env`.
  std::optional<std::vector<std::string>> env;
  std::vector<std::string> add_env;
  bool capture = true;  // stdout/stderr into the result (else inherited)
};

// RunOptions with only a timeout (and the 1 s kill grace).
inline RunOptions Bounded(double timeout_s) {
  RunOptions o;
  o.timeout_s = timeout_s;
  return o;
}

struct RunResult {
  int exit_code = -1;  // 128+N for a signal N
  bool timed_out = false;
  bool started = true;  // false: it could not be executed (errno in `out`)
  std::string out, err;
  bool ok() const { return started && !timed_out && exit_code == 0; }
  // "exit 1: <first line of stderr>" / "timed out after 10 s" / "could not run: ..." (logs).
  std::string Describe(double timeout_s) const;
};

RunResult RunCommand(const std::vector<std::string>& argv, const RunOptions& opt = {});

struct SpawnOptions {
  std::string cwd;
  std::optional<std::vector<std::string>> env;
  std::vector<std::string> add_env;
  std::string stdout_path;  // "" : inherited; else appended to (O_APPEND)
  bool new_process_group = false;
};
// Starts argv in the background (signal mask and dispositions reset to defaults).
StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& opt = {});

// A child's status if it ended (reaped), nothing while it runs. Exit code as in RunResult.
std::optional<int> TryReap(pid_t pid);
// Waits up to timeout_s for the child (polling); its code, or nothing if it still runs.
std::optional<int> WaitFor(pid_t pid, double timeout_s);
bool Alive(pid_t pid);  // kill(pid, 0)

// The calling process's environment as "NAME=VALUE" strings.
std::vector<std::string> CurrentEnvironment();

}  // namespace ftrain::orch
