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
#include "core/env.h"
#include "train/config/train_config.h"
#include "train/eval/eval.h"

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

// The command line of `ftrain eval`, as given.
struct EvalFlags {
  std::string config_path, weights, data, batches_text = "16", model_dir, dtype, device;
  bool json = false;
  bool help = false;
  std::vector<std::string> overrides;  // --section.key=value
};

// Reads argv into `f`; stops at --help (f->help) or at the first bad argument.
Status ParseEvalFlags(int argc, char** argv, EvalFlags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    Status err;
    if (a == "--help" || a == "-h") {
      f->help = true;
      return Status::Ok();
    }
    if (a == "--json") {
      f->json = true;
    } else if (FlagValue(argc, argv, &i, "--config", &f->config_path, &err) ||
               FlagValue(argc, argv, &i, "--weights", &f->weights, &err) ||
               FlagValue(argc, argv, &i, "--data", &f->data, &err) ||
               FlagValue(argc, argv, &i, "--batches", &f->batches_text, &err) ||
               FlagValue(argc, argv, &i, "--model", &f->model_dir, &err) ||
               FlagValue(argc, argv, &i, "--dtype", &f->dtype, &err) ||
               FlagValue(argc, argv, &i, "--device", &f->device, &err)) {
      if (!err.ok()) return err;
    } else if (a.rfind("--", 0) == 0 && a.find('.') != std::string::npos) {
      f->overrides.push_back(a);
    } else {
      return Status::InvalidArgument("unexpected argument '" + a +
                                     "' (want --config FILE --weights PATH --data DIR and "
                                     "--section.key=value overrides; see 'ftrain eval --help')");
    }
  }
  return Status::Ok();
}

// The flags that need no config: --weights given, --dtype, --device and --batches valid.
Status CheckEvalFlags(const EvalFlags& f, int64_t* batches) {
  if (f.weights.empty()) {
    return Status::InvalidArgument("--weights PATH is required (see 'ftrain eval --help')");
  }
  if (!f.dtype.empty() && f.dtype != "fp32" && f.dtype != "bf16") {
    return Status::InvalidArgument("--dtype '" + f.dtype + "' must be fp32 or bf16");
  }
  if (!f.device.empty() && f.device != "cpu" && f.device != "cuda") {
    return Status::InvalidArgument("--device '" + f.device + "' must be cpu or cuda");
  }
  if (!ParseInt64(f.batches_text, batches) || *batches <= 0) {
    return Status::InvalidArgument("--batches '" + f.batches_text + "' is not a positive integer");
  }
  return Status::Ok();
}

// The training config the evaluation runs under: FILE (or none) with the overrides and the
// flags applied, validated as `ftrain train` would validate it.
StatusOr<train::TrainConfig> EvalConfig(const EvalFlags& f) {
  StatusOr<Config> config = Config();
  if (!f.config_path.empty()) config = Config::LoadFile(f.config_path);
  if (!config.ok()) return config.status();
  for (const auto& o : f.overrides) FT_RETURN_IF_ERROR(config->ApplyOverride(o));
  if (!f.model_dir.empty()) config->Set("model.hf", f.model_dir, "--model");
  // No model in the config: the weights' own directory describes it (an HF model directory).
  bool has_model = false;
  for (const auto& item : config->entries()) has_model |= item.first.rfind("model.", 0) == 0;
  if (!has_model) config->Set("model.hf", f.weights, "--weights (no [model] given)");
  if (!f.data.empty()) config->Set("data.path", f.data, "--data");
  if (!config->Has("data.path")) {
    return Status::InvalidArgument("--data DIR is required (see 'ftrain eval --help')");
  }
  if (!f.dtype.empty()) {
    config->Set("train.param_dtype", f.dtype == "bf16" ? "bfloat16" : "float32", "--dtype");
  }
  if (!f.device.empty()) {
    config->Set("train.device", f.device, "--device");
    // The collectives follow the device unless the config chose them.
    if (!config->Has("dist.backend")) {
      config->Set("dist.backend", f.device == "cuda" ? "nccl" : "gloo", "--device");
    }
  }
  // Validate the whole file as `ftrain train` would (unknown keys, bad values), filling the
  // keys only a training run needs.
  if (!config->Has("train.steps")) config->Set("train.steps", "1", "ftrain eval (unused)");
  if (!config->Has("run.dir")) config->Set("run.dir", ".", "ftrain eval (unused)");
  // A training config's [eval] is the trainer's; this command evaluates --data.
  if (config->Has("eval.every_steps")) config->Set("eval.every_steps", "0", "ftrain eval (unused)");
  return train::TrainConfig::Load(*config);
}

// Rank 0's result line: JSON (--json) or one line for people.
void PrintEvalResult(const train::EvalResult& r, bool json) {
  char line[768];
  if (json) {
    std::snprintf(line, sizeof(line),
                  "{\"loss\":%.9g,\"perplexity\":%.9g,\"batches\":%lld,\"tokens\":%lld,"
                  "\"step\":%lld,\"ranks\":%d,\"dtype\":\"%s\",\"seconds\":%.6f}\n",
                  static_cast<double>(r.loss), r.perplexity, static_cast<long long>(r.batches),
                  static_cast<long long>(r.tokens), static_cast<long long>(r.step), r.ranks,
                  r.dtype.c_str(), r.seconds);
  } else {
    std::snprintf(line, sizeof(line),
                  "eval: loss %.9g perplexity %.6g over %lld batches (%lld tokens) on %d rank%s, "
                  "%s, %s; weights %s (%s",
                  static_cast<double>(r.loss), r.perplexity, static_cast<long long>(r.batches),
                  static_cast<long long>(r.tokens), r.ranks, r.ranks == 1 ? "" : "s",
                  r.device.c_str(), r.dtype.c_str(), r.weights.c_str(), r.source.c_str());
  }
  std::cout << line;
  if (!json) {
    if (r.step >= 0) std::cout << ", step " << r.step;
    std::cout << ")\n";
  }
}

}  // namespace

int RunEval(int argc, char** argv) {
  const std::string program = "ftrain eval";
  EvalFlags f;
  Status s = ParseEvalFlags(argc, argv, &f);
  if (!s.ok()) return Fail(program, s);
  if (f.help) {
    std::cout << kHelp;
    return kExitOk;
  }
  int64_t batches = 0;
  s = CheckEvalFlags(f, &batches);
  if (!s.ok()) return Fail(program, s);
  auto tc = EvalConfig(f);
  if (!tc.ok()) return Fail(program, tc.status());

  train::EvalOptions eo;
  eo.config = *tc;
  eo.weights = f.weights;
  eo.batches = batches;
  eo.env = Env::Default();
  auto r = train::RunEval(eo);
  if (!r.ok()) return Fail(program, r.status());
  if (r->rank != 0) return kExitOk;  // rank 0 speaks for the job
  PrintEvalResult(*r, f.json);
  return kExitOk;
}

}  // namespace ftrain::cli
