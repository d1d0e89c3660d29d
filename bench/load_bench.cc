// load_bench: one FSDP rank's memory while it takes its initial weights from a Hugging Face
// model directory (train.init=DIR), measured for one rank at a time: rank R of a full_shard
// world of W, whose shard group is a stand-in of that size (building the engine and loading
// its state never communicate, so the rank does exactly what it does in a job). Prints numbers;
// never passes or fails.
//   load_bench --config FILE --weights DIR --rank R --world W --mode sharded|full
//   sharded  the trainer's path: FsdpConfig::defer_init, then every master slice read with
//            SafetensorsCheckpoint::ReadRange (what train/base_model.cc does)
//   full     the path before it: LoadSafetensors into the whole fp32 model, then shard it
// Output: one JSON line with peak RSS (VmHWM), the FSDP state (PersistentBytes), the largest
// unit's fp32 bytes, bytes read from the files (/proc/self/io rchar) and seconds.
// Built with -DFTRAIN_LOAD_BENCH_FULL_ONLY it compiles against the tree before the sharded
// load existed (bench/load_bench.sh measures "before" on that unchanged build).
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "comm/collectives.h"
#include "core/config.h"
#include "fsdp/engine.h"
#include "model/llama.h"
#include "model/weights_io.h"

namespace {

using namespace ftrain;

// A shard group of `size` ranks that is never used for communication.
class StandInComm : public comm::Comm {
 public:
  StandInComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "none"; }
  std::unique_ptr<comm::Work> AllReduce(const at::Tensor&, comm::ReduceOp) override {
    return Never();
  }
  std::unique_ptr<comm::Work> AllGather(const at::Tensor&, const at::Tensor&) override {
    return Never();
  }
  std::unique_ptr<comm::Work> ReduceScatter(const at::Tensor&, const at::Tensor&,
                                            comm::ReduceOp) override {
    return Never();
  }
  std::unique_ptr<comm::Work> Broadcast(const at::Tensor&, int) override { return Never(); }
  std::unique_ptr<comm::Work> Barrier() override { return Never(); }

 private:
  std::unique_ptr<comm::Work> Never() {
    std::cerr << "load_bench: the engine communicated while loading\n";
    std::abort();
  }
  int rank_, size_;
  std::string name_ = "stand-in";
};

// A field of /proc/self/<file> ("VmHWM:" in status, "rchar:" in io), in its unit (kB, bytes).
uint64_t ProcField(const std::string& file, const std::string& key) {
  std::ifstream in("/proc/self/" + file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size()));
  }
  return 0;
}

Status Run(const std::string& config_path, const std::string& weights, int rank, int world,
           const std::string& mode) {
  FT_ASSIGN_OR_RETURN(Config config, Config::LoadFile(config_path));
  FT_ASSIGN_OR_RETURN(LlamaConfig cfg, LlamaConfig::FromConfig(config));
  const uint64_t rchar0 = ProcField("io", "rchar:");
  const auto t0 = std::chrono::steady_clock::now();
  StandInComm shard(rank, world);
  fsdp::FsdpGroups groups;
  groups.shard = &shard;
  groups.world_size = world;
  fsdp::FsdpConfig fc;
  model::LlamaModel model(cfg);
  std::unique_ptr<fsdp::FsdpEngine> engine;
  if (mode == "full") {
    FT_RETURN_IF_ERROR(model::LoadSafetensors(model, weights));
    FT_ASSIGN_OR_RETURN(engine, fsdp::FsdpEngine::Create(model, fc, groups));
  } else {
#ifdef FTRAIN_LOAD_BENCH_FULL_ONLY
    return Status::InvalidArgument("this build has only --mode full");
#else
    fc.defer_init = true;
    FT_ASSIGN_OR_RETURN(engine, fsdp::FsdpEngine::Create(model, fc, groups));
    FT_ASSIGN_OR_RETURN(auto ck, model::SafetensorsCheckpoint::Open(weights));
    FT_RETURN_IF_ERROR(engine->LoadState([&](const std::string& kind, const std::string& name,
                                             int64_t offset, int64_t, torch::Tensor dst) {
      if (kind != "master") {
        dst.zero_();
        return Status::Ok();
      }
      return ck->ReadRange(name, offset, dst);
    }));
#endif
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "{\"mode\":\"" << mode << "\",\"rank\":" << rank << ",\"world\":" << world
            << ",\"parameters\":" << engine->NumParameters()
            << ",\"peak_rss_bytes\":" << ProcField("status", "VmHWM:") * 1024
            << ",\"fsdp_state_bytes\":" << engine->PersistentBytes()
            << ",\"largest_unit_fp32_bytes\":" << cfg.LargestUnitParameters() * 4
            << ",\"bytes_read\":" << ProcField("io", "rchar:") - rchar0
            << ",\"seconds\":" << seconds << "}" << std::endl;
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, weights, mode = "sharded";
  int rank = 0, world = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--config") {
      config = value;
    } else if (flag == "--weights") {
      weights = value;
    } else if (flag == "--rank") {
      rank = std::stoi(value);
    } else if (flag == "--world") {
      world = std::stoi(value);
    } else if (flag == "--mode") {
      mode = value;
    }
  }
  if (config.empty() || weights.empty() || (mode != "sharded" && mode != "full") || rank < 0 ||
      rank >= world) {
    std::cerr << "usage: load_bench --config FILE --weights DIR --rank R --world W "
                 "--mode sharded|full\n";
    return 2;
  }
  torch::set_num_threads(1);
  ftrain::Status s = Run(config, weights, rank, world, mode);
  if (!s.ok()) {
    std::cerr << "load_bench: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
