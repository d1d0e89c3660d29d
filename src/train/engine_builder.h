// The FSDP engine over a fresh model for a run's config: the one place that turns a
// TrainConfig into fsdp::FsdpConfig and its groups, for `ftrain train` and `ftrain eval` alike,
// so that both run the same strategy, compute dtype, prefetch and device. The model's own
// tensors are allocated but never written or read (the engine makes every rank's shards
// itself), so no rank holds the whole fp32 model. LibTorch-free header.
#pragma once

#include <memory>

#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::comm {
class DistContext;
}
namespace ftrain::fsdp {
class FsdpEngine;
}

namespace ftrain::train {

struct DeviceChoice;  // train/device/device.h

// What the engine is for; what it changes is all there is between the two.
enum class EngineUse {
  // Training: train.reduce_dtype, train.activation_checkpointing / ac_every, dist.reduce; the
  // master shards start from train.seed (train.init = random) or are left for LoadState (base
  // weights or a checkpoint); the gradient reduce-scatters get communicators of their own
  // (comm::DistContext::world_reduce, their own stream with nccl).
  kTrain,
  // Forward only (held-out loss): nothing is reduced or recomputed, so the reduce dtype is the
  // compute dtype, no activation checkpointing, no exact-reduce buffers, no reduce
  // communicators; the master shards are always left for LoadState.
  kEval,
};

StatusOr<std::unique_ptr<fsdp::FsdpEngine>> BuildEngine(const TrainConfig& cfg,
                                                        comm::DistContext& ctx,
                                                        const DeviceChoice& dev, EngineUse use);

}  // namespace ftrain::train
