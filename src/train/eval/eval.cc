// RunEval: the device and the world (as `ftrain train` starts them), the FSDP engine over the
// model, this rank's shards of the weights, then the held-out loss of train/eval/eval_loop.h.
// The whole tensor set is checked against the model (names, shapes, dtypes) before anything is
// read, so a wrong model config fails with one line naming the tensor.
#include "train/eval/eval.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <set>
#include <vector>

#include "ckpt/reader.h"
#include "ckpt/tools.h"
#include "comm/context.h"
#include "core/env.h"
#include "fsdp/engine.h"
#include "model/llama.h"
#include "model/weights_io.h"
#include "train/device/device.h"
#include "train/engine_builder.h"
#include "train/eval/eval_loop.h"

namespace ftrain::train {
namespace {

// NotFound means "the path the user gave is not there": a usage error (exit 2).
Status AsUsage(const Status& s, const std::string& what) {
  if (s.ok()) return s;
  if (s.IsNotFound()) return Status::InvalidArgument(what + ": " + s.message());
  return s.Annotate(what);
}

// Checks checkpoint `m`'s tensors of `kind` against the engine's parameters: every one there
// with its shape, float32 or bfloat16, and no other.
Status CheckCheckpointTensors(const ckpt::Manifest& m, const std::string& dir,
                              const std::string& kind, const fsdp::FsdpEngine& engine) {
  std::set<std::string> wanted;
  for (const auto& [name, shape] : engine.ParameterShapes()) {
    wanted.insert(name);
    const ckpt::ManifestTensor* t = m.FindTensor(kind, name);
    if (t == nullptr) {
      return Status::InvalidArgument("checkpoint '" + dir + "' has no " + kind + " tensor " + name +
                                     ": it was written for another model (check "
                                     "[model] in the config)");
    }
    if (t->shape != shape) {
      return Status::InvalidArgument("checkpoint '" + dir + "': " + kind + " tensor " + name +
                                     " has shape " + model::ShapeString(t->shape) +
                                     " but the model config wants " + model::ShapeString(shape));
    }
    if (t->dtype != ckpt::DType::kFloat32 && t->dtype != ckpt::DType::kBFloat16) {
      return Status::InvalidArgument("checkpoint '" + dir + "': " + kind + " tensor " + name +
                                     " is " + ckpt::DTypeName(t->dtype) +
                                     ", not float32 or bfloat16");
    }
  }
  for (const auto& t : m.tensors) {
    if (t.kind == kind && !wanted.count(t.name)) {
      return Status::InvalidArgument("checkpoint '" + dir + "' has " + kind + " tensor " + t.name +
                                     " that the model config does not have (check [model])");
    }
  }
  return Status::Ok();
}

// This rank's master shards from checkpoint `dir` (any world size): its "master" (fp32)
// ranges, or its "model" (bf16) ones when the checkpoint holds no master weights. The AdamW
// moments are not read (zero).
Status LoadFromCheckpoint(fsdp::FsdpEngine& engine, const std::string& dir, EvalResult* result,
                          Env* env) {
  auto opened = ckpt::CheckpointReader::Open(dir, env);
  if (!opened.ok()) return AsUsage(opened.status(), "--weights '" + dir + "'");
  ckpt::CheckpointReader& reader = **opened;
  const ckpt::Manifest& m = reader.manifest();
  const auto shapes = engine.ParameterShapes();
  const std::string kind =
      m.FindTensor("master", shapes.front().first) == nullptr ? "model" : "master";
  FT_RETURN_IF_ERROR(CheckCheckpointTensors(m, dir, kind, engine));
  FT_RETURN_IF_ERROR(
      engine.LoadState([&](const std::string& k, const std::string& name, int64_t offset,
                           int64_t length, torch::Tensor dst) -> Status {
        if (k != "master") {
          dst.zero_();
          return Status::Ok();
        }
        const ckpt::ManifestTensor* t = m.FindTensor(kind, name);
        const auto type = t->dtype == ckpt::DType::kFloat32 ? torch::kFloat32 : torch::kBFloat16;
        torch::Tensor host = torch::empty({length}, type);
        FT_RETURN_IF_ERROR(reader.ReadTensorRange(kind, name, offset, length, host.data_ptr()));
        dst.copy_(host);
        return Status::Ok();
      }));
  result->weights = dir;
  result->source = kind == "master" ? "checkpoint master (fp32)" : "checkpoint model (bf16)";
  result->step = m.meta.step;
  return Status::Ok();
}

// This rank's master shards from safetensors (a file, an index or a model directory).
Status LoadFromSafetensors(fsdp::FsdpEngine& engine, const std::string& path, EvalResult* result) {
  const std::string what = "--weights '" + path + "'";
  auto ck = model::SafetensorsCheckpoint::Open(path);
  if (!ck.ok()) return AsUsage(ck.status(), what);
  std::vector<model::TensorSpec> specs;
  for (auto& [name, shape] : engine.ParameterShapes()) specs.push_back({name, shape});
  Status checked = (*ck)->Check(specs);
  if (!checked.ok()) {
    if (checked.code() == Status::Code::kIOError || checked.IsCorruption()) {
      return checked.Annotate(what);
    }
    return Status::InvalidArgument(what + ": " + checked.message());
  }
  FT_RETURN_IF_ERROR(AsUsage(engine.LoadState([&](const std::string& kind, const std::string& name,
                                                  int64_t offset, int64_t, torch::Tensor dst) {
    if (kind != "master") {
      dst.zero_();
      return Status::Ok();
    }
    return (*ck)->ReadRange(name, offset, dst);
  }),
                             what));
  result->weights = (*ck)->path();
  result->source = "safetensors";
  return Status::Ok();
}

Status LoadWeights(fsdp::FsdpEngine& engine, const std::string& path, EvalResult* result,
                   Env* env) {
  if (path.empty()) return Status::InvalidArgument("--weights PATH is required");
  if (!env->FileExists(path)) {
    return Status::InvalidArgument("--weights '" + path +
                                   "' does not exist (want a *.safetensors file, a "
                                   "model.safetensors.index.json, or a checkpoint directory)");
  }
  if (env->IsDirectory(path)) {
    // A Hugging Face model directory: its sharded index, else its single file.
    for (const char* name : {"model.safetensors.index.json", "model.safetensors"}) {
      if (env->FileExists(path + "/" + name)) return LoadFromSafetensors(engine, path, result);
    }
    auto dir = ckpt::ResolveCheckpointDir(path, env);
    if (!dir.ok()) return AsUsage(dir.status(), "--weights");
    return LoadFromCheckpoint(engine, *dir, result, env);
  }
  return LoadFromSafetensors(engine, path, result);
}

// Every rank learns whether every rank loaded; the failing rank keeps its own message.
Status AgreeLoaded(comm::DistContext& ctx, const Status& s) {
  torch::Tensor vote = torch::tensor(
      {s.ok() ? 0.0 : 1.0, !s.ok() && !s.IsInvalidArgument() ? 1.0 : 0.0}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(vote, comm::ReduceOp::kMax)->Wait());
  if (!s.ok()) return s;
  if (vote[0].item<double>() == 0) return Status::Ok();
  const std::string why = "another rank could not load --weights (see its output)";
  return vote[1].item<double>() != 0 ? Status::IOError(why) : Status::InvalidArgument(why);
}

// The device and the world, as `ftrain train` starts them (one rank per GPU on CUDA).
struct World {
  DeviceChoice dev;
  std::unique_ptr<comm::DistContext> ctx;
};
StatusOr<World> StartWorld(const TrainConfig& cfg) {
  World w;
  FT_ASSIGN_OR_RETURN(w.dev, ChooseDevice(cfg.train.device, 0));
  if (w.dev.device.is_cuda()) PinDeterministicMathModes();
  torch::set_num_threads(static_cast<int>(cfg.train.threads));
  comm::DistOptions dopts;
  dopts.backend = cfg.dist.backend;
  dopts.rdzv_timeout_s = static_cast<int>(cfg.dist.rdzv_timeout_s);
  dopts.cuda_device = w.dev.cuda_index;
  dopts.op_timeout_s = static_cast<int>(cfg.dist.timeout_s);
  FT_ASSIGN_OR_RETURN(dopts, comm::DistOptionsFromEnv(dopts));
  FT_ASSIGN_OR_RETURN(w.ctx, comm::DistContext::Init(dopts));
  if (w.dev.device.is_cuda()) {
    FT_ASSIGN_OR_RETURN(w.dev, ChooseDevice(cfg.train.device, w.ctx->world().local_world_size));
  }
  return w;
}

}  // namespace

StatusOr<EvalResult> RunEval(const EvalOptions& o) {
  if (o.batches <= 0) return Status::InvalidArgument("--batches must be > 0");
  if (o.env == nullptr) return Status::InvalidArgument("EvalOptions.env is not set");
  const TrainConfig& cfg = o.config;
  EvalResult result;
  try {
    FT_ASSIGN_OR_RETURN(World w, StartWorld(cfg));
    result.rank = w.ctx->world().rank;
    result.ranks = w.ctx->world().world_size;
    result.device = w.dev.description;
    result.dtype = PrecisionName(cfg.train.param_dtype);
    FT_ASSIGN_OR_RETURN(std::unique_ptr<fsdp::FsdpEngine> engine,
                        BuildEngine(cfg, *w.ctx, w.dev, EngineUse::kEval));
    FT_RETURN_IF_ERROR(AgreeLoaded(*w.ctx, LoadWeights(*engine, o.weights, &result, o.env)));
    HeldOutOptions ho;
    ho.env = o.env;
    ho.source = cfg.data.path;
    ho.seed = static_cast<uint64_t>(cfg.train.seed);
    ho.batches = o.batches;
    ho.micro_batch = cfg.train.micro_batch;
    ho.max_seq_len = cfg.model.max_seq_len;
    ho.what = "--data";
    FT_ASSIGN_OR_RETURN(HeldOutResult r, HeldOutLoss(*engine, *w.ctx, ho));
    result.loss = r.loss;
    result.batches = r.batches;
    result.tokens = r.tokens;
    result.seconds = r.seconds;
    result.perplexity = std::exp(static_cast<double>(result.loss));
  } catch (const StatusError& e) {
    // The model reports bad input (e.g. a token id >= vocab_size) by throwing.
    return e.status().Annotate("eval");
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("eval: LibTorch: ") + e.what_without_backtrace());
  }
  return result;
}

}  // namespace ftrain::train
