// The node-local half of the hang guard's exchange (train/hang_watch.h): the ranks of one node
// share their progress through small files in a node-local directory (tmpfs, /dev/shm by
// default) keyed by run, generation and node, so that only one rank per node touches the
// shared run directory. Also the node's verdict, written by the node's judge and read by every
// rank of the node. Files only, nothing crosses hosts here. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "train/verdicts/hang_verdict.h"

namespace ftrain::train {

class NodeLocalProgress {
 public:
  // <root>/ftrain-hang-<16 hex digits of run_dir, generation and node>.
  static std::string DirFor(const std::string& root, const std::string& run_dir,
                            const std::string& generation, int node);

  NodeLocalProgress(std::string dir, int rank, std::string generation, Env* env);
  const std::string& dir() const { return dir_; }
  // Creates the directory (0700; one that exists is fine).
  Status Open();
  // This rank's entry: <dir>/rank-<R>.json.
  Status Write(const RankProgress& p);
  // Every rank's entry of this generation (a torn or foreign file is left out).
  std::vector<RankProgress> ReadAll() const;
  // The node's verdict: <dir>/verdict.json (the hung ranks and the recorder).
  Status WriteVerdict(const HangVerdict& v);
  bool ReadVerdict(HangVerdict* v) const;
  // Removes this rank's entry and, when no rank's entry is left, the verdict and the directory
  // (errors ignored: a file left in tmpfs is harmless and keyed by a generation no later start
  // uses). Call it only after this rank has read the verdict, if there is one.
  void Remove();

 private:
  std::string dir_;
  int rank_;
  std::string generation_;
  Env* env_;
};

}  // namespace ftrain::train
