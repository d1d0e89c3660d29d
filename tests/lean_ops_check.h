// Test helper: model::LeanRmsNorm and model::LeanSwiGlu against the eager chains they replace,
// on one device: the same outputs and, with bf16 activations (what training runs), bit for bit
// the same gradients; with float32 within rounding for RMSNorm (the input's two gradient paths
// may be summed in another order than autograd's). model_test runs it on the CPU, gpu_test on
// a GPU (with deterministic algorithms on, as the trainer runs).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "model/lean_ops.h"
#include "model/llama.h"

namespace ftrain::testing {

struct OpResult {
  torch::Tensor out, grad_a, grad_b;
};

template <typename Fn>
OpResult RunWithGrads(Fn fn, const torch::Tensor& a, const torch::Tensor& b,
                      const torch::Tensor& grad_out) {
  torch::Tensor da = a.detach().clone().requires_grad_(true);
  torch::Tensor db = b.detach().clone().requires_grad_(true);
  torch::Tensor out = fn(da, db);
  out.backward(grad_out);
  return {out.detach(), da.grad(), db.grad()};
}

inline void ExpectSameResult(const OpResult& lean, const OpResult& eager, bool bitwise,
                             const std::string& what) {
  const torch::Tensor* pairs[][2] = {
      {&lean.out, &eager.out}, {&lean.grad_a, &eager.grad_a}, {&lean.grad_b, &eager.grad_b}};
  const char* names[] = {"output", "first input's gradient", "second input's gradient"};
  for (int i = 0; i < 3; ++i) {
    const torch::Tensor &l = *pairs[i][0], &e = *pairs[i][1];
    ASSERT_TRUE(l.defined() && e.defined()) << what << names[i];
    if (bitwise) {
      EXPECT_TRUE(torch::equal(l, e))
          << what << names[i] << ": max difference " << (l - e).abs().max().item<double>();
    } else {
      EXPECT_TRUE(torch::allclose(l, e, 1e-5, 1e-6)) << what << names[i];
    }
  }
}

inline void ExpectLeanOpsMatchEager(const torch::Device& device) {
  torch::manual_seed(7);
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    const auto opts = torch::TensorOptions().dtype(dtype).device(device);
    const std::string name = std::string(c10::toString(dtype)) + " on " + device.str() + " ";
    const torch::Tensor x = torch::randn({3, 17, 96}).to(opts);
    const torch::Tensor w = (1 + 0.1 * torch::randn({96})).to(opts);
    const torch::Tensor gx = torch::randn({3, 17, 96}).to(opts);
    ExpectSameResult(
        RunWithGrads([](auto& a, auto& b) { return model::LeanRmsNorm(a, b, 1e-5); }, x, w, gx),
        RunWithGrads([](auto& a, auto& b) { return model::RmsNorm(a, b, 1e-5); }, x, w, gx),
        dtype == torch::kBFloat16, name + "RMSNorm: ");
    const torch::Tensor gate = torch::randn({2, 33, 80}).to(opts);
    const torch::Tensor up = torch::randn({2, 33, 80}).to(opts);
    const torch::Tensor gy = torch::randn({2, 33, 80}).to(opts);
    ExpectSameResult(
        RunWithGrads([](auto& a, auto& b) { return model::LeanSwiGlu(a, b); }, gate, up, gy),
        RunWithGrads([](auto& a, auto& b) { return at::silu(a) * b; }, gate, up, gy), true,
        name + "SwiGLU: ");
  }
}

}  // namespace ftrain::testing
