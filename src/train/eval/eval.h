// `ftrain eval`: mean token cross-entropy and perplexity of a model on packed data, on the
// training engine (train/eval/eval_loop.h): the FSDP forward with the run's sharding, on its device
// (train.device) and in its compute dtype, distributed over every rank of the job (one
// process, or `ftrain launch --nproc N`, or srun), each rank reading only its own shards of
// the weights. Weights: Hugging Face safetensors (one file, an index.json or a model
// directory) or a checkpoint (fp32 master weights; bf16 model weights when a checkpoint has
// no master) or a checkpoint root (its newest complete checkpoint).
#pragma once

#include <cstdint>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::train {

struct EvalOptions {
  // model, data.path (the rows), train.seed (their order), train.micro_batch (rows per
  // micro-batch), train.device, train.param_dtype (the compute dtype), train.threads,
  // train.prefetch, dist.sharding, dist.backend and its timeouts.
  TrainConfig config;
  std::string weights;   // *.safetensors, *.index.json, an HF model dir, a checkpoint (root)
  int64_t batches = 16;  // micro-batches to average over, all ranks together (> 0)
  Env* env = nullptr;    // the files (the main's Env); required
};

struct EvalResult {
  float loss = 0;         // mean over batches of each batch's mean token loss (float32)
  double perplexity = 0;  // exp(loss)
  int64_t batches = 0;
  int64_t tokens = 0;   // predicted tokens: batches x micro_batch x seq_len
  std::string weights;  // what was loaded: the file, or the checkpoint directory resolved
  std::string source;   // "safetensors", "checkpoint master (fp32)", "checkpoint model (bf16)"
  int64_t step = -1;    // the checkpoint's step (-1 for safetensors)
  int rank = 0;         // this process's rank (rank 0 prints)
  int ranks = 1;        // ranks that evaluated
  std::string device;   // "cpu" or the CUDA device description
  std::string dtype;    // compute dtype: "float32" or "bfloat16"
  double seconds = 0;   // the evaluation alone (not the load)
};

// Collective: every rank of the job calls it. Errors: a weights path that is not there, a
// tensor set or shape that does not fit the model, a data path that is not there, or
// sequences longer than model.max_seq_len are InvalidArgument (exit 2) on every rank;
// damaged files keep their Corruption/IOError kinds.
StatusOr<EvalResult> RunEval(const EvalOptions& options);

}  // namespace ftrain::train
