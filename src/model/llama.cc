// LlamaModel: the HF Llama/Mistral/Qwen2ForCausalLM equations in LibTorch, one decoder block per
// Layer() call; attention is at::scaled_dot_product_attention (causal, GQA without copying
// k/v). Parameters are read through the registered tensors on every call (an engine may have
// swapped their data); only config constants (RoPE cos/sin, the window mask) are cached.
// Input checks throw StatusError(InvalidArgument / FailedPrecondition) naming the problem.
#include "model/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/SDPBackend.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/strings.h"
#include "model/lean_ops.h"
#include "model/linear_cross_entropy.h"
#include "model/weights_io.h"

namespace ftrain::model {
namespace {

[[noreturn]] void Fail(Status s) { throw StatusError(std::move(s)); }

std::string ShapeText(at::IntArrayRef shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

torch::nn::Module& Child(torch::nn::Module& parent, const std::string& name) {
  for (const auto& item : parent.named_children()) {
    if (item.key() == name) return *item.value();
  }
  return *parent.register_module(name, std::make_shared<torch::nn::Module>());
}

// SplitMix64 of (seed, FNV-1a(name)): a per-parameter seed that does not depend on order.
uint64_t ParamSeed(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  uint64_t z = seed ^ h;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Parameters must be gathered (right shape) and match the activations' dtype and device.
void CheckParam(const torch::Tensor& p, const std::string& name, at::IntArrayRef shape,
                const torch::Tensor& h) {
  if (p.sizes() != shape) {
    Fail(Status::FailedPrecondition("parameter " + name + " has shape " + ShapeText(p.sizes()) +
                                    ", expected " + ShapeText(shape) +
                                    " (an engine must install the full parameter with "
                                    "set_data before calling the model)"));
  }
  if (p.scalar_type() != h.scalar_type() || p.device() != h.device()) {
    Fail(Status::FailedPrecondition(
        "parameter " + name + " is " + std::string(c10::toString(p.scalar_type())) + " on " +
        p.device().str() + " but the activations are " + c10::toString(h.scalar_type()) + " on " +
        h.device().str() + "; give parameters and activations one dtype and device"));
  }
}

void CheckHidden(const torch::Tensor& h, int64_t hidden, const char* what) {
  if (h.dim() != 3 || h.size(2) != hidden || !at::isFloatingType(h.scalar_type())) {
    Fail(Status::InvalidArgument(std::string(what) + ": hidden states must be a floating [B, T, " +
                                 std::to_string(hidden) + "] tensor, got " +
                                 c10::toString(h.scalar_type()) + " " + ShapeText(h.sizes())));
  }
}

}  // namespace

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& cfg, const torch::TensorOptions& options)
    : cfg_(cfg) {
  Status s = cfg.Validate();
  if (!s.ok()) Fail(s.Annotate("LlamaModel"));
  layers_.resize(static_cast<size_t>(cfg.num_layers));
  // Module tree model.{embed_tokens, layers.<i>.{self_attn, mlp, *_layernorm}, norm} and
  // lm_head, each leaf holding its "weight" (and "bias"), so that named_parameters() gives
  // HF names.
  static const std::map<std::string, torch::Tensor LayerParams::*> kSlots = {
      {"q_proj.weight", &LayerParams::q},
      {"k_proj.weight", &LayerParams::k},
      {"v_proj.weight", &LayerParams::v},
      {"o_proj.weight", &LayerParams::o},
      {"gate_proj.weight", &LayerParams::gate},
      {"up_proj.weight", &LayerParams::up},
      {"down_proj.weight", &LayerParams::down},
      {"input_layernorm.weight", &LayerParams::input_norm},
      {"post_attention_layernorm.weight", &LayerParams::post_norm},
      {"q_proj.bias", &LayerParams::q_bias},
      {"k_proj.bias", &LayerParams::k_bias},
      {"v_proj.bias", &LayerParams::v_bias},
      {"o_proj.bias", &LayerParams::o_bias},
      {"gate_proj.bias", &LayerParams::gate_bias},
      {"up_proj.bias", &LayerParams::up_bias},
      {"down_proj.bias", &LayerParams::down_bias}};
  for (const TensorSpec& spec : LlamaParamSpecs(cfg)) {
    // Split "a.b.c.weight" into holder path a.b.c; create the containers on the way.
    std::vector<std::string> parts;
    std::stringstream ss(spec.name);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    torch::nn::Module* parent = this;
    for (size_t i = 0; i + 1 < parts.size(); ++i) parent = &Child(*parent, parts[i]);
    torch::Tensor w = parent->register_parameter(parts.back(), torch::empty(spec.shape, options));
    const std::string& n = spec.name;
    if (n == "model.embed_tokens.weight") {
      embed_ = w;
    } else if (n == "model.norm.weight") {
      norm_ = w;
    } else if (n == "lm_head.weight") {
      lm_head_ = w;
    } else {
      LayerParams& l = layers_[static_cast<size_t>(std::stoll(parts[2]))];
      l.*kSlots.at(parts[parts.size() - 2] + "." + parts.back()) = w;
      l.names.push_back(n);
      l.shapes.push_back(spec.shape);
      l.tensors.push_back(w);
    }
  }
  if (cfg.tie_embeddings) lm_head_ = embed_;
}

std::vector<std::string> LlamaModelImpl::RootParamNames() const {
  std::vector<std::string> names = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!cfg_.tie_embeddings) names.push_back("lm_head.weight");
  return names;
}

std::vector<std::string> LlamaModelImpl::LayerParamNames(int i) const {
  if (i < 0 || i >= cfg_.num_layers) {
    Fail(Status::InvalidArgument("layer " + std::to_string(i) + " out of range [0, " +
                                 std::to_string(cfg_.num_layers) + ")"));
  }
  return layers_[static_cast<size_t>(i)].names;
}

torch::Tensor LlamaModelImpl::InitialValue(const std::string& name, at::IntArrayRef shape,
                                           uint64_t seed) {
  torch::Tensor t = at::empty(shape, at::kFloat);
  InitialValueInto(name, t, seed);
  return t;
}

void LlamaModelImpl::InitialValueInto(const std::string& name, torch::Tensor dst, uint64_t seed) {
  if (EndsWith(name, "norm.weight")) {
    dst.fill_(1.0f);
    return;
  }
  if (EndsWith(name, ".bias")) {  // nn.Linear biases start at zero in HF's _init_weights
    dst.zero_();
    return;
  }
  // normal_ fills a contiguous tensor in element order: the shape does not change the bits.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(ParamSeed(name, seed));
  dst.normal_(0.0, 0.02, gen);
}

void LlamaModelImpl::InitWeights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (const auto& item : named_parameters()) {
    torch::Tensor p = item.value();
    p.copy_(InitialValue(item.key(), p.sizes(), seed));
  }
}

