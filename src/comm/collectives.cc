// Backend-independent parts of Comm: shard arithmetic.
#include "comm/collectives.h"

#include <algorithm>

namespace ftrain::comm {

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

}  // namespace ftrain::comm
