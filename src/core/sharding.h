// dist.sharding as a type: the strategy the FSDP engine runs (fsdp/engine.h has what each one
// does), read once by TrainConfig and used by the engine and the memory planner alike, so the
// spelling of each strategy and its error message are defined in one place. No LibTorch.
#pragma once

#include <string>

#include "core/status.h"

namespace ftrain {

enum class Sharding { kFullShard, kShardGradOp, kNoShard, kHybridShard };
// The config's spelling, also what logs, messages and checkpoint layouts print:
// "full_shard", "shard_grad_op", "no_shard", "hybrid_shard".
const char* ShardingName(Sharding s);
// The inverse of ShardingName; InvalidArgument "dist.sharding = 'NAME' is not one of ..."
// (every spelling, in the enum's order) for any other name.
StatusOr<Sharding> ParseSharding(const std::string& name);

}  // namespace ftrain
