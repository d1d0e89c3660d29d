// The FSDP engine in one process (no communication): what it allocates. A model allocated only
// for its shapes under NoUninitializedFill leaves no page resident even with deterministic
// mode's NaN fill on (what a GPU run pins), while the same allocation without the guard
// touches every page.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
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

}  // namespace
}  // namespace ftrain::testing
