// Synthetic checkpoint state for tests.
#include "ckpt_fixture.h"

#include <cmath>
#include <cstring>

#include "ckpt/tools.h"
#include "comm/collectives.h"

namespace ftrain::testing {

std::vector<FixtureTensor> FixtureTensors(int64_t scale) {
  return {{"model.embed_tokens.weight", {97 * scale, 16}},
          {"model.layers.0.self_attn.q_proj.weight", {16, 16}},
          {"model.layers.0.mlp.up_proj.weight", {43, 16 * scale}},
          {"model.norm.weight", {16}},
          {"lm_head.weight", {97, 16}}};
}

float FixtureValue(int64_t step, size_t tensor, const std::string& kind, int64_t i) {
  const double k = kind == "master" ? 1.0 : kind == "optim/exp_avg" ? 0.01 : 1e-4;
  return static_cast<float>(k * std::sin(0.001 * static_cast<double>(i) + 0.37 * tensor +
                                         0.05 * static_cast<double>(step)));
}

RankState::RankState(int64_t step, int rank, int world, int64_t scale) {
  const auto tensors = FixtureTensors(scale);
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto span = comm::ShardOf(tensors[t].numel(), world, rank);
    for (const std::string kind : {"model", "master", "optim/exp_avg", "optim/exp_avg_sq"}) {
      const bool bf16 = kind == "model";
      std::vector<uint8_t> buf(static_cast<size_t>(span.length) * (bf16 ? 2 : 4));
      for (int64_t j = 0; j < span.length; ++j) {
        const float v = FixtureValue(step, t, kind == "model" ? "master" : kind, span.offset + j);
        if (bf16) {
          const uint16_t h = ckpt::Fp32ToBf16(v);
          std::memcpy(buf.data() + 2 * j, &h, 2);
        } else {
          std::memcpy(buf.data() + 4 * j, &v, 4);
        }
      }
      buffers_.push_back(std::move(buf));
      ckpt::TensorShardRef ref;
      ref.kind = kind;
      ref.name = tensors[t].name;
      ref.dtype = bf16 ? ckpt::DType::kBFloat16 : ckpt::DType::kFloat32;
      ref.shape = tensors[t].shape;
      ref.offset = span.offset;
      ref.length = span.length;
      ref.data = buffers_.back().data();
      contents_.tensors.push_back(ref);
    }
  }
  contents_.blobs.push_back(
      {"scheduler", "state", "replicated", "{\"step\":" + std::to_string(step) + ",\"lr\":0.001}"});
  contents_.blobs.push_back(
      {"train", "state", "replicated", "{\"global_step\":" + std::to_string(step) + "}"});
  contents_.blobs.push_back(
      {"rng", "torch_cpu", "per_rank",
       "rng-of-rank-" + std::to_string(rank) + "-step-" + std::to_string(step)});
  contents_.blobs.push_back({"data", "cursor", "per_rank",
                             "cursor-" + std::to_string(rank) + "/" + std::to_string(world)});
}

ckpt::CheckpointMeta FixtureMeta(int64_t step, int world) {
  ckpt::CheckpointMeta m;
  m.step = step;
  m.world_size = world;
  m.config_hash = "cfg-123";
  m.code_version = "test";
  m.data_version = "data-abc";
  m.layout_json = "{\"sharding\":\"full_shard\",\"world_size\":" + std::to_string(world) + "}";
  return m;
}

Status SaveFixture(ckpt::CheckpointStore* store, int64_t step, int world,
                   const ckpt::WriteOptions& options, int64_t scale) {
  const auto meta = FixtureMeta(step, world);
  for (int r = 0; r < world; ++r) {
    RankState state(step, r, world, scale);
    auto receipt = store->WriteShard(meta, r, state.contents(), options);
    if (!receipt.ok()) return receipt.status();
  }
  auto outcome = store->TryCommit(meta);
  if (!outcome.ok()) return outcome.status();
  if (*outcome != ckpt::CommitOutcome::kCommitted) {
    return Status::Internal("commit outcome " + std::to_string(static_cast<int>(*outcome)));
  }
  return Status::Ok();
}

}  // namespace ftrain::testing
