// `ftrain eval`: mean token cross-entropy and perplexity of a model on packed data. Loads the
// weights from Hugging Face safetensors (one file or an index.json) or from a checkpoint
// (fp32 master weights; bf16 model weights when a checkpoint has no master) or a Hugging Face
// model directory, reads a fixed number of micro-batches in the data's deterministic order
// (dp rank 0 of 1) and averages. Single process, float32 (or bfloat16) compute, no FSDP
// engine and no communication.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/llama_config.h"

namespace ftrain::train {

struct EvalOptions {
  LlamaConfig model;
  std::string weights;      // *.safetensors, *.index.json, an HF model dir, a checkpoint (root)
  std::string data;         // packed dataset directory or http(s):// URL
  int64_t batches = 16;     // micro-batches to average over (> 0)
  int64_t micro_batch = 4;  // rows per micro-batch
  uint64_t seed = 1234;     // data order (the training seed gives the training order)
  int threads = 1;          // intra-op threads (fixed: results are bit-reproducible)
  bool bf16 = false;        // parameters and activations in bfloat16 (the loss in float32)
};

struct EvalResult {
  float loss = 0;         // mean over batches of each batch's mean token loss (float32)
  double perplexity = 0;  // exp(loss)
  int64_t batches = 0;
  int64_t tokens = 0;   // predicted tokens: batches x micro_batch x seq_len
  std::string weights;  // what was loaded: the file, or the checkpoint directory resolved
  std::string source;   // "safetensors", "checkpoint master (fp32)", "checkpoint model (bf16)"
  int64_t step = -1;    // the checkpoint's step (-1 for safetensors)
};

// Errors: a weights path that is not there, a tensor set or shape that does not fit the model,
// a data path that is not there, or sequences longer than model.max_seq_len are
// InvalidArgument (exit 2); damaged files keep their Corruption/IOError kinds.
StatusOr<EvalResult> RunEval(const EvalOptions& options);

}  // namespace ftrain::train
