// ParseSharding.
#include "core/sharding.h"

namespace ftrain {

StatusOr<Sharding> ParseSharding(const std::string& name) {
  if (name == "full_shard") return Sharding::kFullShard;
  if (name == "shard_grad_op") return Sharding::kShardGradOp;
  if (name == "no_shard") return Sharding::kNoShard;
  if (name == "hybrid_shard") return Sharding::kHybridShard;
  return Status::InvalidArgument("dist.sharding = '" + name +
                                 "' is not one of full_shard, shard_grad_op, no_shard, "
                                 "hybrid_shard");
}

}  // namespace ftrain
