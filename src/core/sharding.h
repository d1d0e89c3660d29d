// dist.sharding as a type: the strategy the FSDP engine runs (fsdp/engine.h has what each one
// does), shared by the config, the memory planner and the engine. No LibTorch.
#pragma once

#include <string>

#include "core/status.h"

namespace ftrain {

enum class Sharding { kFullShard, kShardGradOp, kNoShard, kHybridShard };
StatusOr<Sharding> ParseSharding(const std::string& name);

}  // namespace ftrain
