// The trainer's side of checkpoints: turns the FSDP engine's shards and the run's state
// (optimizer step, schedule, data cursor, RNG, train counters) into a checkpoint through the
// ckpt library, and back, with resharding when the world size changed. Synchronous path
// (the write happens on the training thread; ckptd moves it off later).
#pragma once

#include <string>

#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "fsdp/engine.h"

namespace ftrain::train {

struct RunState {
  int64_t step = 0;      // optimizer steps completed
  int64_t tokens = 0;    // global tokens consumed
  int64_t restarts = 0;  // how many times the run resumed from a checkpoint
  std::string data_cursor;
  // metrics.jsonl line of the step this checkpoint ends (rank 0), so that a crash between
  // the commit and the metrics append cannot leave a hole in metrics.jsonl.
  std::string metrics_line;
};

struct SaveRequest {
  ckpt::CheckpointMeta meta;
  int rank = 0;
  ckpt::WriteOptions write;
};

// Writes this rank's shard (every rank calls it); the caller commits after a barrier.
StatusOr<ckpt::Receipt> SaveShard(ckpt::CheckpointStore& store, const SaveRequest& req,
                                  const fsdp::FsdpEngine& engine, const RunState& state,
                                  const std::string& schedule_json);

// Loads engine and run state for `rank` of `world_size` (resharding tensors when the
// checkpoint's world size differs; the data cursor is remapped by the data reader; RNG
// streams are reseeded and logged when they cannot be carried over).
Status LoadCheckpoint(ckpt::CheckpointReader& reader, int rank, int world_size,
                      fsdp::FsdpEngine& engine, RunState* state);

}  // namespace ftrain::train
