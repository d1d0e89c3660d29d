// LlamaConfig: the shape of a Llama-style decoder (RMSNorm, RoPE, SwiGLU, GQA), read from the
// [model] section of a run config or from a Hugging Face config.json (model.hf, see
// hf_config.h) and validated, plus exact parameter counts that match the Hugging Face model
// with the same shapes. Pure arithmetic: no LibTorch here, so `ftrain plan` and the tests use
// it without building a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace ftrain {

// RoPE frequency scaling, as transformers' modeling_rope_utils computes it.
struct RopeScaling {
  enum class Type { kDefault, kLinear, kLlama3 };
  Type type = Type::kDefault;
  double factor = 1.0;                           // linear, llama3
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
};
const char* RopeTypeName(RopeScaling::Type t);  // "default", "linear", "llama3"

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
  // What Llama 3, Mistral and Qwen2 add (only a config.json sets these; see hf_config.h).
  int64_t head_dim = 0;   // 0: hidden_size / num_heads
  bool qkv_bias = false;  // q/k/v_proj.bias (Llama attention_bias, Qwen2)
  bool o_bias = false;    // o_proj.bias (Llama attention_bias)
  bool mlp_bias = false;  // gate/up/down_proj.bias (Llama mlp_bias)
  RopeScaling rope_scaling;
  // Sliding-window attention: query i sees keys j with i - sliding_window < j <= i. 0: none.
  int64_t sliding_window = 0;
  // Which layers use the window (Qwen2's layer_types); empty: every layer.
  std::vector<bool> sliding_layers;
  // Where the shapes came from when model.hf is set: the config.json path, its architecture
  // and its bytes (for `ckptctl export --format hf` and the checkpoint layout). Empty for a
  // [model] section.
  std::string hf_config_path;
  std::string architecture = "LlamaForCausalLM";
  std::string hf_config_text;

  // Reads model.vocab_size, model.hidden_size, model.intermediate_size, model.num_layers,
  // model.num_heads, model.num_kv_heads (default num_heads), model.max_seq_len,
  // model.tie_embeddings (default false), model.rope_theta (default 10000) and
  // model.rms_norm_eps (default 1e-5). Errors name the key and where its value came from.
  // With model.hf = DIR (or DIR/config.json) everything comes from that config.json instead
  // (hf_config.h), and a model.* key that contradicts it is an InvalidArgument naming the key
  // and the file; model.max_seq_len may lower max_position_embeddings.
  // Only model.* keys are read; keys of other sections are left alone.
  static StatusOr<LlamaConfig> FromConfig(const Config& config);

  // Checks the invariants FromConfig enforces (for configs built in code).
  Status Validate() const;

  int64_t HeadDim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  // The sliding window of layer i, 0 when it attends to every earlier position.
  int64_t SlidingWindow(int64_t layer) const;
  // One line naming what is not plain Llama-2 ("head_dim 128, rope llama3 x8, window 4096"),
  // for logs and the config hash; "" for a plain Llama.
  std::string Features() const;
  // Every field that changes the math, as "key=value" text (doubles exact): what a config hash
  // covers when the shapes come from a config.json rather than from config keys.
  std::string Canonical() const;

  // Exact parameter counts (HF names in comments).
  int64_t EmbeddingParameters() const;  // model.embed_tokens
  int64_t LayerParameters() const;  // one model.layers.<i>: attention, MLP, biases, two RMSNorms
  int64_t HeadParameters() const;   // lm_head; 0 when tied to the embedding
  // Embedding + all layers + final norm + lm_head (unless tied).
  int64_t NumParameters() const;
  // The largest unit an FSDP wrapper gathers at once: max(one layer, embedding, lm_head).
  int64_t LargestUnitParameters() const;
  // ftrain's root sharding unit: embeddings, final norm and (untied) lm_head.
  int64_t RootUnitParameters() const;
};

// Tokens per chunk of the head + loss (model::LinearCrossEntropy) for a vocabulary of `vocab`:
// about 256 MiB of float32 logits, a multiple of 128 tokens, at least 128 (4096 tokens for a
// 16K vocabulary, 2048 for 32K, 512 for 128K). A function of the vocabulary alone, so the
// same config gives the same chunks, hence bits; `ftrain plan` counts the same chunk.
int64_t LossChunkTokens(int64_t vocab);

}  // namespace ftrain
