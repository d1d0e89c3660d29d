// `ftrain plan`: flags (and an optional --model config with --model.<key>=<value> overrides)
// to a PlanInput, then prints plan/planner.h's plan as text or JSON. Argument handling only; the
// arithmetic is in src/plan/, reading --data/--calibrate in plan/sources.cc, and
// both are documented in docs/plan.md.
#include <sys/stat.h>

#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/env.h"
#include "formats/llama_config.h"
#include "plan/planner.h"
#include "plan/sources.h"

namespace ftrain::cli {
namespace {

namespace po = boost::program_options;

constexpr char kProgram[] = "ftrain plan";

constexpr char kUsage[] =
    "usage: ftrain plan (--params N | --model FILE [--model.<key>=<value>...]) [flags]\n"
    "\n"
    "Per-GPU memory of DDP, ZeRO-1, ZeRO-2, FSDP full shard and hybrid shard for\n"
    "mixed-precision AdamW (16 bytes/parameter + activations), which fit, the recommended one\n"
    "and why, the checkpoint interval by Young/Daly, LoRA/QLoRA memory next to them, and the\n"
    "time to train one epoch (with a deadline: whether it can be met). See docs/plan.md.\n"
    "\n"
    "examples:\n"
    "  ftrain plan --params 7e9 --nodes 8 --gpus-per-node 8 --gpu-mem-gb 80\n"
    "  ftrain plan --params 7e9 --nodes 8 --gpus-per-node 8 --gpu h100-sxm --mfu 0.45 \\\n"
    "      --text-bytes 8e12 --deadline-days 5\n"
    "  ftrain plan --params 7e9 --nodes 1 --gpus-per-node 1 --gpu-mem-gb 24 --act-ckpt\n";

// "--model.num_layers=16": a config override rather than a flag of this command.
bool IsOverride(const std::string& arg) {
  if (arg.rfind("--", 0) != 0) return false;
  const std::string key =
      arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
  return key.find('.') != std::string::npos;
}

Status IntFlag(const po::variables_map& vm, const char* name, int64_t* out) {
  if (!vm.count(name)) return Status::Ok();
  const std::string& text = vm[name].as<std::string>();
  if (!ParseInt64(text, out)) {
    return Status::InvalidArgument("--" + std::string(name) + " '" + text + "' is not an integer");
  }
  return Status::Ok();
}

Status OptionalIntFlag(const po::variables_map& vm, const char* name, std::optional<int64_t>* out) {
  if (!vm.count(name)) return Status::Ok();
  int64_t v = 0;
  FT_RETURN_IF_ERROR(IntFlag(vm, name, &v));
  *out = v;
  return Status::Ok();
}

Status DoubleFlag(const po::variables_map& vm, const char* name, double* out) {
  if (!vm.count(name)) return Status::Ok();
  const std::string& text = vm[name].as<std::string>();
  if (!ParseDouble(text, out)) {
    return Status::InvalidArgument("--" + std::string(name) + " '" + text +
                                   "' is not a number (e.g. 7e9, 80, 1.5)");
  }
  return Status::Ok();
}

// Loads the [model] section of `path` with the overrides applied. Only model.* keys are read
// (the file's other sections belong to `ftrain train`), but an unknown model.* key is an error.
StatusOr<LlamaConfig> LoadModel(const std::string& path,
                                const std::vector<std::string>& overrides) {
  // A Hugging Face model directory or its config.json: model.hf (hf_config.h).
  // (stat, not std::filesystem: LibTorch 2.11 exports a copy that crashes callers.)
  struct stat st;
  const bool is_hf = (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ||
                     (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0);
  StatusOr<Config> loaded = Config();
  if (is_hf) {
    loaded->Set("model.hf", path, "--model");
  } else {
    loaded = Config::LoadFile(path);
  }
  FT_ASSIGN_OR_RETURN(Config file, std::move(loaded));
  for (const auto& o : overrides) {
    if (o.rfind("--model.", 0) != 0) {
      return Status::InvalidArgument("'" + o + "': ftrain plan reads only [model] keys; drop it");
    }
    FT_RETURN_IF_ERROR(file.ApplyOverride(o));
  }
  Config model_only;
  for (const auto& [key, entry] : file.entries()) {
    if (key.rfind("model.", 0) == 0) model_only.Set(key, entry.value, entry.origin);
  }
  auto model = LlamaConfig::FromConfig(model_only);
  if (!model.ok()) {
    const std::string& m = model.status().message();
    // Value errors already start with "file:line"; missing keys need the file named.
    if (m.find(path) == std::string::npos) return model.status().Annotate(path);
    return model.status();
  }
  FT_RETURN_IF_ERROR(model_only.CheckAllConsumed());
  return model;
}

StatusOr<PlanInput> InputFromFlags(const po::variables_map& vm,
                                   const std::vector<std::string>& overrides) {
  PlanInput in;
  if (vm.count("params")) {
    double p = 0;
    FT_RETURN_IF_ERROR(DoubleFlag(vm, "params", &p));
    in.parameters = p;
  }
  if (vm.count("model")) {
    in.model_source = vm["model"].as<std::string>();
    FT_ASSIGN_OR_RETURN(in.model, LoadModel(in.model_source, overrides));
  } else if (!overrides.empty()) {
    return Status::InvalidArgument("'" + overrides.front() +
                                   "' overrides a config key, but no --model FILE is given");
  }
  FT_RETURN_IF_ERROR(OptionalIntFlag(vm, "layers", &in.layers));
  FT_RETURN_IF_ERROR(OptionalIntFlag(vm, "hidden", &in.hidden));
  FT_RETURN_IF_ERROR(OptionalIntFlag(vm, "seq-len", &in.seq_len));
  FT_RETURN_IF_ERROR(IntFlag(vm, "nodes", &in.nodes));
  FT_RETURN_IF_ERROR(IntFlag(vm, "gpus-per-node", &in.gpus_per_node));
  FT_RETURN_IF_ERROR(IntFlag(vm, "micro-batch", &in.micro_batch));
  FT_RETURN_IF_ERROR(DoubleFlag(vm, "gpu-mem-gb", &in.gpu_mem_gb));
  FT_RETURN_IF_ERROR(DoubleFlag(vm, "mtbf-hours", &in.mtbf_hours));
  FT_RETURN_IF_ERROR(DoubleFlag(vm, "ckpt-stall-s", &in.ckpt_stall_s));
  FT_RETURN_IF_ERROR(DoubleFlag(vm, "memory-stall-s", &in.memory_stall_s));
  FT_RETURN_IF_ERROR(DoubleFlag(vm, "reserve", &in.reserve_fraction));
  in.act_ckpt = vm["act-ckpt"].as<bool>();
  FT_RETURN_IF_ERROR(IntFlag(vm, "ac-every", &in.ac_every));
  if (in.ac_every < 1 || in.ac_every > 1000) {
    return Status::InvalidArgument("--ac-every must be in [1, 1000], got " +
                                   std::to_string(in.ac_every));
  }
  if (in.ac_every > 1 && !in.act_ckpt) {
    return Status::InvalidArgument("--ac-every needs --act-ckpt (it says which layers recompute)");
  }
  const std::string attention = vm["attention"].as<std::string>();
  if (attention != "fused" && attention != "eager") {
    return Status::InvalidArgument("--attention '" + attention + "' must be fused or eager");
  }
  in.fused_attention = attention == "fused";
  const std::string reduce = vm["reduce-dtype"].as<std::string>();
  if (reduce != "bf16" && reduce != "bfloat16" && reduce != "fp32" && reduce != "float32") {
    return Status::InvalidArgument("--reduce-dtype '" + reduce +
                                   "' must be bf16 or fp32 (train.reduce_dtype)");
  }
  in.grad_bytes = reduce == "fp32" || reduce == "float32" ? 4 : 2;
  in.gpu_mem_given = vm.count("gpu-mem-gb") > 0;

  FT_RETURN_IF_ERROR(IntFlag(vm, "lora-rank", &in.lora_rank));
  if (vm.count("lora-targets")) {
    in.lora_targets.clear();
    std::stringstream list(vm["lora-targets"].as<std::string>());
    std::string item;
    while (std::getline(list, item, ',')) {
      if (!item.empty()) in.lora_targets.push_back(item);
    }
  }

  auto optional_double = [&](const char* name, std::optional<double>* out) -> Status {
    if (!vm.count(name)) return Status::Ok();
    double v = 0;
    FT_RETURN_IF_ERROR(DoubleFlag(vm, name, &v));
    *out = v;
    return Status::Ok();
  };
  FT_RETURN_IF_ERROR(optional_double("tokens", &in.tokens));
  FT_RETURN_IF_ERROR(optional_double("text-bytes", &in.text_bytes));
  FT_RETURN_IF_ERROR(optional_double("bytes-per-token", &in.bytes_per_token));
  FT_RETURN_IF_ERROR(optional_double("peak-tflops", &in.peak_tflops));
  FT_RETURN_IF_ERROR(optional_double("mfu", &in.mfu));
  FT_RETURN_IF_ERROR(optional_double("deadline-days", &in.deadline_days));
  if (vm.count("gpu")) in.gpu = vm["gpu"].as<std::string>();
  FT_RETURN_IF_ERROR(IntFlag(vm, "calibrate-skip", &in.calibrate_skip));
  std::optional<int64_t> calibrate_gpus;
  FT_RETURN_IF_ERROR(OptionalIntFlag(vm, "calibrate-gpus", &calibrate_gpus));
  if (!vm.count("calibrate") && (calibrate_gpus || vm.count("calibrate-skip"))) {
    return Status::InvalidArgument(
        std::string(calibrate_gpus ? "--calibrate-gpus" : "--calibrate-skip") +
        " applies to --calibrate RUN_DIR, which is not given");
  }
  if (calibrate_gpus && *calibrate_gpus <= 0) {
    return Status::InvalidArgument("--calibrate-gpus must be a positive integer, got " +
                                   std::to_string(*calibrate_gpus));
  }
  // Flag conflicts first: they are cheaper to report than a dataset that does not open.
  if (vm.count("data") && in.tokens) {
    return Status::InvalidArgument(
        "--tokens and --data both give the token count; use one (--data counts rows x "
        "seq_len of the packed dataset)");
  }
  if (vm.count("calibrate") && in.mfu) {
    return Status::InvalidArgument(
        "--mfu and --calibrate both give the MFU; use one (--calibrate measures it from a run)");
  }
  if (vm.count("data")) {
    FT_ASSIGN_OR_RETURN(in.data, ReadDataFacts(vm["data"].as<std::string>(), Env::Default()));
  }
  if (vm.count("calibrate")) {
    FT_ASSIGN_OR_RETURN(in.calibrate, ReadCalibrationRun(vm["calibrate"].as<std::string>(),
                                                         calibrate_gpus, Env::Default()));
  }
  return in;
}

}  // namespace

int RunPlan(int argc, char** argv) {
  // Split "--model.<key>=<value>" overrides from the flags Boost parses.
  std::vector<char*> args = {argv[0]};
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    if (IsOverride(argv[i])) {
      overrides.push_back(argv[i]);
    } else {
      args.push_back(argv[i]);
    }
  }

