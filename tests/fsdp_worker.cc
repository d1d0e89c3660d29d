// Test helper: one rank of a small FSDP training run on synthetic data, for the equivalence,
// determinism and memory tests (run under `ftrain launch`, or alone as the single-process
// reference), and for bench/fsdp_bench.sh. Writes, on rank 0, OUT.json (per-step global mean
// loss with %.9g, grad norms, persistent bytes per rank, parameter count; and for benchmarks:
// rank 0's per-step step time, communication wait and bytes sent, every rank's peak RSS) and
// OUT.bin (final fp32 master weights of every parameter, in name order; --bin 0 skips it).
//
// usage: fsdp_worker --out PREFIX [--config configs/tiny.cfg] [--sharding S] [--steps N]
//        [--micro-batch B] [--accum K] [--clip C] [--dtype float32|bfloat16]
//        [--reduce-dtype float32|bfloat16] [--act-ckpt 0|1] [--ac-every N] [--prefetch 0|1] [--lr
//        X]
//        [--seq-len T] [--bin 0|1] [--track-alloc 0|1]
// --track-alloc 1 counts every CPU tensor storage (tests/counting_allocator.h) and reports each
// rank's peak over steps 2.. (step 1 allocates the optimizer state): what a GPU's allocator
// peak is, to hold against `ftrain plan`'s total per GPU.
#include <ATen/record_function.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "comm/context.h"
#include "core/config.h"
#include "counting_allocator.h"
#include "formats/llama_config.h"
#include "fsdp/engine.h"
#include "model/llama.h"

using namespace ftrain;

namespace {

// Token t of global sample g: a fixed function, so any rank layout sees the same samples.
torch::Tensor Batch(int64_t first_sample, int64_t count, int64_t seq_plus_one, int64_t vocab) {
  auto g = torch::arange(first_sample, first_sample + count, torch::kInt64).view({count, 1});
  auto t = torch::arange(0, seq_plus_one, torch::kInt64).view({1, seq_plus_one});
  return (g * 7919 + t * 104729 + (g * t).remainder(13) * 31).remainder(vocab);
}

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
uint64_t StatusBytes(const char* field) {  // "VmHWM:" (peak RSS), "VmRSS:" (now)
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::strlen(field))) * 1024;
  }
  return 0;
}
uint64_t PeakRssBytes() { return StatusBytes("VmHWM:"); }

// Restarts VmHWM at the current RSS (Linux >= 4.0), so the peak of the steps alone is seen.
void ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // if this fails, the peak includes start-up: acceptable for a benchmark
}

// Every rank's value, indexed by rank (collective).
StatusOr<std::vector<double>> AllRanks(comm::Comm& comm, double v) {
  torch::Tensor t = torch::zeros({comm.size()}, torch::kFloat64);
  t[comm.rank()] = v;
  FT_RETURN_IF_ERROR(comm.AllReduce(t, comm::ReduceOp::kSum)->Wait());
  std::vector<double> out(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) out[static_cast<size_t>(r)] = t[r].item<double>();
  return out;
}

std::string JoinNumbers(const std::vector<double>& v) {
  std::string out;
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.9g", i ? "," : "", v[i]);
    out += buf;
  }
  return out;
}

// The innermost profiler range (fsdp/forward layers.3, fsdp/optimizer...) open on this thread:
// where a --track-alloc peak was reached.
thread_local std::vector<std::string> t_ranges;
std::string InnermostRange() { return t_ranges.empty() ? "outside any range" : t_ranges.back(); }
void TrackRanges() {
  at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            t_ranges.emplace_back(fn.name());
            return nullptr;
          },
          [](const at::RecordFunction&, at::ObserverContext*) {
            if (!t_ranges.empty()) t_ranges.pop_back();
          })
          .scopes({at::RecordScope::USER_SCOPE}));
}