torch::Tensor LlamaModelImpl::Embed(const torch::Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.scalar_type() != at::kLong) {
    Fail(Status::InvalidArgument("Embed: tokens must be an int64 [B, T] tensor, got " +
                                 std::string(c10::toString(tokens.scalar_type())) + " " +
                                 ShapeText(tokens.sizes())));
  }
  if (tokens.size(1) > cfg_.max_seq_len) {
    Fail(Status::InvalidArgument(
        "Embed: sequence length " + std::to_string(tokens.size(1)) +
        " exceeds model.max_seq_len = " + std::to_string(cfg_.max_seq_len)));
  }
  if (tokens.numel() > 0 && tokens.is_cpu()) {  // on a GPU: CheckTokenIds on the host first
    auto [lo, hi] = at::aminmax(tokens);
    const int64_t min = lo.item<int64_t>(), max = hi.item<int64_t>();
    if (min < 0 || max >= cfg_.vocab_size) {
      Fail(Status::InvalidArgument("Embed: token ids must lie in [0, " +
                                   std::to_string(cfg_.vocab_size) + "), got min " +
                                   std::to_string(min) + " max " + std::to_string(max) +
                                   "; check the tokenizer against model.vocab_size"));
    }
  }
  if (embed_.sizes() != at::IntArrayRef({cfg_.vocab_size, cfg_.hidden_size})) {
    Fail(Status::FailedPrecondition(
        "parameter model.embed_tokens.weight has shape " + ShapeText(embed_.sizes()) +
        ", expected " + ShapeText({cfg_.vocab_size, cfg_.hidden_size}) + " (not gathered?)"));
  }
  return at::embedding(embed_, tokens.to(embed_.device()));
}

