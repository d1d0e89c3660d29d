// RMSNorm and the SwiGLU product as autograd functions that keep less for the backward than the
// eager chains they replace, and recompute the cheap elementwise part instead: what
// torchtitan's op-level selective checkpointing does (keep the matrix products' outputs,
// recompute the elementwise ops), without the per-op bookkeeping. Their forward is the eager
// chain's, op for op, and their backward repeats autograd's own derivative formulas in
// autograd's order, so with bf16 (or fp16) activations every value and gradient is
// bit-identical to the eager chain (tests/model_test.cc, LeanOps.*; with float32 activations
// the input's gradient may be summed in another order than autograd's: equal within
// rounding).
//
// Per token and layer (bf16, hidden h, MLP width i), the eager chains kept 16h + 6i bytes
// here, these keep 4h + 8 + 4i: the layer's activations drop by about a third (docs/plan.md).
#pragma once

#include <torch/types.h>

namespace ftrain::model {

// weight * (x.float() * rsqrt(mean(x.float()^2, -1) + eps)).to(x.dtype): HF's LlamaRMSNorm.
// Keeps x, the weight and the per-row rsqrt (float32, one value per row); the eager chain kept
// a float32 copy of x and the normed value too.
torch::Tensor LeanRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// silu(gate) * up. Keeps gate and up; the eager chain kept silu(gate) as well.
torch::Tensor LeanSwiGlu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace ftrain::model
