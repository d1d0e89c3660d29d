// LlamaModel: a Llama-style decoder (RMSNorm, RoPE in the Hugging Face "rotate half"
// convention with default, linear or llama3 frequencies, grouped-query causal attention through
// at::scaled_dot_product_attention with an optional sliding window, SwiGLU MLP, optional
// biases, tied or untied lm_head) whose named_parameters() are exactly the Hugging Face
// Llama/Mistral/Qwen2ForCausalLM names. The model knows
// nothing about parallelism: it exposes Embed / Layer / Head so that a separate engine (FSDP)
// can install gathered parameters with param.set_data(...) before each call. Every call reads
// the parameters afresh; nothing derived from them is cached. See docs/model.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/llama_config.h"

namespace ftrain::model {

class LlamaModelImpl : public torch::nn::Module {
 public:
  // Allocates every parameter with torch::empty (uninitialized: call InitWeights or
  // LoadSafetensors before use). `options` sets the parameters' dtype and device, default
  // float32 on the CPU; a meta device gives shapes and names without memory. Throws
  // StatusError(InvalidArgument) when cfg.Validate() fails.
  explicit LlamaModelImpl(const LlamaConfig& cfg,
                          const torch::TensorOptions& options = torch::kFloat32);

  const LlamaConfig& config() const { return cfg_; }

  // tokens [B, T] int64 with 0 <= token < vocab_size and T <= max_seq_len
  // -> hidden [B, T, H] in the embedding weight's dtype. The range is checked here for CPU
  // tokens; on a GPU that check would synchronise the host, so callers there check the ids on
  // the host first (CheckTokenIds).
  torch::Tensor Embed(const torch::Tensor& tokens);
  // Decoder block i: h + Attn(RMSNorm(h)), then h + MLP(RMSNorm(h)). h [B, T, H]; the
  // block's parameters must have h's dtype and device. Returns [B, T, H] in h's dtype.
  torch::Tensor Layer(int i, const torch::Tensor& h);
  // Final RMSNorm + lm_head (the embedding matrix when tied) -> logits [B, T, V] float32.
  torch::Tensor Head(const torch::Tensor& h);
  // The mean token cross-entropy of Head(h) against targets [B, T] int64 in [0, V), without
  // the [B, T, V] float32 logits: LinearCrossEntropy over chunks of the tokens (its gradients
  // computed chunk by chunk in the forward). A float32 scalar.
  torch::Tensor HeadLoss(const torch::Tensor& h, const torch::Tensor& targets);
  // Head(Layer(L-1, ... Layer(0, Embed(tokens)))).
  torch::Tensor forward(const torch::Tensor& tokens);

  // HF names of the parameters Embed and Head read: model.embed_tokens.weight,
  // model.norm.weight and (untied only) lm_head.weight.
  std::vector<std::string> RootParamNames() const;
  // HF names of layer i's parameters (nine weights, plus the biases the config has), in
  // named_parameters() order.
  std::vector<std::string> LayerParamNames(int i) const;

  // Deterministic initialization: every linear and the embedding ~ normal(0, 0.02), every
  // RMSNorm weight = 1, every bias = 0. Each parameter draws from its own CPU generator seeded from
  // (seed, its HF name), so the bits depend only on seed and config (not on thread count,
  // parameter order or which other parameters exist). The global generator is not touched.
  void InitWeights(uint64_t seed);
  // The value InitWeights gives parameter `name` (float32, CPU), for engines that initialize
  // one shard unit at a time.
  static torch::Tensor InitialValue(const std::string& name, at::IntArrayRef shape, uint64_t seed);
  // The same values written into `dst` (contiguous float32 CPU, the parameter's shape or a
  // flat view of it), so an engine can fill one reused buffer instead of allocating per
  // parameter.
  static void InitialValueInto(const std::string& name, torch::Tensor dst, uint64_t seed);

 private:
  struct LayerParams {
    torch::Tensor q, k, v, o, gate, up, down, input_norm, post_norm;
    torch::Tensor q_bias, k_bias, v_bias, o_bias, gate_bias, up_bias, down_bias;  // or undefined
    // Every parameter of the block with its HF name and shape, named_parameters() order.
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<torch::Tensor> tensors;
  };
  torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          int64_t window, const torch::Tensor& window_mask);
  // The registered parameter tensors themselves (same TensorImpl as named_parameters()),
  // so param.set_data(...) by an engine is seen here. Never replaced after construction.
  torch::Tensor embed_, norm_, lm_head_;  // lm_head_ is embed_ when tied
  std::vector<LayerParams> layers_;
  LlamaConfig cfg_;

  // RoPE cos/sin [T, head_dim] for the last (T, dtype, device), and the sliding-window mask
  // [T, T] (true: attend) when the config has a window shorter than T: constants of the
  // config, not derived from parameters; not registered as buffers.
  struct RopeCache {
    int64_t seq_len = -1;
    torch::Tensor cos, sin, window_mask;
  };
  RopeCache Rope(int64_t seq_len, const torch::TensorOptions& options);
  std::mutex rope_mu_;
  RopeCache rope_;  // guarded by rope_mu_
};
TORCH_MODULE(LlamaModel);

// InvalidArgument naming the range unless every id of tokens[0, n) lies in [0, vocab).
Status CheckTokenIds(const int32_t* tokens, size_t n, int64_t vocab);

// Mean token cross-entropy in float32. logits [B, T, V] (any float dtype; computed in float32),
// targets [B, T] int64 in [0, V). Returns a float32 scalar.
torch::Tensor CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets);

// Which at::scaled_dot_product_attention backend LlamaModel's Layer runs for activations of
// `options` and sequences of seq_len tokens with gradients, asked of LibTorch's own selector
// (at::_fused_sdp_choice) with probe tensors of those shapes, e.g. "flash_attention (cuda,
// causal, GQA 4:1)"; "; "-separated when layers differ (sliding windows).
std::string AttentionBackend(const LlamaConfig& cfg, const torch::TensorOptions& options,
                             int64_t seq_len);

// Building blocks, exposed for tests (the HF equations; see docs/model.md).
// x * rsqrt(mean(x^2) + eps) computed in float32, cast back to x's dtype, times weight.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// cat(-x2, x1) over the last dimension (x1, x2 its halves).
torch::Tensor RotateHalf(const torch::Tensor& x);
// cos/sin [T, head_dim] in float32: angle(t, j) = t * theta^(-2(j mod d/2)/d).
std::pair<torch::Tensor, torch::Tensor> RopeCosSin(int64_t seq_len, int64_t head_dim, double theta);
// inv_freq [head_dim / 2] float32 for cfg's rope_theta and rope_scaling, with the operations of
// transformers' rope init functions (default, linear, llama3) in the same order.
torch::Tensor RopeInvFreq(const LlamaConfig& cfg);
// cos/sin [T, 2 * inv_freq.size(0)] in float32 from inv_freq: angle(t, j) = t * inv_freq[j mod
// d/2].
std::pair<torch::Tensor, torch::Tensor> RopeCosSin(int64_t seq_len, const torch::Tensor& inv_freq);
// The sliding-window causal mask [T, T], true where key j is attended by query i:
// i - window < j <= i (transformers' sliding_window_overlay on the causal mask).
torch::Tensor SlidingWindowMask(int64_t seq_len, int64_t window);
// x [..., T, head_dim] -> x * cos + RotateHalf(x) * sin (cos/sin cast to x's dtype).
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace ftrain::model
