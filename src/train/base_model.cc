// Base weights into the FSDP engine range by range; the carried Hugging Face files.
#include "train/base_model.h"

#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "core/log.h"
#include "model/weights_io.h"

namespace ftrain::train {
namespace {

using Clock = std::chrono::steady_clock;

// Everything but an I/O error is the input's fault: a restart cannot help (exit 2).
Status AsInputError(const Status& s) {
  if (s.ok() || s.code() == Status::Code::kIOError) return s;
  return Status::InvalidArgument(s.message());
}

// This rank's part of LoadBaseWeights; *read / *total: bytes read here / in the files.
Status LoadOwnShards(const std::string& init, fsdp::FsdpEngine& engine, uint64_t* read,
                     uint64_t* total) {
  FT_ASSIGN_OR_RETURN(auto ck, model::SafetensorsCheckpoint::Open(init));
  std::vector<model::TensorSpec> specs;
  for (auto& [name, shape] : engine.ParameterShapes()) specs.push_back({name, shape});
  FT_RETURN_IF_ERROR(ck->Check(specs));
  Status s = engine.LoadState([&](const std::string& kind, const std::string& name, int64_t offset,
                                  int64_t length, torch::Tensor dst) -> Status {
    (void)length;  // dst has exactly `length` elements
    if (kind != "master") {
      dst.zero_();  // AdamW moments start at zero
      return Status::Ok();
    }
    return ck->ReadRange(name, offset, dst);
  });
  *read = ck->bytes_read();
  *total = ck->total_bytes();
  return s;
}

StatusOr<model::HfFiles> HfFilesOfCheckpoint(const std::string& dir, Env* env) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointReader> reader,
                      ckpt::CheckpointReader::Open(dir, env));
  model::HfFiles files;
  for (const auto& b : reader->manifest().blobs) {
    if (b.group != model::kHfStateGroup) continue;
    FT_ASSIGN_OR_RETURN(files.bytes[b.name],
                        reader->ReadBlob(b.group, b.name, 0, reader->manifest().meta.world_size));
    files.sources[b.name] = dir;
  }
  return files;
}

}  // namespace

Status LoadBaseWeights(const std::string& init, comm::DistContext& ctx, fsdp::FsdpEngine& engine) {
  const int rank = ctx.world().rank;
  const auto t0 = Clock::now();
  uint64_t read = 0, total = 0;
  Status s = AsInputError(LoadOwnShards(init, engine, &read, &total));
  if (s.ok()) {
    FT_LOG(Info) << "train.init: rank " << rank << " read " << read << " of " << total
                 << " bytes of the base model (its own shards) from " << init << " in "
                 << std::chrono::duration<double>(Clock::now() - t0).count() << " s";
  } else {
    FT_LOG(Error) << "train.init: rank " << rank << ": " << s.message();
  }
  torch::Tensor vote =
      torch::tensor({s.ok() ? 0.0 : 1.0, !s.ok() && s.code() != Status::Code::kIOError ? 1.0 : 0.0},
                    torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(vote, comm::ReduceOp::kMax)->Wait());
  if (!s.ok()) return s.Annotate("train.init");
  if (vote[0].item<double>() == 0) return Status::Ok();
  const std::string why = "another rank could not load train.init '" + init + "' (see its log)";
  return vote[1].item<double>() != 0 ? Status::InvalidArgument(why) : Status::IOError(why);
}

StatusOr<model::HfFiles> HfFilesForRun(const TrainConfig& cfg, const DataTokenizer& data,
                                       Env* env) {
  std::string dir = cfg.train.resume == "none" ? "" : cfg.train.resume;
  if (cfg.train.resume == "auto") {
    ckpt::CheckpointStore store(cfg.ckpt.root, env);
    auto latest = store.Latest();
    dir = latest.ok() && latest->has_value() ? (*latest)->path : "";
  }
  if (!dir.empty()) {
    auto carried = HfFilesOfCheckpoint(dir, env);
    if (carried.ok() && !carried->empty()) return carried;
    if (!carried.ok()) {
      FT_LOG(Warning) << "cannot take the Hugging Face files from " << dir << ": "
                      << carried.status().message() << "; collecting them again";
    }
  }
  // The base directory: model.hf's when it is set (its config.json is the model's), else
  // train.init's.
  const std::string& hf_config = cfg.model.hf_config_path;
  const bool from_hf = !hf_config.empty();
  const std::string base_dir = model::HfBaseDir(from_hf ? hf_config : cfg.train.init, env);
  auto collected =
      model::CollectHfFiles(base_dir, data.path, cfg.model, data.bos_id, data.eos_id, env);
  if (!collected.ok()) return collected.status().Annotate(from_hf ? "model.hf" : "train.init");
  return collected;
}

StatusOr<std::string> ShareHfSources(comm::DistContext& ctx, const model::HfFiles& files) {
  std::string text = ctx.world().rank == 0 ? nlohmann::json(files.sources).dump() : "";
  torch::Tensor size = torch::tensor({static_cast<double>(text.size())}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(size, 0)->Wait());
  torch::Tensor bytes = torch::zeros({static_cast<int64_t>(size.item<double>())}, torch::kUInt8);
  if (ctx.world().rank == 0 && !text.empty()) {
    std::memcpy(bytes.data_ptr(), text.data(), text.size());
  }
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(bytes, 0)->Wait());
  return std::string(static_cast<const char*>(bytes.data_ptr()),
                     static_cast<size_t>(bytes.numel()));
}

}  // namespace ftrain::train
