// Where a start of the trainer resumes from, and whether it may: train.resume = auto takes the
// newest complete checkpoint that loads and verifies on every rank (a damaged one is moved
// aside as step-N.corrupt and the next older one tried), none starts fresh, a path resumes
// exactly that checkpoint. Each rank's bytes come from this node's ckptd memory, a peer's, or
// disk, every piece checked against the manifest. What to save and where is sink.h and
// train_state.h; when to save is the loop's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "fsdp/engine.h"
#include "records/launch_context.h"
#include "train/checkpoint/sink.h"
#include "train/checkpoint/train_state.h"
#include "train/config/train_config.h"

namespace ftrain::comm {
class DistContext;
}

namespace ftrain::train {

// Chooses and loads the checkpoint to resume from (collective). With train.resume = auto a
// checkpoint that fails verification on any rank (its bytes were read and are wrong) is moved
// aside as step-N.corrupt by rank 0 (logged, recorded in restarts.jsonl) and the next older
// complete one is tried, down to starting fresh; training is deterministic, so the run still
// ends bit-identical. Storage that does not answer (an I/O error, a file not found, on any
// rank or while choosing) is an outage, never damage: nothing is moved aside and the same
// choice is retried (train/verdicts/resume_verdict.h) for ckpt.resume_retry_s, then the result
// is StorageUnavailable (ftrain train exits 74).
// `hardware` is this run's fingerprint (a checkpoint written elsewhere resumes with a
// warning). Returns the resumed step (`*dir` its directory), or -1 for a fresh start.
// The memory tier first (train.resume = auto): when ROOT/MEMORY_TIER.json records a step newer
// than the newest disk checkpoint and every rank gets its snapshot of it from its daemon or a
// peer's, matching the recorded digest, the ranks write it out as that step's checkpoint
// (this start's `generation`) and resume it like any other; else the disk, as before.
StatusOr<int64_t> Resume(const TrainConfig& cfg, comm::DistContext& ctx, CheckpointSink& sink,
                         const std::string& data_version, const nlohmann::json& hardware,
                         fsdp::FsdpEngine& engine, RunState* state, std::string* dir,
                         const records::LaunchContext& launch, const std::string& generation = "");

}  // namespace ftrain::train
