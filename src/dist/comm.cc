// Backend-independent parts of Comm: shard arithmetic and names.
#include "dist/comm.h"

#include <algorithm>

namespace ftrain::dist {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

int64_t ShardChunk(int64_t numel, int world) {
  return world <= 0 ? numel : (numel + world - 1) / world;
}

ShardSpan ShardOf(int64_t numel, int world, int rank) {
  int64_t chunk = ShardChunk(numel, world);
  ShardSpan s;
  s.offset = std::min(numel, chunk * rank);
  s.length = std::min(numel, s.offset + chunk) - s.offset;
  return s;
}

}  // namespace ftrain::dist
