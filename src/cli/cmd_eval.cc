// `ftrain eval [--config FILE] [--model HF_DIR] --weights PATH --data DIR [--batches N]
// [--dtype fp32|bf16] [--device cpu|cuda] [--json] [--section.key=value ...]`: flags only;
// the evaluation is in src/train/eval (distributed under `ftrain launch` or srun).
// Exit codes: 0 done, 1 damaged weights or data, 2 usage/config/path/shape error.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/config.h"
#include "train/eval.h"
#include "train/train_config.h"

namespace ftrain::cli {

namespace {
constexpr char kHelp[] =
    "usage: ftrain eval [--config FILE] [--model HF_DIR] --weights PATH --data DIR\n"
    "                   [--batches N] [--dtype fp32|bf16] [--device cpu|cuda] [--json]\n"
    "                   [--section.key=value ...]\n"
    "  Mean token loss and perplexity of the model described by FILE's [model] section (or\n"
    "  by HF_DIR/config.json: --model DIR is --model.hf=DIR) on N micro-batches (default 16)\n"
    "  of the packed data at DIR, read in the fixed order given by train.seed with\n"
    "  train.micro_batch rows each. Runs on the training engine: the FSDP forward with\n"
    "  dist.sharding, distributed over every rank of the job (one process, `ftrain launch\n"
    "  --nproc R -- eval ...` or srun: each rank reads its own shards of the weights and\n"
    "  evaluates every R-th batch; R ranks give one rank's loss bit for bit), on\n"
    "  train.device (--device cuda: one GPU per rank, dist.backend nccl) in train.param_dtype\n"
    "  (--dtype fp32|bf16; default float32). PATH: a Hugging Face model directory (its\n"
    "  config.json is the model when neither FILE nor --model gives one), model.safetensors,\n"
    "  model.safetensors.index.json, a checkpoint directory (fp32 master weights; bf16 model\n"
    "  weights if it has none), or a checkpoint root (its newest complete checkpoint).\n"
    "  Rank 0 prints the result; --json prints {\"loss\":...,\"perplexity\":...,\"batches\":N,\n"
    "  \"tokens\":...,\"step\":...,\"ranks\":R,\"dtype\":...} (loss as %.9g).\n"
    "exit codes: 0 done, 1 damaged weights or data, 2 usage, config, path or shape error\n";

// Value of "--flag VALUE" or "--flag=VALUE" at argv[*i]; advances *i past a separate value.
bool FlagValue(int argc, char** argv, int* i, const std::string& flag, std::string* out,
               Status* error) {
  const std::string a = argv[*i];
  if (a == flag) {
    if (*i + 1 >= argc) {
      *error = Status::InvalidArgument(flag + " needs a value (see 'ftrain eval --help')");
      return true;
    }
    *out = argv[++*i];
    return true;
  }
  if (a.rfind(flag + "=", 0) == 0) {
    *out = a.substr(flag.size() + 1);
    return true;
  }
  return false;
}
}  // namespace

int RunEval(int argc, char** argv) {
  const std::string program = "ftrain eval";
  std::string config_path, weights, data, batches_text = "16", model_dir, dtype, device;
  bool json = false;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    Status err;
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return kExitOk;
    }
    if (a == "--json") {
      json = true;
    } else if (FlagValue(argc, argv, &i, "--config", &config_path, &err) ||
               FlagValue(argc, argv, &i, "--weights", &weights, &err) ||
               FlagValue(argc, argv, &i, "--data", &data, &err) ||
               FlagValue(argc, argv, &i, "--batches", &batches_text, &err) ||
               FlagValue(argc, argv, &i, "--model", &model_dir, &err) ||
               FlagValue(argc, argv, &i, "--dtype", &dtype, &err) ||
               FlagValue(argc, argv, &i, "--device", &device, &err)) {
      if (!err.ok()) return Fail(program, err);
    } else if (a.rfind("--", 0) == 0 && a.find('.') != std::string::npos) {
      overrides.push_back(a);
    } else {
      return Fail(program, Status::InvalidArgument(
                               "unexpected argument '" + a +
                               "' (want --config FILE --weights PATH --data DIR and "
                               "--section.key=value overrides; see 'ftrain eval --help')"));
    }
  }
  if (weights.empty()) {
    return Fail(program,
                Status::InvalidArgument("--weights PATH is required (see 'ftrain eval --help')"));
  }
  if (!dtype.empty() && dtype != "fp32" && dtype != "bf16") {
    return Fail(program, Status::InvalidArgument("--dtype '" + dtype + "' must be fp32 or bf16"));
  }
  if (!device.empty() && device != "cpu" && device != "cuda") {
    return Fail(program, Status::InvalidArgument("--device '" + device + "' must be cpu or cuda"));
  }
  int64_t batches = 0;
  if (!ParseInt64(batches_text, &batches) || batches <= 0) {
    return Fail(program, Status::InvalidArgument("--batches '" + batches_text +
                                                 "' is not a positive integer"));
  }
  StatusOr<Config> config = Config();
  if (!config_path.empty()) config = Config::LoadFile(config_path);
  if (!config.ok()) return Fail(program, config.status());
  for (const auto& o : overrides) {
    Status s = config->ApplyOverride(o);
    if (!s.ok()) return Fail(program, s);
  }
  if (!model_dir.empty()) config->Set("model.hf", model_dir, "--model");
  // No model in the config: the weights' own directory describes it (an HF model directory).
  bool has_model = false;
  for (const auto& item : config->entries()) has_model |= item.first.rfind("model.", 0) == 0;
  if (!has_model) config->Set("model.hf", weights, "--weights (no [model] given)");
  if (!data.empty()) config->Set("data.path", data, "--data");
  if (!config->Has("data.path")) {
    return Fail(program,
                Status::InvalidArgument("--data DIR is required (see 'ftrain eval --help')"));
  }
  if (!dtype.empty()) {
    config->Set("train.param_dtype", dtype == "bf16" ? "bfloat16" : "float32", "--dtype");
  }
  if (!device.empty()) {
    config->Set("train.device", device, "--device");
    // The collectives follow the device unless the config chose them.
    if (!config->Has("dist.backend")) {
      config->Set("dist.backend", device == "cuda" ? "nccl" : "gloo", "--device");
    }
  }
  // Validate the whole file as `ftrain train` would (unknown keys, bad values), filling the
  // keys only a training run needs.
  if (!config->Has("train.steps")) config->Set("train.steps", "1", "ftrain eval (unused)");
  if (!config->Has("run.dir")) config->Set("run.dir", ".", "ftrain eval (unused)");
  // A training config's [eval] is the trainer's; this command evaluates --data.
  if (config->Has("eval.every_steps")) config->Set("eval.every_steps", "0", "ftrain eval (unused)");
  auto tc = train::TrainConfig::Load(*config);
  if (!tc.ok()) return Fail(program, tc.status());

  train::EvalOptions eo;
  eo.config = *tc;
  eo.weights = weights;
  eo.batches = batches;
  auto r = train::RunEval(eo);
  if (!r.ok()) return Fail(program, r.status());
  if (r->rank != 0) return kExitOk;  // rank 0 speaks for the job
  char line[768];
  if (json) {
    std::snprintf(line, sizeof(line),
                  "{\"loss\":%.9g,\"perplexity\":%.9g,\"batches\":%lld,\"tokens\":%lld,"
                  "\"step\":%lld,\"ranks\":%d,\"dtype\":\"%s\",\"seconds\":%.6f}\n",
                  static_cast<double>(r->loss), r->perplexity, static_cast<long long>(r->batches),
                  static_cast<long long>(r->tokens), static_cast<long long>(r->step), r->ranks,
                  r->dtype.c_str(), r->seconds);
  } else {
    std::snprintf(line, sizeof(line),
                  "eval: loss %.9g perplexity %.6g over %lld batches (%lld tokens) on %d rank%s, "
                  "%s, %s; weights %s (%s",
                  static_cast<double>(r->loss), r->perplexity, static_cast<long long>(r->batches),
                  static_cast<long long>(r->tokens), r->ranks, r->ranks == 1 ? "" : "s",
                  r->device.c_str(), r->dtype.c_str(), r->weights.c_str(), r->source.c_str());
  }
  std::cout << line;
  if (!json) {
    if (r->step >= 0) std::cout << ", step " << r->step;
    std::cout << ")\n";
  }
  return kExitOk;
}

}  // namespace ftrain::cli
