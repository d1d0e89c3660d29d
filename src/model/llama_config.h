// LlamaConfig: the shape of a Llama-style decoder (RMSNorm, RoPE, SwiGLU, GQA), read from the
// [model] section of a run config and validated, plus exact parameter counts that match a
// Hugging Face LlamaForCausalLM with the same shapes. Pure arithmetic: no LibTorch here, so
// `ftrain plan` and the tests use it without building a model.
#pragma once

#include <cstdint>

#include "core/config.h"
#include "core/status.h"

namespace ftrain {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // SwiGLU width of gate/up/down
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // grouped-query attention; == num_heads for plain MHA
  int64_t max_seq_len = 0;
  bool tie_embeddings = false;  // lm_head shares the embedding matrix
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;

  // Reads model.vocab_size, model.hidden_size, model.intermediate_size, model.num_layers,
  // model.num_heads, model.num_kv_heads (default num_heads), model.max_seq_len,
  // model.tie_embeddings (default false), model.rope_theta (default 10000) and
  // model.rms_norm_eps (default 1e-5). Errors name the key and where its value came from.
  // Only model.* keys are read; keys of other sections are left alone.
  static StatusOr<LlamaConfig> FromConfig(const Config& config);

  // Checks the invariants FromConfig enforces (for configs built in code).
  Status Validate() const;

  int64_t HeadDim() const { return hidden_size / num_heads; }

  // Exact parameter counts (HF names in comments).
  int64_t EmbeddingParameters() const;  // model.embed_tokens
  int64_t LayerParameters() const;      // one model.layers.<i>: attention, MLP, two RMSNorms
  int64_t HeadParameters() const;       // lm_head; 0 when tied to the embedding
  // Embedding + all layers + final norm + lm_head (unless tied).
  int64_t NumParameters() const;
  // The largest unit an FSDP wrapper gathers at once: max(one layer, embedding, lm_head).
  int64_t LargestUnitParameters() const;
};

}  // namespace ftrain
