// Test helper: one rank of a small FSDP training run on synthetic data, for the equivalence,
// determinism and memory tests (run under `ftrain launch`, or alone as the single-process
// reference). Writes, on rank 0, OUT.json (per-step global mean loss with %.9g, grad norms,
// persistent bytes per rank, parameter count) and OUT.bin (final fp32 master weights of every
// parameter, in name order).
//
// usage: fsdp_worker --out PREFIX [--config configs/tiny.cfg] [--sharding S] [--steps N]
//        [--micro-batch B] [--accum K] [--clip C] [--dtype float32|bfloat16]
//        [--reduce-dtype float32|bfloat16] [--act-ckpt 0|1] [--prefetch 0|1] [--lr X]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "core/config.h"
#include "dist/dist.h"
#include "fsdp/engine.h"
#include "model/llama.h"
#include "model/llama_config.h"

using namespace ftrain;

namespace {

// Token t of global sample g: a fixed function, so any rank layout sees the same samples.
torch::Tensor Batch(int64_t first_sample, int64_t count, int64_t seq_plus_one, int64_t vocab) {
  auto g = torch::arange(first_sample, first_sample + count, torch::kInt64).view({count, 1});
  auto t = torch::arange(0, seq_plus_one, torch::kInt64).view({1, seq_plus_one});
  return (g * 7919 + t * 104729 + (g * t).remainder(13) * 31).remainder(vocab);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "fsdp_worker: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {
      {"--config", std::string(FTRAIN_SOURCE_DIR) + "/configs/tiny.cfg"},
      {"--sharding", "full_shard"}, {"--steps", "20"}, {"--micro-batch", "2"}, {"--accum", "1"},
      {"--clip", "0"}, {"--dtype", "float32"}, {"--reduce-dtype", "float32"},
      {"--act-ckpt", "1"}, {"--prefetch", "1"}, {"--lr", "0.003"}, {"--out", ""},
      {"--seq-len", "32"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!a.count(argv[i])) {
      std::fprintf(stderr, "fsdp_worker: unknown flag %s\n", argv[i]);
      return 2;
    }
    a[argv[i]] = argv[i + 1];
  }
  torch::set_num_threads(1);
  auto cfg_file = Config::LoadFile(a["--config"]);
  if (!cfg_file.ok()) return Fail(cfg_file.status());
  auto mcfg = LlamaConfig::FromConfig(*cfg_file);
  if (!mcfg.ok()) return Fail(mcfg.status());
  auto ctx = dist::DistContext::Init(dist::DistOptions());
  if (!ctx.ok()) return Fail(ctx.status());
  const auto& w = (*ctx)->world();

  auto sharding = fsdp::ParseSharding(a["--sharding"]);
  if (!sharding.ok()) return Fail(sharding.status());
  fsdp::FsdpConfig fc;
  fc.sharding = *sharding;
  fc.param_dtype = a["--dtype"] == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  fc.reduce_dtype = a["--reduce-dtype"] == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  fc.activation_checkpointing = a["--act-ckpt"] == "1";
  fc.prefetch = a["--prefetch"] == "1";
  fsdp::FsdpGroups groups;
  groups.world_size = w.world_size;
  switch (fc.sharding) {
    case fsdp::Sharding::kFullShard:
    case fsdp::Sharding::kShardGradOp:
      groups.shard = &(*ctx)->world_comm();
      break;
    case fsdp::Sharding::kNoShard:
      groups.replicate = &(*ctx)->world_comm();
      break;
    case fsdp::Sharding::kHybridShard:
      groups.shard = &(*ctx)->intra_node();
      groups.replicate = &(*ctx)->inter_node();
      break;
  }
  model::LlamaModel m(*mcfg);
  m->InitWeights(1234);
  auto engine = fsdp::FsdpEngine::Create(m, fc, groups);
  if (!engine.ok()) return Fail(engine.status());
  const int64_t steps = std::stoll(a["--steps"]), B = std::stoll(a["--micro-batch"]);
  const int64_t K = std::stoll(a["--accum"]), T1 = std::stoll(a["--seq-len"]) + 1;
  const double clip = std::stod(a["--clip"]), lr = std::stod(a["--lr"]);
  fsdp::AdamWConfig adamw;
  std::string losses, norms;
  for (int64_t s = 0; s < steps; ++s) {
    double loss_sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t first = ((s * K + k) * w.world_size + w.rank) * B;
      auto loss = (*engine)->ForwardBackward(Batch(first, B, T1, mcfg->vocab_size), 1.0 / K,
                                             k == K - 1);
      if (!loss.ok()) return Fail(loss.status());
      loss_sum += *loss;
    }
    auto stats = (*engine)->Step(adamw, lr, clip);
    if (!stats.ok()) return Fail(stats.status());
    torch::Tensor l = torch::full({1}, loss_sum / K, torch::kFloat64);
    Status st = (*ctx)->world_comm().AllReduce(l, dist::ReduceOp::kAvg)->Wait();
    if (!st.ok()) return Fail(st);
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%.9g", s ? "," : "", static_cast<float>(l.item<double>()));
    losses += buf;
    std::snprintf(buf, sizeof(buf), "%s%.9g", s ? "," : "", stats->grad_norm);
    norms += buf;
  }
  auto params = (*engine)->GatherFullParameters();
  if (!params.ok()) return Fail(params.status());
  if (w.rank == 0 && !a["--out"].empty()) {
    std::ofstream bin(a["--out"] + ".bin", std::ios::binary);
    std::map<std::string, torch::Tensor> sorted(params->begin(), params->end());
    for (const auto& [name, t] : sorted) {
      auto c = t.contiguous();
      bin.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    }
    std::ofstream js(a["--out"] + ".json");
    js << "{\"losses\":[" << losses << "],\"grad_norms\":[" << norms
       << "],\"persistent_bytes\":" << (*engine)->PersistentBytes()
       << ",\"params\":" << (*engine)->NumParameters() << ",\"world_size\":" << w.world_size
       << "}\n";
  }
  return 0;
}
