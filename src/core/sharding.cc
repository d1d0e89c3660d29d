// ShardingName / ParseSharding.
#include "core/sharding.h"

namespace ftrain {
namespace {

// Every strategy, in the order the error message lists them.
constexpr Sharding kAll[] = {Sharding::kFullShard, Sharding::kShardGradOp, Sharding::kNoShard,
                             Sharding::kHybridShard};

}  // namespace

const char* ShardingName(Sharding s) {
  switch (s) {
    case Sharding::kShardGradOp:
      return "shard_grad_op";
    case Sharding::kNoShard:
      return "no_shard";
    case Sharding::kHybridShard:
      return "hybrid_shard";
    case Sharding::kFullShard:
      break;
  }
  return "full_shard";
}

StatusOr<Sharding> ParseSharding(const std::string& name) {
  std::string list;
  for (Sharding s : kAll) {
    if (name == ShardingName(s)) return s;
    list += (list.empty() ? "" : ", ") + std::string(ShardingName(s));
  }
  return Status::InvalidArgument("dist.sharding = '" + name + "' is not one of " + list);
}

}  // namespace ftrain