  po::options_description options("flags");
  // Numbers are read as strings and parsed here, so that errors name the flag and accept 7e9.
  // One flag per line reads better than the formatter's packing.
  // clang-format off
  options.add_options()
      ("help,h", "print this help and exit")
      ("params", po::value<std::string>(), "parameter count, e.g. 7e9 (or use --model)")
      ("model", po::value<std::string>(),
       "model config file (configs/llama-7b.cfg), or a Hugging Face model directory or its "
       "config.json (configs/hf/llama-3.1-8b)")
      ("nodes", po::value<std::string>(), "nodes (default 1)")
      ("gpus-per-node", po::value<std::string>(), "GPUs per node (default 8)")
      ("gpu-mem-gb", po::value<std::string>(), "memory per GPU in GB = 1e9 bytes (default 80)")
      ("layers", po::value<std::string>(), "decoder layers (default: --model, else assumed)")
      ("hidden", po::value<std::string>(), "hidden size (default: --model, else assumed)")
      ("seq-len", po::value<std::string>(), "tokens per sequence (default: model max, or 4096)")
      ("micro-batch", po::value<std::string>(), "sequences per GPU per pass (default 1)")
      ("act-ckpt", po::bool_switch(), "activation checkpointing (recompute layers)")
      ("ac-every", po::value<std::string>(),
       "with --act-ckpt: recompute every N-th layer only (selective; train.ac_every, default 1)")
      ("reduce-dtype", po::value<std::string>()->default_value("bf16"),
       "gradient shards and their reduction: bf16 or fp32 (train.reduce_dtype)")
      ("attention", po::value<std::string>()->default_value("fused"),
       "fused (no s x s scores stored: what ftrain train runs, scaled_dot_product_attention) "
       "or eager")
      ("mtbf-hours", po::value<std::string>(), "mean time between job failures (default 24)")
      ("ckpt-stall-s", po::value<std::string>(), "training stall per checkpoint (default 13)")
      ("memory-stall-s", po::value<std::string>(),
       "training stall per memory-tier snapshot (ckpt.memory_every_steps; default 0.5)")
      ("reserve", po::value<std::string>(),
       "fraction of GPU memory kept free for allocator, CUDA context, NCCL (default 0.1)")
      ("lora-rank", po::value<std::string>(), "LoRA/QLoRA adapter rank r (default 16)")
      ("lora-targets", po::value<std::string>(),
       "projections with adapters, comma-separated (default q,k,v,o,gate,up,down)")
      ("tokens", po::value<std::string>(), "tokens in one epoch, e.g. 2e12")
      ("data", po::value<std::string>(),
       "packed dataset (DIR or URL): tokens = rows x seq_len; measures bytes per token")
      ("text-bytes", po::value<std::string>(),
       "raw text in bytes, e.g. 8e12; tokens = text-bytes / bytes per token")
      ("bytes-per-token", po::value<std::string>(),
       "text bytes per token (default: measured by --data, else 4.0)")
      ("gpu", po::value<std::string>(),
       "GPU model for the peak (and memory unless --gpu-mem-gb): a100-80gb, h100-sxm, h200, ...")
      ("peak-tflops", po::value<std::string>(), "bf16 dense peak per GPU, TFLOP/s (instead of --gpu)")
      ("mfu", po::value<std::string>(), "model FLOPs utilisation, a fraction (default 0.40)")
      ("calibrate", po::value<std::string>(),
       "RUN_DIR: take the MFU a real run measured (metrics.jsonl, config.resolved.cfg)")
      ("calibrate-gpus", po::value<std::string>(),
       "GPUs of the --calibrate run (default: from its newest checkpoint)")
      ("calibrate-skip", po::value<std::string>(),
       "warm-up steps skipped after each (re)start of the --calibrate run (default 10)")
      ("deadline-days", po::value<std::string>(),
       "say whether one epoch fits in this many days, and what it would take")
      ("json", po::bool_switch(), "print one JSON object instead of the report");
  // clang-format on

  po::variables_map vm;
  Status s = ParseFlags(kProgram, static_cast<int>(args.size()), args.data(), options,
                        po::positional_options_description(), &vm);
  if (!s.ok()) return Fail(kProgram, s);
  if (vm.count("help")) {
    std::cout << kUsage << "\n"
              << options << "\n  --<section>.<key>=<value>"
              << "   override a key of the --model config, e.g. --model.num_layers=16\n";
    return kExitOk;
  }

  auto input = InputFromFlags(vm, overrides);
  if (!input.ok()) return Fail(kProgram, input.status());
  auto plan = MakePlan(*input);
  if (!plan.ok()) return Fail(kProgram, plan.status());
  // Nothing fitting is a result, not an error: the plan says so and suggests what to change.
  std::cout << (vm["json"].as<bool>() ? FormatPlanJson(*plan) : FormatPlanText(*plan));
  std::cout.flush();
  if (!std::cout) {
    return Fail(kProgram, Status::IOError("writing the plan to stdout failed"));
  }
  return kExitOk;
}

}  // namespace ftrain::cli
