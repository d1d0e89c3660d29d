// The trainer's side of checkpoints: turns the FSDP engine's shards and the run's state
// (optimizer step, schedule, data cursor, RNG, train counters) into a rank's shard contents,
// and back from a checkpoint (or ckptd's in-memory snapshot), with resharding when the world
// size changed. Where the contents go is train/checkpoint/sink.h.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/reader.h"
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
  // Rank 0: the Hugging Face files (name -> bytes) every checkpoint carries for `ckptctl
  // export --format hf` (train/base_model.h); empty on the other ranks.
  std::map<std::string, std::string> hf_files;
  // [guard] (train/verdicts/guard.h): the spike window's norms (training state: they decide
  // later steps) and the steps skipped so far with why (run history: a run that skipped step
  // K on a NaN and one given data.skip=K hold the same training state).
  std::vector<double> guard_norms;
  // The spike rule's recent judged steps, [norm, over the limit] oldest first (they decide
  // whether a sustained new level is re-admitted); absent in a checkpoint from before it: empty.
  std::vector<std::pair<double, bool>> guard_recent;
  std::vector<std::pair<int64_t, std::string>> skipped;
};

// What this rank writes: tensor pieces point into the engine's live shards (valid until the
// next optimizer step; on a GPU they are device pointers, marked on_device, which the
// checkpointer's DeviceMemory copies out), blobs are copies.
ckpt::ShardContents BuildShardContents(const fsdp::FsdpEngine& engine, const RunState& state,
                                       const std::string& schedule_json);

// The same rank's snapshot of the checkpoint, still in ckptd's memory (restore from memory).
// A tensor piece is taken from it only when it is exactly the piece the engine asks for and
// its XXH3 equals the one the committed manifest records for this rank; anything else is
// read from disk.
struct MemorySource {
  const ckpt::proto::Submit* snapshot = nullptr;
  const uint8_t* base = nullptr;
  uint64_t bytes_from_memory = 0;  // filled in by LoadCheckpoint
  uint64_t bytes_from_disk = 0;
  int mismatched = 0;  // pieces whose hash disagreed with the manifest
};

// Loads engine and run state for `rank` of `world_size` (resharding tensors when the
// checkpoint's world size differs; the data cursor is remapped by the data reader; RNG
// streams are reseeded and logged when they cannot be carried over).
Status LoadCheckpoint(ckpt::CheckpointReader& reader, int rank, int world_size,
                      fsdp::FsdpEngine& engine, RunState* state, MemorySource* memory = nullptr);

}  // namespace ftrain::train
