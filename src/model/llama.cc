// LlamaModel: the HF LlamaForCausalLM equations in LibTorch, one decoder block per Layer()
// call. Parameters are read through the registered tensors on every call (an engine may have
// swapped their data); only config constants (RoPE cos/sin, causal mask) are cached.
// Input checks throw StatusError(InvalidArgument / FailedPrecondition) naming the problem.
#include "model/llama.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <map>
#include <sstream>

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

// The registered "weight" of a fresh holder module `parent.<name>`.
torch::Tensor AddWeight(torch::nn::Module& parent, const std::string& name,
                        const std::vector<int64_t>& shape, const torch::TensorOptions& options) {
  auto holder = parent.register_module(name, std::make_shared<torch::nn::Module>());
  return holder->register_parameter("weight", torch::empty(shape, options));
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

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  // lm_head, each leaf holding one "weight", so that named_parameters() gives HF names.
  for (const TensorSpec& spec : LlamaParamSpecs(cfg)) {
    // Split "a.b.c.weight" into holder path a.b.c; create the containers on the way.
    std::vector<std::string> parts;
    std::stringstream ss(spec.name);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    torch::nn::Module* parent = this;
    for (size_t i = 0; i + 2 < parts.size(); ++i) parent = &Child(*parent, parts[i]);
    torch::Tensor w = AddWeight(*parent, parts[parts.size() - 2], spec.shape, options);
    const std::string& n = spec.name;
    if (n == "model.embed_tokens.weight") {
      embed_ = w;
    } else if (n == "model.norm.weight") {
      norm_ = w;
    } else if (n == "lm_head.weight") {
      lm_head_ = w;
    } else {
      LayerParams& l = layers_[static_cast<size_t>(std::stoll(parts[2]))];
      static const std::map<std::string, torch::Tensor LayerParams::*> kSlots = {
          {"q_proj", &LayerParams::q},
          {"k_proj", &LayerParams::k},
          {"v_proj", &LayerParams::v},
          {"o_proj", &LayerParams::o},
          {"gate_proj", &LayerParams::gate},
          {"up_proj", &LayerParams::up},
          {"down_proj", &LayerParams::down},
          {"input_layernorm", &LayerParams::input_norm},
          {"post_attention_layernorm", &LayerParams::post_norm}};
      l.*kSlots.at(parts[parts.size() - 2]) = w;
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
  const std::string p = "model.layers." + std::to_string(i) + ".";
  return {p + "self_attn.q_proj.weight",        p + "self_attn.k_proj.weight",
          p + "self_attn.v_proj.weight",        p + "self_attn.o_proj.weight",
          p + "mlp.gate_proj.weight",           p + "mlp.up_proj.weight",
          p + "mlp.down_proj.weight",           p + "input_layernorm.weight",
          p + "post_attention_layernorm.weight"};
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
  if (tokens.numel() > 0) {
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
    auto [cos, sin] = RopeCosSin(seq_len, cfg_.HeadDim(), cfg_.rope_theta);
    rope_.seq_len = seq_len;
    rope_.cos = cos.to(options);
    rope_.sin = sin.to(options);
    // True above the diagonal: key position j > query position i is masked out.
    rope_.mask = at::ones({seq_len, seq_len}, at::kBool).triu(1).to(options.device());
  }
  return rope_;
}

torch::Tensor LlamaModelImpl::Layer(int i, const torch::Tensor& h) {
  if (i < 0 || i >= cfg_.num_layers) {
    Fail(Status::InvalidArgument("Layer: index " + std::to_string(i) + " out of range [0, " +
                                 std::to_string(cfg_.num_layers) + ")"));
  }
  CheckHidden(h, cfg_.hidden_size, "Layer");
  const LayerParams& l = layers_[static_cast<size_t>(i)];
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, nh = cfg_.num_heads,
                nkv = cfg_.num_kv_heads, hd = cfg_.HeadDim(), rep = nh / nkv;
  const std::vector<std::string> names = LayerParamNames(i);
  const torch::Tensor* params[] = {&l.q,  &l.k,    &l.v,          &l.o,        &l.gate,
                                   &l.up, &l.down, &l.input_norm, &l.post_norm};
  const std::vector<int64_t> shapes[] = {{H, H}, {nkv * hd, H}, {nkv * hd, H}, {H, H}, {I, H},
                                         {I, H}, {H, I},        {H},           {H}};
  for (size_t k = 0; k < names.size(); ++k) CheckParam(*params[k], names[k], shapes[k], h);

  const int64_t B = h.size(0), T = h.size(1);
  // Attention: q [B, nh, T, hd], k/v [B, nkv, T, hd].
  torch::Tensor x = RmsNorm(h, l.input_norm, cfg_.rms_norm_eps);
  torch::Tensor q = at::linear(x, l.q).view({B, T, nh, hd}).transpose(1, 2);
  torch::Tensor k = at::linear(x, l.k).view({B, T, nkv, hd}).transpose(1, 2);
  torch::Tensor v = at::linear(x, l.v).view({B, T, nkv, hd}).transpose(1, 2);
  RopeCache rope = Rope(T, h.options());
  q = ApplyRope(q, rope.cos, rope.sin);
  k = ApplyRope(k, rope.cos, rope.sin);
  // GQA without repeating k/v: query head j uses kv head j / rep (HF repeat_kv), so fold the
  // rep query heads of each kv head into the row dimension: [B, nkv, rep * T, hd].
  q = q.reshape({B, nkv, rep * T, hd});
  torch::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
  scores = scores.view({B, nkv, rep, T, T})
               .to(at::kFloat)
               .masked_fill(rope.mask, -std::numeric_limits<float>::infinity());
  torch::Tensor probs = at::softmax(scores, -1).to(h.scalar_type()).view({B, nkv, rep * T, T});
  torch::Tensor attn = at::matmul(probs, v)  // [B, nkv, rep * T, hd]
                           .view({B, nh, T, hd})
                           .transpose(1, 2)
                           .reshape({B, T, H});
  torch::Tensor out = h + at::linear(attn, l.o);
  // SwiGLU MLP.
  x = RmsNorm(out, l.post_norm, cfg_.rms_norm_eps);
  torch::Tensor mlp = at::linear(at::silu(at::linear(x, l.gate)) * at::linear(x, l.up), l.down);
  return out + mlp;
}

torch::Tensor LlamaModelImpl::Head(const torch::Tensor& h) {
  CheckHidden(h, cfg_.hidden_size, "Head");
  CheckParam(norm_, "model.norm.weight", {cfg_.hidden_size}, h);
  CheckParam(lm_head_,
             cfg_.tie_embeddings ? "model.embed_tokens.weight (tied lm_head)" : "lm_head.weight",
             {cfg_.vocab_size, cfg_.hidden_size}, h);
  return at::linear(RmsNorm(h, norm_, cfg_.rms_norm_eps), lm_head_).to(at::kFloat);
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& tokens) {
  torch::Tensor h = Embed(tokens);
  for (int i = 0; i < cfg_.num_layers; ++i) h = Layer(i, h);
  return Head(h);
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

std::pair<torch::Tensor, torch::Tensor> RopeCosSin(int64_t seq_len, int64_t head_dim,
                                                   double theta) {
  // As HF: inv_freq = 1 / theta^(arange(0, d, 2) / d) in float32; freqs = t x inv_freq;
  // emb = cat(freqs, freqs).
  torch::Tensor inv_freq =
      at::pow(theta, at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / double(head_dim))
          .reciprocal();
  torch::Tensor t = at::arange(seq_len, at::kLong).to(at::kFloat);
  torch::Tensor freqs = at::outer(t, inv_freq);
  torch::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  torch::Tensor c = cos.to(x.options()), s = sin.to(x.options());
  return x * c + RotateHalf(x) * s;
}

}  // namespace ftrain::model
