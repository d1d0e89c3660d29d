// exact_accuracy_bench: how close dist.reduce = exact's gradient is to the true mean, per
// block (fsdp/exact.h), against an fp64 reference, next to the fp32 sum the float reduction
// does. One process: M micro-batches of random tokens through the model (InitWeights(seed)),
// each micro-batch's gradient flattened per FSDP unit as the engine does; then
//   reference  the fp64 sum of the M fp32 gradients / M
//   exact      digits accumulated micro-batch by micro-batch under each one's own bins
//              (what a rank sees slot by slot), and again in the reverse order in pairs: the
//              two must be bit-identical (the bench fails otherwise), converted to fp32
//   float      the fp32 sum in order / M
// Prints, for each: the worst error of any element relative to its block's largest |reference|
// and the worst relative error of any element within 2^-8 and 2^-16 of its block's largest,
// and of any non-zero element.
//   exact_accuracy_bench --config configs/tiny.cfg [--micro-batches 20] [--rows 4] [--seed 1]
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "fsdp/exact.h"
#include "model/llama.h"

namespace {

using namespace ftrain;
namespace exact = fsdp::exact;

struct Errors {
  double of_block_max = 0;  // max |x - ref| / max |ref in block|
  double within_8 = 0;      // max |x - ref| / |ref| for |ref| >= 2^-8 block max
  double within_16 = 0;     // ... >= 2^-16 block max
  double all = 0;           // ... any non-zero reference
};

void Measure(const torch::Tensor& x, const torch::Tensor& ref, Errors* e) {
  const int64_t n = ref.numel(), blocks = exact::Blocks(n);
  const torch::Tensor pad_ref =
      torch::constant_pad_nd(ref, {0, blocks * exact::kBlock - n}, 0).view({blocks, -1});
  const torch::Tensor pad_x =
      torch::constant_pad_nd(x.to(torch::kFloat64), {0, blocks * exact::kBlock - n}, 0)
          .view({blocks, -1});
  const torch::Tensor bmax = pad_ref.abs().amax(1, true).clamp_min(1e-300);
  const torch::Tensor err = (pad_x - pad_ref).abs();
  e->of_block_max = std::max(e->of_block_max, (err / bmax).max().item<double>());
  const torch::Tensor rel = err / pad_ref.abs().clamp_min(1e-300);
  auto within = [&](double f) {
    return rel.masked_select(pad_ref.abs().ge(bmax * f)).max().item<double>();
  };
  e->within_8 = std::max(e->within_8, within(std::ldexp(1.0, -8)));
  e->within_16 = std::max(e->within_16, within(std::ldexp(1.0, -16)));
  e->all = std::max(e->all, rel.masked_select(pad_ref.ne(0)).max().item<double>());
}

// The exact mean of `grads` (fp32 [numel] each), accumulated in `order` in groups of `group`.
torch::Tensor ExactMean(const std::vector<torch::Tensor>& grads, const std::vector<int>& order,
                        int group) {
  const int64_t n = grads[0].numel();
  const exact::ShardBlocks whole = exact::BlocksOf(0, n);
  torch::Tensor top, low, bins;
  for (size_t i = 0; i < order.size(); i += static_cast<size_t>(group)) {
    // One slot: its micro-batches share the slot's bins (the all-reduce MAX of the ranks').
    torch::Tensor slot_bins;
    for (size_t j = i; j < std::min(order.size(), i + group); ++j) {
      const torch::Tensor b = exact::TopBins(grads[static_cast<size_t>(order[j])]);
      slot_bins = slot_bins.defined() ? torch::maximum(slot_bins, b) : b;
    }
    for (size_t j = i; j < std::min(order.size(), i + group); ++j) {
      exact::Digits d = exact::ToDigits(grads[static_cast<size_t>(order[j])], slot_bins);
      if (!top.defined()) {
        top = d.top.clone();
        low = d.low.clone();
        bins = slot_bins.clone();
      } else {
        exact::Accumulate(top, low, bins, d.top, d.low, slot_bins, whole);
      }
    }
  }
  torch::Tensor out = torch::empty({n}, torch::kFloat32);
  exact::ToFloat(top, low, bins, whole, static_cast<double>(grads.size()), out);
  return out;
}

int Run(int argc, char** argv) {
  std::string config_path;
  int micro_batches = 20, rows = 4;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--config") config_path = argv[i + 1];
    if (a == "--micro-batches") micro_batches = std::atoi(argv[i + 1]);
    if (a == "--rows") rows = std::atoi(argv[i + 1]);
    if (a == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  auto config = Config::LoadFile(config_path);
  if (!config.ok()) return std::cerr << config.status().ToString() << "\n", 2;
  auto cfg = LlamaConfig::FromConfig(*config);
  if (!cfg.ok()) return std::cerr << cfg.status().ToString() << "\n", 2;
  torch::set_num_threads(1);
  model::LlamaModel model(*cfg);
  model->InitWeights(1234);
  std::vector<std::vector<std::string>> units{model->RootParamNames()};
  for (int l = 0; l < cfg->num_layers; ++l) units.push_back(model->LayerParamNames(l));
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : model->named_parameters()) params[p.key()] = p.value();
  // grads[unit][micro-batch]: fp32 [numel of the unit]
  std::vector<std::vector<torch::Tensor>> grads(units.size());
  torch::manual_seed(seed);
  for (int m = 0; m < micro_batches; ++m) {
    const torch::Tensor tokens =
        torch::randint(cfg->vocab_size, {rows, cfg->max_seq_len / 2 + 1}, torch::kInt64);
    model->zero_grad();
    torch::Tensor h = model->Embed(tokens.narrow(1, 0, tokens.size(1) - 1));
    for (int l = 0; l < cfg->num_layers; ++l) h = model->Layer(l, h);
    model->HeadLoss(h, tokens.narrow(1, 1, tokens.size(1) - 1)).backward();
    for (size_t u = 0; u < units.size(); ++u) {
      std::vector<torch::Tensor> flat;
      for (const auto& name : units[u]) flat.push_back(params[name].grad().reshape(-1));
      grads[u].push_back(torch::cat(flat).clone());
    }
  }
  std::vector<int> forward, backward;
  for (int m = 0; m < micro_batches; ++m) forward.push_back(m);
  for (int m = micro_batches - 1; m >= 0; --m) backward.push_back(m);
  Errors ex, fl;
  int64_t numel = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    torch::Tensor ref = torch::zeros_like(grads[u][0], torch::kFloat64);
    torch::Tensor f32 = torch::zeros_like(grads[u][0]);
    for (const auto& g : grads[u]) {
      ref += g.to(torch::kFloat64);
      f32 += g;
    }
    ref /= static_cast<double>(micro_batches);
    f32 /= static_cast<float>(micro_batches);
    const torch::Tensor a = ExactMean(grads[u], forward, 1);
    const torch::Tensor b = ExactMean(grads[u], backward, 2);
    if (!torch::equal(a, b)) {
      std::cerr << "exact_accuracy_bench: unit " << u << ": the two orders differ\n";
      return 1;
    }
    Measure(a, ref, &ex);
    Measure(f32, ref, &fl);
    numel += ref.numel();
  }
  std::cout << "{\"parameters\":" << numel << ",\"micro_batches\":" << micro_batches
            << ",\"block\":" << exact::kBlock << ",\"bin_bits\":" << exact::kBinBits
            << ",\"orders_identical\":true"
            << ",\"exact\":{\"of_block_max\":" << ex.of_block_max
            << ",\"rel_within_2^-8\":" << ex.within_8 << ",\"rel_within_2^-16\":" << ex.within_16
            << ",\"rel_any\":" << ex.all << "},\"float\":{\"of_block_max\":" << fl.of_block_max
            << ",\"rel_within_2^-8\":" << fl.within_8 << ",\"rel_within_2^-16\":" << fl.within_16
            << ",\"rel_any\":" << fl.all << "}}\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
