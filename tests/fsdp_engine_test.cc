// The FSDP engine in one process (no communication): what it allocates. A model allocated only
// for its shapes under NoUninitializedFill leaves no page resident even with deterministic
// mode's NaN fill on (what a GPU run pins), while the same allocation without the guard
// touches every page.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "fsdp/engine.h"
#include "model/llama.h"

namespace ftrain::testing {
namespace {

double RssBytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return 1024.0 * std::stod(line.substr(6));
  }
  return 0;
}

LlamaConfig MidModel() {  // ~105M parameters: 420 MB in fp32
  LlamaConfig c;
  c.vocab_size = 8192;
  c.hidden_size = 768;
  c.intermediate_size = 2048;
  c.num_layers = 12;
  c.num_heads = 12;
  c.num_kv_heads = 12;
  c.max_seq_len = 64;
  return c;
}

// Deterministic algorithms with their NaN fill, as train::PinDeterministicMathModes leaves
// them on a GPU run; restored after the test.
class DeterministicFill {
 public:
  DeterministicFill()
      : algorithms_(at::globalContext().deterministicAlgorithms()),
        fill_(at::globalContext().deterministicFillUninitializedMemory()) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicFillUninitializedMemory(true);
  }
  ~DeterministicFill() {
    at::globalContext().setDeterministicAlgorithms(algorithms_, false);
    at::globalContext().setDeterministicFillUninitializedMemory(fill_);
  }

 private:
  bool algorithms_, fill_;
};

TEST(FsdpEngineMemory, AModelAllocatedForItsShapesIsNeverResident) {
  const DeterministicFill deterministic;
  const LlamaConfig cfg = MidModel();
  const double model_bytes = 4.0 * 105e6;
  double grew_guarded, grew_filled;
  {
    const double before = RssBytes();
    fsdp::NoUninitializedFill no_fill;
    model::LlamaModel m(cfg);
    grew_guarded = RssBytes() - before;
    EXPECT_TRUE(at::globalContext().deterministicFillUninitializedMemory() == false);
  }
  EXPECT_TRUE(at::globalContext().deterministicFillUninitializedMemory()) << "guard restores";
  {
    const double before = RssBytes();
    model::LlamaModel m(cfg);  // what BuildEngine did before: every page filled with NaN
    grew_filled = RssBytes() - before;
    const torch::Tensor w = m->named_parameters()["model.embed_tokens.weight"];
    EXPECT_TRUE(torch::isnan(w).all().item<bool>());
  }
  EXPECT_GE(grew_filled, 0.8 * model_bytes);
  EXPECT_LE(grew_guarded, 0.05 * model_bytes)
      << "the guarded allocation made " << grew_guarded / 1e6 << " MB resident";
}

// The step guard on one rank (fsdp::FsdpEngine::Step with the non-finite guard on): a step
// with an injected fault changes no state, and the run goes on as if the step had not been.
LlamaConfig TinyModel() {
  LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.max_seq_len = 16;
  return c;
}

std::unique_ptr<fsdp::FsdpEngine> TinyEngine(bool guard) {
  fsdp::FsdpConfig fc;
  fc.init_seed = 7;
  auto e = fsdp::FsdpEngine::Create(model::LlamaModel(TinyModel()), fc, fsdp::FsdpGroups{});
  EXPECT_TRUE(e.ok()) << e.status().message();
  (*e)->set_guard_nonfinite(guard);
  return std::move(*e);
}

torch::Tensor Batch(int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  return torch::randint(0, 64, {2, 9}, torch::kInt64);
}

fsdp::StepStats TrainOn(fsdp::FsdpEngine& e, int64_t seed, const fsdp::InjectedFault& f = {},
                        const std::function<bool(double)>& skip_if = {}) {
  e.InjectFault(f);
  EXPECT_TRUE(e.ForwardBackward(Batch(seed), 1.0, true).ok());
  auto s = e.Step({0.9, 0.95, 1e-8, 0.1}, 1e-2, 1.0, skip_if);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

// Every piece of state, concatenated (bit comparisons).
torch::Tensor State(const fsdp::FsdpEngine& e) {
  std::vector<torch::Tensor> all;
  for (const auto& p : e.StatePieces()) all.push_back(p.data.to(torch::kFloat32).clone());
  return torch::cat(all);
}

TEST(EngineGuard, AFaultyStepIsSkippedAndTheRunContinuesAsIfItHadNotBeen) {
  fsdp::InjectedFault nan_loss, nan_grad, spike;
  nan_loss.nan_loss = true;
  nan_grad.nan_grad = true;
  spike.grad_factor = 1e4;
  auto reference = TinyEngine(true);
  TrainOn(*reference, 1);
  TrainOn(*reference, 5);
  const torch::Tensor want = State(*reference);
  const auto spike_rule = [](double norm) { return norm > 1e3; };
  for (const auto& fault : {nan_loss, nan_grad, spike}) {
    auto e = TinyEngine(true);
    TrainOn(*e, 1, {}, spike_rule);
    const torch::Tensor before = State(*e);
    const fsdp::StepStats s = TrainOn(*e, 2, fault, spike_rule);
    EXPECT_TRUE(s.skipped);
    EXPECT_EQ(e->optimizer_step(), 1) << "a skipped step is not counted";
    EXPECT_TRUE(torch::equal(State(*e), before)) << "a skipped step changed the state";
    EXPECT_EQ(fault.grad_factor != 1, std::isfinite(s.grad_norm));
    EXPECT_FALSE(TrainOn(*e, 5, {}, spike_rule).skipped);
    EXPECT_TRUE(torch::equal(State(*e), want)) << "the gradients of the skipped step leaked";
    EXPECT_TRUE(e->CheckFinite().ok());
  }
}

TEST(EngineGuard, WithTheGuardOffANanIsAppliedAndCheckFiniteNamesIt) {
  fsdp::InjectedFault nan_loss;
  nan_loss.nan_loss = true;
  auto e = TinyEngine(false);
  TrainOn(*e, 1);
  const fsdp::StepStats s = TrainOn(*e, 2, nan_loss);
  EXPECT_FALSE(s.skipped);
  EXPECT_EQ(e->optimizer_step(), 2);
  const Status finite = e->CheckFinite();
  EXPECT_EQ(finite.code(), Status::Code::kCorruption);
  EXPECT_NE(finite.message().find("non-finite value in the master of unit"), std::string::npos)
      << finite.message();
}

TEST(EngineGuard, ACleanRunHasTheSameBitsWithTheGuardOnOrOff) {
  auto on = TinyEngine(true), off = TinyEngine(false);
  for (int64_t seed : {1, 2, 3}) {
    TrainOn(*on, seed);
    TrainOn(*off, seed);
  }
  EXPECT_TRUE(torch::equal(State(*on), State(*off)));
}

}  // namespace
}  // namespace ftrain::testing