LlamaModelImpl::RopeCache LlamaModelImpl::Rope(int64_t seq_len,
                                               const torch::TensorOptions& options) {
  std::lock_guard<std::mutex> lock(rope_mu_);
  if (rope_.seq_len != seq_len ||
      rope_.cos.scalar_type() != c10::typeMetaToScalarType(options.dtype()) ||
      rope_.cos.device() != options.device()) {
    auto [cos, sin] = RopeCosSin(seq_len, RopeInvFreq(cfg_));
    rope_.seq_len = seq_len;
    rope_.cos = cos.to(options);
    rope_.sin = sin.to(options);
    rope_.window_mask = torch::Tensor();
    if (cfg_.sliding_window > 0 && cfg_.sliding_window < seq_len) {
      rope_.window_mask = SlidingWindowMask(seq_len, cfg_.sliding_window).to(options.device());
    }
  }
  return rope_;
}

torch::Tensor LlamaModelImpl::Attention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, int64_t window,
                                        const torch::Tensor& window_mask) {
  // q [B, nh, T, hd], k/v [B, nkv, T, hd]: enable_gqa lets query head j use kv head
  // j / (nh / nkv) (HF repeat_kv) without copying k/v. The scale is 1/sqrt(hd), as HF's.
  const bool gqa = q.size(1) != k.size(1);
  const int64_t T = q.size(2);
  if (window > 0 && window < T) {
    return at::scaled_dot_product_attention(q, k, v, window_mask, 0.0, /*is_causal=*/false,
                                            std::nullopt, gqa);
  }
  return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true,
                                          std::nullopt, gqa);
}

torch::Tensor LlamaModelImpl::Layer(int i, const torch::Tensor& h) {
  if (i < 0 || i >= cfg_.num_layers) {
    Fail(Status::InvalidArgument("Layer: index " + std::to_string(i) + " out of range [0, " +
                                 std::to_string(cfg_.num_layers) + ")"));
  }
  CheckHidden(h, cfg_.hidden_size, "Layer");
  const LayerParams& l = layers_[static_cast<size_t>(i)];
  const int64_t nh = cfg_.num_heads, nkv = cfg_.num_kv_heads, hd = cfg_.HeadDim();
  for (size_t k = 0; k < l.names.size(); ++k) CheckParam(l.tensors[k], l.names[k], l.shapes[k], h);
  auto bias = [](const torch::Tensor& b) -> std::optional<at::Tensor> {
    if (b.defined()) return b;
    return std::nullopt;
  };

  const int64_t B = h.size(0), T = h.size(1);
  // Attention: q [B, nh, T, hd], k/v [B, nkv, T, hd].
  torch::Tensor x = LeanRmsNorm(h, l.input_norm, cfg_.rms_norm_eps);
  torch::Tensor q = at::linear(x, l.q, bias(l.q_bias)).view({B, T, nh, hd}).transpose(1, 2);
  torch::Tensor k = at::linear(x, l.k, bias(l.k_bias)).view({B, T, nkv, hd}).transpose(1, 2);
  torch::Tensor v = at::linear(x, l.v, bias(l.v_bias)).view({B, T, nkv, hd}).transpose(1, 2);
  RopeCache rope = Rope(T, h.options());
  q = ApplyRope(q, rope.cos, rope.sin);
  k = ApplyRope(k, rope.cos, rope.sin);
  torch::Tensor attn = Attention(q, k, v, cfg_.SlidingWindow(i), rope.window_mask)
                           .transpose(1, 2)
                           .reshape({B, T, nh * hd});
  torch::Tensor out = h + at::linear(attn, l.o, bias(l.o_bias));
  // SwiGLU MLP.
  x = LeanRmsNorm(out, l.post_norm, cfg_.rms_norm_eps);
  torch::Tensor mlp = at::linear(
      LeanSwiGlu(at::linear(x, l.gate, bias(l.gate_bias)), at::linear(x, l.up, bias(l.up_bias))),
      l.down, bias(l.down_bias));
  return out + mlp;
}

