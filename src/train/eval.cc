// RunEval: load weights into an unsharded LlamaModel, stream N micro-batches, average the loss.
// The whole tensor set is checked against the model (names, shapes, dtypes) before anything is
// read, so a wrong model config fails with one line naming the tensor.
#include "train/eval.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "ckpt/reader.h"
#include "ckpt/tools.h"
#include "core/env.h"
#include "data/reader.h"
#include "model/llama.h"
#include "model/weights_io.h"

namespace ftrain::train {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// NotFound means "the path the user gave is not there": a usage error (exit 2).
Status AsUsage(const Status& s, const std::string& what) {
  if (s.ok()) return s;
  if (s.IsNotFound()) return Status::InvalidArgument(what + ": " + s.message());
  return s.Annotate(what);
}

// Fills every parameter of `model` from checkpoint `dir`: "master" (fp32) tensors, or "model"
// (bf16) ones when the checkpoint holds no master weights.
Status LoadFromCheckpoint(model::LlamaModel& model, const std::string& dir, EvalResult* result) {
  auto opened = ckpt::CheckpointReader::Open(dir);
  if (!opened.ok()) return AsUsage(opened.status(), "--weights '" + dir + "'");
  ckpt::CheckpointReader& reader = **opened;
  const ckpt::Manifest& m = reader.manifest();
  std::string kind = "master";
  if (m.FindTensor("master", model->RootParamNames().front()) == nullptr) kind = "model";
  const std::vector<model::TensorSpec> specs = model::LlamaParamSpecs(model->config());
  std::set<std::string> wanted;
  for (const auto& spec : specs) {
    wanted.insert(spec.name);
    const ckpt::ManifestTensor* t = m.FindTensor(kind, spec.name);
    if (t == nullptr) {
      return Status::InvalidArgument("checkpoint '" + dir + "' has no " + kind + " tensor " +
                                     spec.name +
                                     ": it was written for another model (check "
                                     "[model] in the config)");
    }
    if (t->shape != spec.shape) {
      return Status::InvalidArgument("checkpoint '" + dir + "': " + kind + " tensor " + spec.name +
                                     " has shape " + ShapeText(t->shape) +
                                     " but the model config wants " + ShapeText(spec.shape));
    }
    if (t->dtype != ckpt::DType::kFloat32 && t->dtype != ckpt::DType::kBFloat16) {
      return Status::InvalidArgument("checkpoint '" + dir + "': " + kind + " tensor " + spec.name +
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
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  for (const auto& spec : specs) {
    const ckpt::ManifestTensor* t = m.FindTensor(kind, spec.name);
    std::vector<uint8_t> raw;
    FT_RETURN_IF_ERROR(reader.ReadTensor(kind, spec.name, &raw));
    const auto type = t->dtype == ckpt::DType::kFloat32 ? torch::kFloat32 : torch::kBFloat16;
    torch::Tensor src = torch::from_blob(raw.data(), spec.shape, type);
    if (static_cast<size_t>(src.nbytes()) != raw.size()) {
      return Status::Corruption("checkpoint '" + dir + "': " + kind + " tensor " + spec.name +
                                " read " + std::to_string(raw.size()) + " bytes, expected " +
                                std::to_string(src.nbytes()));
    }
    params.find(spec.name)->copy_(src);
  }
  result->weights = dir;
  result->source = kind == "master" ? "checkpoint master (fp32)" : "checkpoint model (bf16)";
  result->step = m.meta.step;
  return Status::Ok();
}

Status LoadWeights(model::LlamaModel& model, const std::string& path, EvalResult* result) {
  Env* env = Env::Default();
  if (path.empty()) return Status::InvalidArgument("--weights PATH is required");
  if (!env->FileExists(path)) {
    return Status::InvalidArgument("--weights '" + path +
                                   "' does not exist (want a *.safetensors file, a "
                                   "model.safetensors.index.json, or a checkpoint directory)");
  }
  if (env->IsDirectory(path)) {
    // A Hugging Face model directory: its sharded index, else its single file.
    for (const char* name : {"model.safetensors.index.json", "model.safetensors"}) {
      const std::string file = path + "/" + name;
      if (!env->FileExists(file)) continue;
      FT_RETURN_IF_ERROR(AsUsage(model::LoadSafetensors(model, file), "--weights '" + file + "'"));
      result->weights = file;
      result->source = "safetensors";
      return Status::Ok();
    }
    auto dir = ckpt::ResolveCheckpointDir(path, env);
    if (!dir.ok()) return AsUsage(dir.status(), "--weights");
    return LoadFromCheckpoint(model, *dir, result);
  }
  FT_RETURN_IF_ERROR(AsUsage(model::LoadSafetensors(model, path), "--weights '" + path + "'"));
  result->weights = path;
  result->source = "safetensors";
  return Status::Ok();
}

}  // namespace

StatusOr<EvalResult> RunEval(const EvalOptions& o) {
  if (o.batches <= 0) return Status::InvalidArgument("--batches must be > 0");
  if (o.micro_batch <= 0) return Status::InvalidArgument("train.micro_batch must be > 0");
  torch::set_num_threads(o.threads);
  EvalResult result;
  try {
    model::LlamaModel model(o.model, o.bf16 ? torch::kBFloat16 : torch::kFloat32);
    FT_RETURN_IF_ERROR(LoadWeights(model, o.weights, &result));

    data::ReaderOptions ro;
    ro.source = o.data;
    ro.seed = o.seed;
    ro.dp_rank = 0;
    ro.dp_size = 1;
    ro.micro_batch = static_cast<int>(o.micro_batch);
    ro.prefetch_depth = 2;
    auto reader = data::TokenReader::Open(ro, nullptr);
    if (!reader.ok()) {
      const Status& s = reader.status();
      if (s.IsNotFound() || s.IsInvalidArgument()) {
        return Status::InvalidArgument("--data: " + s.message());
      }
      return s;
    }
    const int64_t seq_len = (*reader)->index().seq_len;
    if (seq_len > o.model.max_seq_len) {
      return Status::InvalidArgument("data sequences have " + std::to_string(seq_len) +
                                     " tokens but model.max_seq_len is " +
                                     std::to_string(o.model.max_seq_len));
    }

    torch::NoGradGuard no_grad;
    model->eval();
    double sum = 0;
    for (int64_t b = 0; b < o.batches; ++b) {
      FT_ASSIGN_OR_RETURN(data::Batch batch, (*reader)->Next());
      torch::Tensor tokens =
          torch::from_blob(batch.tokens.data(), {batch.rows, batch.row_tokens}, torch::kInt32)
              .to(torch::kInt64);
      torch::Tensor inputs = tokens.narrow(1, 0, tokens.size(1) - 1);
      torch::Tensor targets = tokens.narrow(1, 1, tokens.size(1) - 1);
      sum += model::CrossEntropyLoss(model->forward(inputs), targets).item<float>();
      result.tokens += targets.numel();
    }
    result.batches = o.batches;
    result.loss = static_cast<float>(sum / static_cast<double>(o.batches));
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
