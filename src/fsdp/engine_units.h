// The engine's per-unit state and its reductions in flight: shared by engine.cc and
// engine_exact.cc (dist.reduce = exact), private to the engine.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "fsdp/engine.h"
#include "fsdp/exact.h"

namespace ftrain::fsdp {

struct FsdpEngine::Unit {
  struct Param {
    std::string name;
    torch::Tensor param;  // the model's leaf parameter; its data is swapped in and out
    std::vector<int64_t> shape;
    int64_t offset = 0;
    int64_t numel = 0;
  };
  std::string name;
  int layer = -1;  // -1 for the root unit
  std::vector<Param> params;
  int64_t numel = 0;
  comm::ShardSpan span;
  torch::Tensor master, exp_avg, exp_avg_sq;  // fp32 [span.length]
  torch::Tensor param_shard;                  // param dtype [span.length]; aliases master in fp32
  // Reduce dtype [span.length]: this rank's shard of the gradient summed over the step's
  // micro-batches (and, after Step's reductions, over the replicas, divided by the world).
  torch::Tensor grad_shard;
  bool grad_fresh = true;  // grad_shard not yet written this step
  torch::Tensor full;      // gathered params, param dtype [numel]
  std::unique_ptr<comm::Work> gather_work;
  bool attached = false;
  // Saved between forward and backward of a micro-batch.
  torch::Tensor saved_input;   // act. checkpointing: the block input (no graph)
  torch::Tensor saved_output;  // no act. checkpointing: output with its graph
  // exact_reduce: this rank's shard of the step's gradient as int64 digits (fsdp/exact.h)
  // under per-block top bins of the whole unit (the same on every rank), and where the shard
  // lies among the blocks.
  torch::Tensor exact_top, exact_low, exact_bins;
  exact::ShardBlocks exact_shard;
};

// A gradient reduction in flight: the unit's flattened gradient (kept alive until the
// collective is done with it) reduce-scattered into `out` (the unit's shard itself on its
// first micro-batch of the step, else a buffer added to it once done).
struct FsdpEngine::Reduction {
  Unit* unit = nullptr;
  torch::Tensor flat;
  torch::Tensor out;
  std::unique_ptr<comm::Work> work;
  // exact_reduce: the digits' second reduce-scatter (`flat` and `out` hold the top digits),
  // the micro-batch's agreed bins, and whether the shard starts afresh with it.
  torch::Tensor flat_low, out_low, bins;
  std::unique_ptr<comm::Work> work_low;
  bool fresh = false;
};

}  // namespace ftrain::fsdp
