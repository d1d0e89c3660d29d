// Helpers for tests that run real processes: run a shell command with a deadline and capture
// its combined output and exit status; find a free TCP port; paths of the built binaries.
#pragma once

#include <string>

namespace ftrain::testing {

struct CommandResult {
  int exit_code = -1;      // exit code, or 128+signal
  bool timed_out = false;  // killed because it passed the deadline
  double seconds = 0;
  std::string output;  // stdout and stderr interleaved
};

// Runs `/bin/sh -c command` in its own process group; on timeout kills the whole group.
CommandResult RunCommand(const std::string& command, int timeout_s);

// A TCP port that was free a moment ago on 127.0.0.1.
int FreePort();

// build/bin, from the FTRAIN_BIN_DIR compile definition.
std::string BinDir();
std::string Ftrain();

}  // namespace ftrain::testing
