// Deep verification of a checkpoint (what `ckptctl verify` runs): the manifest parses and
// matches the directory, every shard file has its recorded size and whole-file XXH3, carries
// the right magic/version/step/rank, and every dataset re-reads (decompressing every chunk)
// to the XXH3 recorded both in the file and in the manifest. Collects every problem rather
// than stopping at the first.
#pragma once

#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::ckpt {

struct VerifyProblem {
  std::string file;
  std::string dataset;  // empty when the problem is with the file or directory as a whole
  std::string problem;
};

struct VerifyReport {
  std::string dir;
  int64_t step = -1;
  int datasets_checked = 0;
  uint64_t raw_bytes = 0;     // uncompressed bytes re-hashed
  uint64_t stored_bytes = 0;  // bytes read from disk
  double seconds = 0;
  std::vector<VerifyProblem> problems;
  bool ok() const { return problems.empty(); }
};

VerifyReport VerifyCheckpoint(const std::string& dir, int threads, Env* env);

}  // namespace ftrain::ckpt