std::string AttentionBackend(const LlamaConfig& cfg, const torch::TensorOptions& options,
                             int64_t seq_len) {
  static const char* kNames[] = {"math", "flash_attention", "efficient_attention",
                                 "cudnn_attention", "overrideable"};
  const int64_t nh = cfg.num_heads, nkv = cfg.num_kv_heads, hd = cfg.HeadDim();
  const int64_t T = std::max<int64_t>(1, std::min(seq_len, cfg.max_seq_len));
  const bool gqa = nh != nkv;
  std::set<int64_t> windows;
  for (int64_t i = 0; i < cfg.num_layers; ++i) windows.insert(cfg.SlidingWindow(i));
  std::string out;
  for (int64_t window : windows) {
    const bool masked = window > 0 && window < T;
    // Probe tensors of the run's shapes with gradients (the selector checks backward limits).
    torch::Tensor q = at::zeros({1, nh, T, hd}, options).requires_grad_(true);
    torch::Tensor k = at::zeros({1, nkv, T, hd}, options).requires_grad_(true);
    torch::Tensor v = at::zeros({1, nkv, T, hd}, options).requires_grad_(true);
    std::optional<at::Tensor> mask;
    if (masked) mask = SlidingWindowMask(T, window).to(options.device());
    const int64_t choice =
        at::_fused_sdp_choice(q, k, v, mask, 0.0, /*is_causal=*/!masked, std::nullopt, gqa);
    std::string name = choice >= 0 && choice < 5 ? kNames[choice] : "error";
    name += " (" + q.device().str() + ", " +
            (masked ? "window " + std::to_string(window) + " mask" : std::string("causal")) +
            (gqa ? ", GQA " + std::to_string(nh / nkv) + ":1" : "") + ")";
    out += (out.empty() ? "" : "; ") + name;
  }
  return out;
}

torch::Tensor LlamaModelImpl::Head(const torch::Tensor& h) {
  CheckHidden(h, cfg_.hidden_size, "Head");
  CheckParam(norm_, "model.norm.weight", {cfg_.hidden_size}, h);
  CheckParam(lm_head_,
             cfg_.tie_embeddings ? "model.embed_tokens.weight (tied lm_head)" : "lm_head.weight",
             {cfg_.vocab_size, cfg_.hidden_size}, h);
  return at::linear(LeanRmsNorm(h, norm_, cfg_.rms_norm_eps), lm_head_).to(at::kFloat);
}

torch::Tensor LlamaModelImpl::HeadLoss(const torch::Tensor& h, const torch::Tensor& targets) {
  CheckHidden(h, cfg_.hidden_size, "HeadLoss");
  CheckParam(norm_, "model.norm.weight", {cfg_.hidden_size}, h);
  CheckParam(lm_head_,
             cfg_.tie_embeddings ? "model.embed_tokens.weight (tied lm_head)" : "lm_head.weight",
             {cfg_.vocab_size, cfg_.hidden_size}, h);
  if (targets.dim() != 2 || targets.scalar_type() != at::kLong || targets.size(0) != h.size(0) ||
      targets.size(1) != h.size(1)) {
    Fail(Status::InvalidArgument(
        "HeadLoss: need int64 targets [B, T] for hidden states " + ShapeText(h.sizes()) + ", got " +
        c10::toString(targets.scalar_type()) + " " + ShapeText(targets.sizes())));
  }
  const torch::Tensor x = LeanRmsNorm(h, norm_, cfg_.rms_norm_eps);
  return LinearCrossEntropy(x.reshape({-1, cfg_.hidden_size}), lm_head_,
                            targets.reshape({-1}).to(x.device()));
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& tokens) {
  torch::Tensor h = Embed(tokens);
  for (int i = 0; i < cfg_.num_layers; ++i) h = Layer(i, h);
  return Head(h);
}

Status CheckTokenIds(const int32_t* tokens, size_t n, int64_t vocab) {
  if (n == 0) return Status::Ok();
  const auto [lo, hi] = std::minmax_element(tokens, tokens + n);
  if (*lo < 0 || *hi >= vocab) {
    return Status::InvalidArgument(
        "token ids must lie in [0, " + std::to_string(vocab) + "), got min " + std::to_string(*lo) +
        " max " + std::to_string(*hi) + "; check the tokenizer against model.vocab_size");
  }
  return Status::Ok();
}