int Fail(const Status& s) {
  std::fprintf(stderr, "fsdp_worker: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

// The engine's own accounting, under the names of `ftrain plan --json`'s strategy rows.
std::string MemoryJson(const fsdp::MemoryAccount& m) {
  std::ostringstream o;
  o << "{\"weights_bytes\":" << m.weights_bytes << ",\"grads_bytes\":" << m.grads_bytes
    << ",\"master_bytes\":" << m.master_bytes << ",\"moments_bytes\":" << m.moments_bytes
    << ",\"gathered_bytes\":" << m.gathered_bytes
    << ",\"grad_buffer_bytes\":" << m.grad_buffer_bytes << "}";
  return o.str();
}

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {
      {"--config", std::string(FTRAIN_SOURCE_DIR) + "/configs/tiny.cfg"},
      {"--sharding", "full_shard"},
      {"--steps", "20"},
      {"--micro-batch", "2"},
      {"--accum", "1"},
      {"--clip", "0"},
      {"--dtype", "float32"},
      {"--reduce-dtype", "float32"},
      {"--act-ckpt", "1"},
      {"--ac-every", "1"},
      {"--prefetch", "1"},
      {"--lr", "0.003"},
      {"--out", ""},
      {"--seq-len", "32"},
      {"--bin", "1"},
      {"--init", "full"},  // full: InitWeights then Create; sharded: FsdpConfig::init_seed
      {"--track-alloc", "0"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!a.count(argv[i])) {
      std::fprintf(stderr, "fsdp_worker: unknown flag %s\n", argv[i]);
      return 2;
    }
    a[argv[i]] = argv[i + 1];
  }
  testing::CountingCpuAllocator* alloc = nullptr;
  if (a["--track-alloc"] == "1") {
    alloc = &testing::CountingCpuAllocator::Install();
    alloc->set_where(&InnermostRange);
    TrackRanges();
  }
  double alloc_peak = 0;  // bytes of tensor storage, steps 2..
  std::string alloc_peak_where;
  torch::set_num_threads(1);
  auto cfg_file = Config::LoadFile(a["--config"]);
  if (!cfg_file.ok()) return Fail(cfg_file.status());
  auto mcfg = LlamaConfig::FromConfig(*cfg_file);
  if (!mcfg.ok()) return Fail(mcfg.status());
  auto ctx = comm::DistContext::Init(comm::DistOptions());
  if (!ctx.ok()) return Fail(ctx.status());
  const auto& w = (*ctx)->world();

  auto sharding = ParseSharding(a["--sharding"]);
  if (!sharding.ok()) return Fail(sharding.status());
  fsdp::FsdpConfig fc;
  fc.sharding = *sharding;
  fc.param_dtype = a["--dtype"] == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  fc.reduce_dtype = a["--reduce-dtype"] == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  fc.activation_checkpointing = a["--act-ckpt"] == "1";
  fc.ac_every = std::stoi(a["--ac-every"]);
  fc.prefetch = a["--prefetch"] == "1";
  fsdp::FsdpGroups groups = fsdp::GroupsFor(fc.sharding, (*ctx)->world_comm(), (*ctx)->intra_node(),
                                            (*ctx)->inter_node());
  const uint64_t rss_before_model = StatusBytes("VmRSS:");
  model::LlamaModel m(*mcfg);
  if (a["--init"] == "sharded") {
    fc.init_seed = 1234;  // the trainer's way: no rank ever holds the whole model
  } else {
    m->InitWeights(1234);
  }
  auto engine = fsdp::FsdpEngine::Create(m, fc, groups);
  if (!engine.ok()) return Fail(engine.status());
  const uint64_t startup_peak_rss = PeakRssBytes();
  ResetPeakRss();
  const int64_t steps = std::stoll(a["--steps"]), B = std::stoll(a["--micro-batch"]);
  const int64_t K = std::stoll(a["--accum"]), T1 = std::stoll(a["--seq-len"]) + 1;
  const double clip = std::stod(a["--clip"]), lr = std::stod(a["--lr"]);
  fsdp::AdamWConfig adamw;
  std::string losses, norms;
  std::vector<double> step_times, comm_waits, comm_bytes;
  for (int64_t s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (alloc) alloc->ResetPeak();
    for (int64_t k = 0; k < K; ++k) {
      const int64_t first = ((s * K + k) * w.world_size + w.rank) * B;
      auto loss =
          (*engine)->ForwardBackward(Batch(first, B, T1, mcfg->vocab_size), 1.0 / K, k == K - 1);
      if (!loss.ok()) return Fail(loss.status());
    }
    auto stats = (*engine)->Step(adamw, lr, clip);
    if (!stats.ok()) return Fail(stats.status());
    const double loss_sum = stats->loss_sum;
    if (alloc && s > 0 && alloc->peak() > alloc_peak) {
      alloc_peak = static_cast<double>(alloc->peak());
      alloc_peak_where = alloc->peak_where();
    }
    step_times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    comm_waits.push_back(stats->comm_wait_s);
    comm_bytes.push_back(static_cast<double>(stats->comm_bytes));
    torch::Tensor l = torch::full({1}, loss_sum / K, torch::kFloat64);
    Status st = (*ctx)->world_comm().AllReduce(l, comm::ReduceOp::kAvg)->Wait();
    if (!st.ok()) return Fail(st);
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%.9g", s ? "," : "", static_cast<float>(l.item<double>()));
    losses += buf;
    std::snprintf(buf, sizeof(buf), "%s%.9g", s ? "," : "", stats->grad_norm);
    norms += buf;
  }
  // Peaks before GatherFullParameters, which materializes the whole fp32 model.
  auto peak_steps = AllRanks((*ctx)->world_comm(), static_cast<double>(PeakRssBytes()));
  if (!peak_steps.ok()) return Fail(peak_steps.status());
  auto peak_startup = AllRanks((*ctx)->world_comm(), static_cast<double>(startup_peak_rss));
  if (!peak_startup.ok()) return Fail(peak_startup.status());
  auto before_model = AllRanks((*ctx)->world_comm(), static_cast<double>(rss_before_model));
  if (!before_model.ok()) return Fail(before_model.status());
  auto working = AllRanks((*ctx)->world_comm(), alloc_peak);
  if (!working.ok()) return Fail(working.status());
  auto params = (*engine)->GatherFullParameters();
  if (!params.ok()) return Fail(params.status());
  if (w.rank == 0 && !a["--out"].empty()) {
    if (a["--bin"] == "1") {
      std::ofstream bin(a["--out"] + ".bin", std::ios::binary);
      std::map<std::string, torch::Tensor> sorted(params->begin(), params->end());
      for (const auto& [name, t] : sorted) {
        auto c = t.contiguous();
        bin.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
      }
    }
    std::ofstream js(a["--out"] + ".json");
    js << "{\"losses\":[" << losses << "],\"grad_norms\":[" << norms
       << "],\"persistent_bytes\":" << (*engine)->PersistentBytes()
       << ",\"params\":" << (*engine)->NumParameters() << ",\"world_size\":" << w.world_size
       << ",\"sharding\":\"" << a["--sharding"] << "\",\"prefetch\":" << a["--prefetch"]
       << ",\"step_time_s\":[" << JoinNumbers(step_times) << "],\"comm_wait_s\":["
       << JoinNumbers(comm_waits) << "],\"comm_bytes\":[" << JoinNumbers(comm_bytes)
       << "],\"peak_rss_steps_bytes\":[" << JoinNumbers(*peak_steps)
       << "],\"peak_rss_startup_bytes\":[" << JoinNumbers(*peak_startup)
       << "],\"rss_before_model_bytes\":[" << JoinNumbers(*before_model)
       << "],\"alloc_peak_steps_bytes\":[" << JoinNumbers(*working) << "],\"alloc_peak_where\":\""
       << alloc_peak_where << "\""
       << ",\"memory\":" << MemoryJson((*engine)->Memory()) << "}\n";
  }
  return 0;
}
