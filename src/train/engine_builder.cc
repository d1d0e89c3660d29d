// BuildEngine: TrainConfig -> fsdp::FsdpConfig and groups.
#include "train/engine_builder.h"

#include <torch/torch.h>

#include "comm/context.h"
#include "fsdp/engine.h"
#include "model/llama.h"
#include "train/device/device.h"

namespace ftrain::train {
namespace {

torch::ScalarType DtypeOf(Precision p) {
  return p == Precision::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
}

fsdp::FsdpConfig FsdpConfigFor(const TrainConfig& cfg, const DeviceChoice& dev, EngineUse use) {
  fsdp::FsdpConfig fc;
  fc.sharding = cfg.dist.sharding;
  fc.param_dtype = DtypeOf(cfg.train.param_dtype);
  fc.prefetch = cfg.train.prefetch;
  fc.device = dev.device;
  if (use == EngineUse::kEval) {
    fc.reduce_dtype = fc.param_dtype;
    fc.activation_checkpointing = false;
    fc.defer_init = true;
    return fc;
  }
  // A random init is computed unit by unit while sharding (fsdp::FsdpConfig::init_seed); base
  // weights (train.init) are read later, after the resume decided that they are needed, each
  // rank reading only its own shards (train/base_model.h).
  if (cfg.train.init == "random") {
    fc.init_seed = static_cast<uint64_t>(cfg.train.seed);
  } else {
    fc.defer_init = true;
  }
  fc.reduce_dtype = DtypeOf(cfg.train.reduce_dtype);
  fc.activation_checkpointing = cfg.train.activation_checkpointing;
  fc.ac_every = static_cast<int>(cfg.train.ac_every);
  fc.exact_reduce = cfg.dist.exact_reduce;
  if (fc.exact_reduce) fc.exact_micro_batches = cfg.dist.ExactMicroBatches(cfg.train);
  return fc;
}

}  // namespace

StatusOr<std::unique_ptr<fsdp::FsdpEngine>> BuildEngine(const TrainConfig& cfg,
                                                        comm::DistContext& ctx,
                                                        const DeviceChoice& dev, EngineUse use) {
  const fsdp::FsdpConfig fc = FsdpConfigFor(cfg, dev, use);
  // Names and shapes only: the engine fills each rank's shards itself and drops the model's
  // tensors, which are allocated but never touched, so none of their pages becomes resident
  // (deterministic mode, on a GPU run, would otherwise fill them with NaN first: 27 GB of
  // host memory per rank at 7B, single-threaded, at every start).
  fsdp::NoUninitializedFill no_fill;
  model::LlamaModel model(cfg.model);
  const bool train = use == EngineUse::kTrain;
  return fsdp::FsdpEngine::Create(
      model, fc,
      fsdp::GroupsFor(fc.sharding, ctx.world_comm(), ctx.intra_node(), ctx.inter_node(),
                      train ? &ctx.world_reduce() : nullptr,
                      train ? &ctx.intra_node_reduce() : nullptr));
}

}  // namespace ftrain::train
