// Helpers shared by every test binary: a temp directory that removes itself, a substring
// check, running a shell command with a deadline (combined output and exit status), a free TCP
// port, a directory cache shared across test processes, and the paths of the built binaries.
// No LibTorch, no gtest: fuzzers link it too.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ftrain::testing {

// A fresh directory $TMPDIR/<prefix>.XXXXXX (TMPDIR unset: /tmp), removed recursively by the
// destructor. A failed mkdtemp throws std::runtime_error naming the template and errno (gtest
// reports it as a failure of the test that made it). Removal does not use std::filesystem:
// binaries linking LibTorch 2.11 crash when a call binds to its exported copy of it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ftrain-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // Leaves the directory in place (prints its path), for a failure worth looking at.
  void Keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Whether `needle` occurs in `haystack` (any mix of std::string, literals and views).
bool Contains(std::string_view haystack, std::string_view needle);

struct CommandResult {
  int exit_code = -1;      // exit code, or 128+signal
  bool timed_out = false;  // killed because it passed the deadline
  double seconds = 0;
  std::string output;  // stdout and stderr interleaved
};

// Runs `/bin/sh -c command` in its own process group; on timeout kills the whole group.
CommandResult RunCommand(const std::string& command, int timeout_s);

// Sends `sig` to `pid` (a child of this process), waits for it and returns its wait status.
int SignalAndReap(int pid, int sig);

// A TCP port that was free a moment ago on 127.0.0.1.
int FreePort();

// The whole file (binary-safe); empty when it cannot be read.
std::string ReadFile(const std::string& path);

// step -> the loss text exactly as written (%.9g), from RUN/metrics.jsonl: comparing these
// compares the bits a run computed.
std::map<int, std::string> Losses(const std::string& run_dir);

// RUN/checkpoints/step-<8 digits>.
std::string StepDir(const std::string& run_dir, int step);

// The bit-exact acceptance of a resume, as gtest expectations: `ckptctl diff` finds the two
// checkpoints equal (exit 0; either may be an s3:// URL) and the two runs' per-step losses in
// metrics.jsonl are equal (and `steps` many, when given).
void ExpectSameBits(const std::string& ckpt_a, const std::string& ckpt_b, const std::string& run_a,
                    const std::string& run_b, int steps = -1);

// `ftrain pack` of /usr/share/common-licenses into `out`: a SentencePiece tokenizer of 512
// tokens trained on it, 32-token rows, `extra` flags after those (e.g. "--shard-rows 256").
// The real-text corpus the training and eval tests share.
CommandResult PackLicenses(const std::string& out, const std::string& extra);

// A directory that only the bytes of `inputs` determine, made once and shared by every test
// process on this machine: $TMPDIR/ftrain-test-cache/NAME-<hash of inputs>. For an oracle's
// output that costs seconds to make (python importing torch and transformers): ctest runs
// every test in a process of its own, so a suite-level fixture alone is made again per test.
// When it is not there yet, `make(dir)` fills a fresh private directory that is then renamed
// into place (a concurrent maker's rename wins; the loser removes its copy and uses it), so a
// reader never sees a half-made one. `inputs` must hold everything the output depends on (the
// script's text, its arguments and input files, the library paths). Returns the directory,
// or "" when `make` returned false (its directory is removed).
std::string CachedDir(const std::string& name, const std::string& inputs,
                      const std::function<bool(const std::string& dir)>& make);

// The pids of the processes whose environment holds FTRAIN_TEST_TAG=tag and RANK=rank (the
// trainer ranks a test started with that tag, to kill or stop them).
std::vector<int> RankPids(const std::string& tag, int rank);

// build/bin, from the FTRAIN_BIN_DIR compile definition.
std::string BinDir();
std::string Ftrain();

}  // namespace ftrain::testing
