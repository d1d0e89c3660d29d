// The optimizer's arithmetic against LibTorch's own: fsdp::AdamWUpdate vs torch::optim::AdamW,
// fsdp::ClipCoefficient vs torch::nn::utils::clip_grad_norm_, and one FsdpEngine on one
// process (no communication) vs plain autograd + clip_grad_norm_ + torch::optim::AdamW on the
// same model: a world-size-independent bug (bias correction, weight decay, the clip
// coefficient, the 1/K accumulation scale) shows here, where the FSDP equivalence tests,
// which compare the engine with itself, cannot see it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "fsdp/adamw.h"
#include "fsdp/engine.h"
#include "model/llama.h"

namespace ftrain::testing {
namespace {

// max(|a - b| - rtol |b|): <= atol is torch::allclose(a, b, rtol, atol).
double Excess(const torch::Tensor& a, const torch::Tensor& b, double rtol) {
  auto a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return ((a64 - b64).abs() - rtol * b64.abs()).max().item<double>();
}

TEST(Optim, AdamWUpdateMatchesTorchOptimAdamW) {
  torch::manual_seed(7);
  const fsdp::AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  torch::Tensor p0 = torch::randn({4099}), ours = p0.clone();
  torch::Tensor m = torch::zeros_like(p0), v = torch::zeros_like(p0);
  torch::Tensor ref = p0.clone().set_requires_grad(true);
  torch::optim::AdamW opt({ref}, torch::optim::AdamWOptions(1e-3)
                                     .betas({cfg.beta1, cfg.beta2})
                                     .eps(cfg.eps)
                                     .weight_decay(cfg.weight_decay));
  // Ten steps with a changing learning rate (the schedule) and gradients of changing scale.
  for (int step = 1; step <= 10; ++step) {
    const double lr = 1e-3 * (1.0 + 0.3 * step);
    torch::Tensor g = torch::randn({4099}) * (0.01 * step);
    fsdp::AdamWUpdate(cfg, step, lr, ours, g, m, v);
    for (auto& group : opt.param_groups()) group.options().set_lr(lr);
    ref.mutable_grad() = g.clone();
    opt.step();
    ASSERT_LE(Excess(ours, ref.detach(), 1e-6), 1e-9) << "after step " << step;
  }
  // The moments too (they are checkpointed). PyTorch's fused kernel, which AdamWUpdate runs,
  // updates exp_avg as a lerp (m + (1 - beta1)(g - m)) where torch::optim::AdamW multiplies
  // and adds: the same value up to float32 rounding of (1 - beta1) g, about 1e-9 here, which
  // shows where m is near zero (seen: 2.8e-9 after ten steps).
  auto& state =
      static_cast<torch::optim::AdamWParamState&>(*opt.state().at(ref.unsafeGetTensorImpl()));
  EXPECT_LE(Excess(m, state.exp_avg(), 1e-6), 1e-8);
  EXPECT_LE(Excess(v, state.exp_avg_sq(), 1e-6), 1e-15);
}

TEST(Optim, ClipCoefficientMatchesClipGradNorm) {
  torch::manual_seed(11);
  for (double max_norm : {0.5, 3.0, 1e6}) {
    std::vector<torch::Tensor> params, grads;
    double sumsq = 0;
    for (int64_t n : {17, 300, 5}) {
      torch::Tensor p = torch::zeros({n}).set_requires_grad(true);
      torch::Tensor g = torch::randn({n});
      p.mutable_grad() = g.clone();
      sumsq += g.to(torch::kFloat64).pow(2).sum().item<double>();
      params.push_back(p);
      grads.push_back(g);
    }
    const double norm = std::sqrt(sumsq);
    const double returned = torch::nn::utils::clip_grad_norm_(params, max_norm);
    EXPECT_NEAR(returned, norm, 1e-5 * norm);
    const double c = fsdp::ClipCoefficient(norm, max_norm);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_LE(Excess(grads[i] * c, params[i].grad(), 1e-6), 1e-9)
          << "max_norm " << max_norm << ", tensor " << i;
    }
  }
  EXPECT_EQ(fsdp::ClipCoefficient(123.0, 0.0), 1.0) << "max_norm <= 0: no clipping";
}

LlamaConfig TinyConfig() {
  LlamaConfig c;
  c.vocab_size = 128;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_seq_len = 16;
  return c;
}

// Three optimizer steps of two micro-batches each (loss scale 1/2), clipping active on some.
// A large eps makes AdamW sensitive to the gradients' scale (with eps ~ 0 it is nearly
// scale-invariant, and a wrong 1/K or clip coefficient would hide).
TEST(Optim, OneProcessEngineStepMatchesPlainAutogradAndTorchAdamW) {
  torch::manual_seed(3);
  const LlamaConfig mc = TinyConfig();
  const fsdp::AdamWConfig adamw{0.9, 0.95, 1e-3, 0.1};
  const double clip = 0.5;
  constexpr int kAccum = 2;
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < 3 * kAccum; ++i) {
    batches.push_back(torch::randint(0, mc.vocab_size, {4, mc.max_seq_len + 1}, torch::kInt64));
  }

