// Recovery from the memory tier (memory_tier.h): when ROOT/MEMORY_TIER.json records a step
// newer than the newest disk checkpoint, every rank takes its snapshot of that step from its
// own ckptd (in-job restart) or a peer's memory (replacement node), checks it against the
// recorded digest, and only when every rank has its piece do they all write it out as that
// step's checkpoint (the disk format unchanged, this start's generation); the resume then
// loads it like any other, from memory where the bytes provably match. Any rank without its
// piece: nothing is written and the resume takes the disk tier. Collective.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "train/checkpoint/sink.h"
#include "train/config/train_config.h"

namespace ftrain::comm {
class DistContext;
}

namespace ftrain::train {

struct MemoryRestore {
  int64_t step = -1;        // the step now committed from memory; -1: none (use the disk)
  int64_t recorded = -1;    // the step MEMORY_TIER.json recorded (-1: none or not newer)
  std::string why_not;      // why a recorded step was not restored (rank 0's view)
  int ranks_from_peer = 0;  // ranks that fetched their snapshot from a peer's memory
  double seconds = 0;       // the whole attempt (slowest rank)
};

StatusOr<MemoryRestore> RestoreMemoryTier(const TrainConfig& cfg, comm::DistContext& ctx,
                                          CheckpointSink& sink, const std::string& generation,
                                          int64_t disk_step);

}  // namespace ftrain::train
