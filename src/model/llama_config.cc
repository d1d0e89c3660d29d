// LlamaConfig: reading and validating the [model] section, and parameter counting.
// Counting follows HF LlamaForCausalLM (no biases anywhere): per layer q_proj, k_proj, v_proj,
// o_proj, gate_proj, up_proj, down_proj, input_layernorm, post_attention_layernorm.
#include "model/llama_config.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

namespace ftrain {
namespace {

// Caps that keep every count far from int64 overflow; real models are orders of magnitude
// smaller, so a value above them is a typo (an extra digit, a wrong exponent).
constexpr int64_t kMaxDim = int64_t{1} << 24;  // vocab, hidden, intermediate, seq, heads
constexpr int64_t kMaxLayers = 100000;

// Where a key's value came from ("configs/tiny.cfg:7", "command line"), or "" for a default.
using OriginFn = std::function<std::string(const std::string& key)>;

// Wraps OriginFn for messages: "<origin>: " as a prefix, " (<origin>)" as an aside.
struct Where {
  OriginFn origin;
  std::string operator()(const std::string& key) const {
    std::string o = origin(key);
    return o.empty() ? o : o + ": ";
  }
  std::string Aside(const std::string& key) const {
    std::string o = origin(key);
    return o.empty() ? o : " (" + o + ")";
  }
};

std::string ValueText(int64_t v) { return std::to_string(v); }
std::string ValueText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status CheckPositive(const std::string& key, int64_t value, int64_t max, const Where& where) {
  if (value <= 0) {
    return Status::InvalidArgument(where(key) + key + " = " + ValueText(value) +
                                   " must be a positive integer; fix it in the [model] section");
  }
  if (value > max) {
    return Status::InvalidArgument(where(key) + key + " = " + ValueText(value) +
                                   " is larger than " + ValueText(max) +
                                   "; check for an extra digit");
  }
  return Status::Ok();
}

Status CheckShape(const LlamaConfig& c, const Where& where) {
  FT_RETURN_IF_ERROR(CheckPositive("model.vocab_size", c.vocab_size, kMaxDim, where));
  FT_RETURN_IF_ERROR(CheckPositive("model.hidden_size", c.hidden_size, kMaxDim, where));
  FT_RETURN_IF_ERROR(CheckPositive("model.intermediate_size", c.intermediate_size, kMaxDim, where));
  FT_RETURN_IF_ERROR(CheckPositive("model.num_layers", c.num_layers, kMaxLayers, where));
  FT_RETURN_IF_ERROR(CheckPositive("model.num_heads", c.num_heads, kMaxDim, where));
  FT_RETURN_IF_ERROR(CheckPositive("model.num_kv_heads", c.num_kv_heads, kMaxDim, where));
  FT_RETURN_IF_ERROR(CheckPositive("model.max_seq_len", c.max_seq_len, kMaxDim, where));
  if (c.hidden_size % c.num_heads != 0) {
    return Status::InvalidArgument(
        where("model.hidden_size") + "model.hidden_size = " + ValueText(c.hidden_size) +
        " is not divisible by model.num_heads = " + ValueText(c.num_heads) +
        where.Aside("model.num_heads") +
        "; pick num_heads so that every head gets hidden_size / num_heads dimensions");
  }
  if (c.HeadDim() % 2 != 0) {
    return Status::InvalidArgument(
        where("model.num_heads") +
        "model.hidden_size / model.num_heads = " + ValueText(c.HeadDim()) +
        " is odd; RoPE rotates pairs of dimensions, so the head dimension must be even");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return Status::InvalidArgument(
        where("model.num_kv_heads") + "model.num_kv_heads = " + ValueText(c.num_kv_heads) +
        " does not divide model.num_heads = " + ValueText(c.num_heads) +
        where.Aside("model.num_heads") +
        "; every key/value head must serve the same number of query heads");
  }
  if (!(c.rope_theta > 0)) {
    return Status::InvalidArgument(where("model.rope_theta") + "model.rope_theta = " +
                                   ValueText(c.rope_theta) + " must be positive");
  }
  if (!(c.rms_norm_eps > 0)) {
    return Status::InvalidArgument(where("model.rms_norm_eps") + "model.rms_norm_eps = " +
                                   ValueText(c.rms_norm_eps) + " must be positive");
  }
  return Status::Ok();
}

Status RequireInt(const Config& config, const std::string& key, int64_t* out) {
  if (!config.Has(key)) {
    // Still mark it consumed so that CheckAllConsumed does not add a second, confusing error.
    FT_RETURN_IF_ERROR(config.GetInt(key, out));
    const std::string name = key.substr(key.find('.') + 1);
    return Status::InvalidArgument("model config: required key '" + key + "' is not set; add '" +
                                   name + " = <integer>' under [model]");
  }
  return config.GetInt(key, out);
}

}  // namespace

StatusOr<LlamaConfig> LlamaConfig::FromConfig(const Config& config) {
  LlamaConfig c;
  FT_RETURN_IF_ERROR(RequireInt(config, "model.vocab_size", &c.vocab_size));
  FT_RETURN_IF_ERROR(RequireInt(config, "model.hidden_size", &c.hidden_size));
  FT_RETURN_IF_ERROR(RequireInt(config, "model.intermediate_size", &c.intermediate_size));
  FT_RETURN_IF_ERROR(RequireInt(config, "model.num_layers", &c.num_layers));
  FT_RETURN_IF_ERROR(RequireInt(config, "model.num_heads", &c.num_heads));
  c.num_kv_heads = c.num_heads;
  FT_RETURN_IF_ERROR(config.GetInt("model.num_kv_heads", &c.num_kv_heads));
  FT_RETURN_IF_ERROR(RequireInt(config, "model.max_seq_len", &c.max_seq_len));
  FT_RETURN_IF_ERROR(config.GetBool("model.tie_embeddings", &c.tie_embeddings));
  FT_RETURN_IF_ERROR(config.GetDouble("model.rope_theta", &c.rope_theta));
  FT_RETURN_IF_ERROR(config.GetDouble("model.rms_norm_eps", &c.rms_norm_eps));

  const auto& entries = config.entries();
  Where where{[&entries](const std::string& key) -> std::string {
    auto it = entries.find(key);
    if (it == entries.end()) return "";  // a default: the message names the key anyway
    return it->second.origin;
  }};
  FT_RETURN_IF_ERROR(CheckShape(c, where));
  return c;
}

Status LlamaConfig::Validate() const {
  return CheckShape(*this, Where{[](const std::string&) { return std::string(); }});
}

int64_t LlamaConfig::EmbeddingParameters() const { return vocab_size * hidden_size; }

int64_t LlamaConfig::LayerParameters() const {
  const int64_t kv_dim = num_kv_heads * HeadDim();
  const int64_t attention = hidden_size * hidden_size       // q_proj
                            + 2 * hidden_size * kv_dim      // k_proj, v_proj
                            + hidden_size * hidden_size;    // o_proj
  const int64_t mlp = 3 * hidden_size * intermediate_size;  // gate_proj, up_proj, down_proj
  const int64_t norms = 2 * hidden_size;                    // input/post_attention_layernorm
  return attention + mlp + norms;
}

int64_t LlamaConfig::HeadParameters() const {
  return tie_embeddings ? 0 : vocab_size * hidden_size;
}

int64_t LlamaConfig::NumParameters() const {
  return EmbeddingParameters() + num_layers * LayerParameters() + hidden_size  // model.norm
         + HeadParameters();
}

int64_t LlamaConfig::LargestUnitParameters() const {
  return std::max({LayerParameters(), EmbeddingParameters(), HeadParameters()});
}

}  // namespace ftrain