torch::Tensor CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (logits.dim() != 3 || targets.dim() != 2 || targets.scalar_type() != at::kLong ||
      logits.size(0) != targets.size(0) || logits.size(1) != targets.size(1)) {
    Fail(
        Status::InvalidArgument("CrossEntropyLoss: need logits [B, T, V] and int64 targets "
                                "[B, T], got " +
                                ShapeText(logits.sizes()) + " and " + ShapeText(targets.sizes())));
  }
  const int64_t V = logits.size(2);
  torch::Tensor lp = at::log_softmax(logits.to(at::kFloat).reshape({-1, V}), -1);
  // Default nll_loss reduction: mean over all tokens (ignore_index -100 never matches a valid
  // target, and out-of-range targets raise).
  return at::nll_loss(lp, targets.reshape({-1}).to(lp.device()));
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  torch::Tensor xf = x.to(at::kFloat);
  torch::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * at::rsqrt(var + eps)).to(x.scalar_type());
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

namespace {
// HF: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), where
// `1.0 / t` is Tensor.__rtruediv__: t.reciprocal() * 1.0.
torch::Tensor DefaultInvFreq(int64_t head_dim, double theta) {
  return at::pow(theta, at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / double(head_dim))
      .reciprocal();
}

// _compute_llama3_parameters, operation by operation (a / t is t.reciprocal() * a,
// 1 - t is rsub(t, 1), ~a * ~b is a logical and).
torch::Tensor Llama3InvFreq(const torch::Tensor& inv_freq, const RopeScaling& r) {
  const double old_context_len = double(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / r.low_freq_factor;
  const double high_freq_wavelen = old_context_len / r.high_freq_factor;
  torch::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
  torch::Tensor llama = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  torch::Tensor smooth = (wavelen.reciprocal() * old_context_len - r.low_freq_factor) /
                         (r.high_freq_factor - r.low_freq_factor);
  torch::Tensor smoothed = at::rsub(smooth, 1) * llama / r.factor + smooth * llama;
  torch::Tensor is_medium =
      at::logical_not(wavelen < high_freq_wavelen) * at::logical_not(wavelen > low_freq_wavelen);
  return at::where(is_medium, smoothed, llama);
}
}  // namespace

torch::Tensor RopeInvFreq(const LlamaConfig& cfg) {
  torch::Tensor inv_freq = DefaultInvFreq(cfg.HeadDim(), cfg.rope_theta);
  switch (cfg.rope_scaling.type) {
    case RopeScaling::Type::kLinear:
      return inv_freq / cfg.rope_scaling.factor;  // HF: inv_freq /= factor
    case RopeScaling::Type::kLlama3:
      return Llama3InvFreq(inv_freq, cfg.rope_scaling);
    case RopeScaling::Type::kDefault:
      break;
  }
  return inv_freq;
}

std::pair<torch::Tensor, torch::Tensor> RopeCosSin(int64_t seq_len, const torch::Tensor& inv_freq) {
  // As HF: freqs = positions x inv_freq in float32; emb = cat(freqs, freqs). The
  // attention_scaling factor of default, linear and llama3 is 1.0.
  torch::Tensor t = at::arange(seq_len, at::kLong).to(at::kFloat);
  torch::Tensor freqs = at::outer(t, inv_freq);
  torch::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

std::pair<torch::Tensor, torch::Tensor> RopeCosSin(int64_t seq_len, int64_t head_dim,
                                                   double theta) {
  return RopeCosSin(seq_len, DefaultInvFreq(head_dim, theta));
}

torch::Tensor SlidingWindowMask(int64_t seq_len, int64_t window) {
  torch::Tensor i = at::arange(seq_len, at::kLong).unsqueeze(1);
  torch::Tensor j = at::arange(seq_len, at::kLong).unsqueeze(0);
  return at::logical_and(j <= i, j > i - window);
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  torch::Tensor c = cos.to(x.options()), s = sin.to(x.options());
  return x * c + RotateHalf(x) * s;
}

}  // namespace ftrain::model
