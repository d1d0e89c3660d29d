// Synthetic training state for checkpoint tests: a few Llama-named tensors in bf16 (model),
// fp32 (master) and fp32 AdamW moments, sliced across W ranks the FSDP way (flat, ceil-sized
// pieces), plus replicated and per-rank state blobs. Values are a pure function of
// (step, tensor, global index), so any world size reconstructs the same global tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "ckpt/store.h"

namespace ftrain::testing {

struct FixtureTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

std::vector<FixtureTensor> FixtureTensors(int64_t scale = 1);

// Global value of element i of tensor t for `kind` at `step` (fp32).
float FixtureValue(int64_t step, size_t tensor, const std::string& kind, int64_t i);

class RankState {
 public:
  RankState(int64_t step, int rank, int world, int64_t scale = 1);
  const ckpt::ShardContents& contents() const { return contents_; }

 private:
  std::vector<std::vector<uint8_t>> buffers_;
  ckpt::ShardContents contents_;
};

ckpt::CheckpointMeta FixtureMeta(int64_t step, int world);

// Writes all ranks' shards and commits; returns the first error.
Status SaveFixture(ckpt::CheckpointStore* store, int64_t step, int world,
                   const ckpt::WriteOptions& options = {}, int64_t scale = 1);

}  // namespace ftrain::testing
