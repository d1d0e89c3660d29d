// The language-model head and its loss without the [T, V] float32 logits: mean token
// cross-entropy of (h @ W^T) against targets, computed over chunks of the tokens. Each chunk's
// logits live only while it is computed, and with gradients on, the chunk's gradients with
// respect to h and W are computed right there (d loss / d logits = softmax - one-hot, over N),
// so the backward only scales them: no logits are kept and none are recomputed. A 128K
// vocabulary at 8192 tokens drops from 8.4 GB of logits and log-probabilities to one chunk.
// Equal to CrossEntropyLoss(at::linear(h, W).to(float), targets) and its gradients within
// float32 rounding (the matrix products in the compute dtype, the softmax and the sums in
// float32, W's gradient accumulated over the chunks in float32); bit-deterministic.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "formats/llama_config.h"  // LossChunkTokens

namespace ftrain::model {

// h [N, H] (the final-normed hidden states, compute dtype), weight [V, H] (same dtype and
// device), targets [N] int64 in [0, V). Returns the mean loss, a float32 scalar; differentiable
// with respect to h and weight. `chunk_tokens` <= 0: LossChunkTokens(V).
torch::Tensor LinearCrossEntropy(const torch::Tensor& h, const torch::Tensor& weight,
                                 const torch::Tensor& targets, int64_t chunk_tokens = 0);

}  // namespace ftrain::model
