// LlamaConfig: reading and validating the [model] section (model.hf: hf_config.cc), and
// parameter counting. Counting follows the HF models: per layer q_proj, k_proj, v_proj,
// o_proj, gate_proj, up_proj, down_proj (each with its bias where the config has one),
// input_layernorm, post_attention_layernorm.
#include "formats/llama_config.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "formats/hf_config.h"

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
  if (c.head_dim < 0 || c.head_dim > kMaxDim) {
    return Status::InvalidArgument(where("model.head_dim") + "head_dim = " + ValueText(c.head_dim) +
                                   " must be positive (or absent: hidden_size / num_heads)");
  }
  if (c.head_dim == 0 && c.hidden_size % c.num_heads != 0) {
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
  if (c.sliding_window < 0 || (!c.sliding_layers.empty() &&
                               static_cast<int64_t>(c.sliding_layers.size()) != c.num_layers)) {
    return Status::InvalidArgument(where("model.hf") +
                                   "sliding_window must be >= 0 with one layer flag per layer");
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.type != RopeScaling::Type::kDefault && !(r.factor > 0)) {
    return Status::InvalidArgument(
        where("model.hf") + "rope scaling factor = " + ValueText(r.factor) + " must be positive");
  }
  if (r.type == RopeScaling::Type::kLlama3 &&
      (!(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0) ||
       r.original_max_position_embeddings <= 0)) {
    return Status::InvalidArgument(
        where("model.hf") +
        "llama3 rope scaling needs high_freq_factor > low_freq_factor > 0 and a positive "
        "original_max_position_embeddings");
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
  if (config.Has("model.hf")) return LlamaConfigFromHfSection(config);
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
  const int64_t q_dim = num_heads * HeadDim(), kv_dim = num_kv_heads * HeadDim();
  const int64_t attention = hidden_size * q_dim         // q_proj
                            + 2 * hidden_size * kv_dim  // k_proj, v_proj
                            + q_dim * hidden_size;      // o_proj
  const int64_t attention_biases = (qkv_bias ? q_dim + 2 * kv_dim : 0) + (o_bias ? hidden_size : 0);
  const int64_t mlp = 3 * hidden_size * intermediate_size;  // gate_proj, up_proj, down_proj
  const int64_t mlp_biases = mlp_bias ? 2 * intermediate_size + hidden_size : 0;
  const int64_t norms = 2 * hidden_size;  // input/post_attention_layernorm
  return attention + attention_biases + mlp + mlp_biases + norms;
}

int64_t LlamaConfig::SlidingWindow(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (sliding_layers.empty()) return sliding_window;
  return layer >= 0 && layer < static_cast<int64_t>(sliding_layers.size()) &&
                 sliding_layers[static_cast<size_t>(layer)]
             ? sliding_window
             : 0;
}

std::string LlamaConfig::Features() const {
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  if (head_dim > 0) add("head_dim " + ValueText(head_dim));
  if (qkv_bias) add(o_bias ? "q/k/v/o biases" : "q/k/v biases");
  if (mlp_bias) add("mlp biases");
  if (rope_scaling.type == RopeScaling::Type::kLinear) {
    add("rope linear x" + ValueText(rope_scaling.factor));
  } else if (rope_scaling.type == RopeScaling::Type::kLlama3) {
    add("rope llama3 x" + ValueText(rope_scaling.factor) + " low " +
        ValueText(rope_scaling.low_freq_factor) + " high " +
        ValueText(rope_scaling.high_freq_factor) + " original " +
        ValueText(rope_scaling.original_max_position_embeddings));
  }
  if (sliding_window > 0) {
    std::string layers;
    for (size_t i = 0; i < sliding_layers.size(); ++i) layers += sliding_layers[i] ? "1" : "0";
    add("window " + ValueText(sliding_window) + (layers.empty() ? "" : " layers " + layers));
  }
  return out;
}

std::string LlamaConfig::Canonical() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "arch=%s vocab=%lld hidden=%lld inter=%lld layers=%lld heads=%lld kv=%lld "
                "head_dim=%lld seq=%lld tie=%d theta=%.17g eps=%.17g bias=%d%d%d rope=%s "
                "factor=%.17g low=%.17g high=%.17g orig=%lld window=%lld",
                architecture.c_str(), (long long)vocab_size, (long long)hidden_size,
                (long long)intermediate_size, (long long)num_layers, (long long)num_heads,
                (long long)num_kv_heads, (long long)HeadDim(), (long long)max_seq_len,
                int(tie_embeddings), rope_theta, rms_norm_eps, int(qkv_bias), int(o_bias),
                int(mlp_bias), RopeTypeName(rope_scaling.type), rope_scaling.factor,
                rope_scaling.low_freq_factor, rope_scaling.high_freq_factor,
                (long long)rope_scaling.original_max_position_embeddings,
                (long long)sliding_window);
  std::string out = buf;
  if (!sliding_layers.empty()) {
    out += " sliding=";
    for (bool s : sliding_layers) out += s ? '1' : '0';
  }
  return out;
}

const char* RopeTypeName(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kLlama3:
      return "llama3";
    case RopeScaling::Type::kDefault:
      break;
  }
  return "default";
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

int64_t LlamaConfig::RootUnitParameters() const {
  return EmbeddingParameters() + hidden_size + HeadParameters();
}

int64_t LossChunkTokens(int64_t vocab) {
  const int64_t budget = int64_t{256} << 20;  // bytes of float32 logits per chunk
  const int64_t tokens = budget / (4 * std::max<int64_t>(vocab, 1));
  return std::max<int64_t>(128, tokens / 128 * 128);
}

}  // namespace ftrain