  model::LlamaModel ref(mc);
  ref->InitWeights(99);
  model::LlamaModel ours(mc);
  ours->InitWeights(99);
  fsdp::FsdpConfig fc;  // fp32, CPU, full_shard over a group of one
  auto engine = fsdp::FsdpEngine::Create(ours, fc, fsdp::FsdpGroups{});
  ASSERT_TRUE(engine.ok()) << engine.status().message();

  std::vector<torch::Tensor> ref_params;
  for (auto& p : ref->parameters()) ref_params.push_back(p);
  torch::optim::AdamW opt(ref_params, torch::optim::AdamWOptions(1e-2)
                                          .betas({adamw.beta1, adamw.beta2})
                                          .eps(adamw.eps)
                                          .weight_decay(adamw.weight_decay));
  for (int step = 0; step < 3; ++step) {
    const double lr = 1e-2 / (1 + step);
    opt.zero_grad();
    for (int k = 0; k < kAccum; ++k) {
      const torch::Tensor& t = batches[step * kAccum + k];
      auto ours_loss = (*engine)->ForwardBackward(t, 1.0 / kAccum, k == kAccum - 1);
      ASSERT_TRUE(ours_loss.ok()) << ours_loss.status().message();
      torch::Tensor loss = model::CrossEntropyLoss(ref->forward(t.narrow(1, 0, mc.max_seq_len)),
                                                   t.narrow(1, 1, mc.max_seq_len));
      EXPECT_NEAR(ours_loss->item<float>(), loss.item<float>(), 1e-5)
          << "step " << step << " micro " << k;
      (loss / kAccum).backward();
    }
    const double ref_norm = torch::nn::utils::clip_grad_norm_(ref_params, clip);
    for (auto& group : opt.param_groups()) group.options().set_lr(lr);
    opt.step();
    auto stats = (*engine)->Step(adamw, lr, clip);
    ASSERT_TRUE(stats.ok()) << stats.status().message();
    EXPECT_NEAR(stats->grad_norm, ref_norm, 1e-5 * ref_norm) << "step " << step;
  }
  auto full = (*engine)->GatherFullParameters();
  ASSERT_TRUE(full.ok()) << full.status().message();
  std::map<std::string, torch::Tensor> want;
  for (const auto& item : ref->named_parameters()) want[item.key()] = item.value().detach();
  ASSERT_EQ(full->size(), want.size());
  for (const auto& [name, value] : *full) {
    ASSERT_TRUE(want.count(name)) << name;
    EXPECT_LE(Excess(value.reshape(want[name].sizes()), want[name], 1e-4), 1e-6) << name;
  }
}

}  // namespace
}  // namespace ftrain::testing
