// Held-out loss on the training engine: the FSDP forward of fsdp::FsdpEngine::Forward (no
// gradients; the engine's compute dtype and device), every rank evaluating its share of N
// micro-batches, reduced to one mean. Used by the trainer's [eval] section (every
// eval.every_steps) and by `ftrain eval` (train/eval/eval.h). LibTorch-free header.
//
// Which rows: the held-out data read from its start in the order of `seed`, as a run of
// dp_size ranks reads it: micro-batch i of the single-rank order is read by rank i % R in
// round i / R (data/rank_stream: rank r's k-th batch is global micro-batch k * R + r). Ranks
// run ceil(N / R) forwards (the collectives need the same count); a rank whose index is >= N
// in the last round evaluates a batch and drops it. The per-batch float32 losses are gathered
// in batch order and averaged in float64 in that order, so R ranks give the bits of one rank
// whenever a batch's forward does (the same gathered parameters on the same kernels).
#pragma once

#include <cstdint>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "train/config/train_config.h"
#include "train/telemetry/metrics.h"

namespace ftrain::comm {
class DistContext;
}
namespace ftrain::fsdp {
class FsdpEngine;
}

namespace ftrain::train {

struct HeldOutOptions {
  std::string source;              // packed directory or http(s):// URL
  Env* env = nullptr;              // reads a directory source (the main's Env); required
  uint64_t seed = 0;               // the order (train.seed: the order a training run would read)
  int64_t batches = 16;            // micro-batches over all ranks (> 0)
  int64_t micro_batch = 4;         // rows per micro-batch
  int64_t max_seq_len = 0;         // the model's; longer sequences are refused
  std::string what = "eval.path";  // how errors name the source
  // Non-zero: the tokenizer hash (data/format/index.h) the held-out data must have been packed
  // with, the training data's ([eval]); another tokenizer is InvalidArgument.
  uint64_t tokenizer_xxh3 = 0;
};

struct HeldOutResult {
  float loss = 0;       // mean over batches of each batch's mean token loss
  int64_t batches = 0;  // N
  int64_t tokens = 0;   // predicted tokens: N x micro_batch x seq_len
  int64_t seq_len = 0;
  double seconds = 0;    // wall time of the whole evaluation on this rank
  int64_t forwards = 0;  // forwards this rank ran (ceil(N / R))
};

// Collective over the engine's groups and ctx's control group: every rank calls it with the
// same options. A source that cannot be opened on any rank, or sequences longer than
// max_seq_len, are InvalidArgument on every rank (exit 2) before any forward; a token id out
// of the vocabulary is InvalidArgument too. The training state is not touched: the engine's
// shards, the global RNG, the training reader (this opens its own).
StatusOr<HeldOutResult> HeldOutLoss(fsdp::FsdpEngine& engine, comm::DistContext& ctx,
                                    const HeldOutOptions& options);

// At start-up: with [eval] on, the held-out data opens on every rank, fits the model and was
// packed with the training data's tokenizer, so that a wrong eval.path is exit 2 before the
// first step, not at the first evaluation (or never: other token ids evaluate silently).
// Collective (a no-op when eval.every_steps is 0).
Status CheckEvalData(const TrainConfig& cfg, comm::DistContext& ctx, Env* env);

// The trainer's [eval] at the boundary of `step` (steps completed): with eval.every_steps > 0,
// after every every_steps-th step and after the last (train.steps), but never at a stop
// (USR1/TERM: the grace time is the checkpoint's; the resumed run does not repeat the
// step). Sets m->eval_loss and m->eval_s; rank 0 logs the loss. Collective; a no-op (no
// collective) when it is not due, decided from values every rank shares.
Status EvalAtBoundary(const TrainConfig& cfg, fsdp::FsdpEngine& engine, comm::DistContext& ctx,
                      int64_t step, bool stop, Env* env, records::StepMetrics* m);

}  // namespace ftrain::train
