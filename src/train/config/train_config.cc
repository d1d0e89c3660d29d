// TrainConfig loading and validation.
#include "train/config/train_config.h"

#include <xxhash.h>

#include <cstdio>

#include "core/run_layout.h"
#include "train/config/mirror_config.h"

namespace ftrain::train {
namespace {

Status Positive(const Config& c, const char* key, int64_t v) {
  if (v > 0) return Status::Ok();
  std::string where = c.Has(key) ? c.entries().at(key).origin + ": " : "";
  return Status::InvalidArgument(where + key + " must be > 0, got " + std::to_string(v));
}

Status OneOf(const Config& c, const char* key, const std::string& v,
             std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  std::string where = c.Has(key) ? c.entries().at(key).origin + ": " : "";
  return Status::InvalidArgument(where + key + " = '" + v + "' is not one of " + list);
}

// Reads `key` (absent: *out stays) and maps its spelling to the enum, or names the choices.
template <typename E>
Status GetChoice(const Config& c, const char* key,
                 std::initializer_list<std::pair<const char*, E>> choices, E* out) {
  if (!c.Has(key)) return Status::Ok();
  std::string v;
  FT_RETURN_IF_ERROR(c.GetString(key, &v));
  std::string list;
  for (const auto& [name, value] : choices) {
    if (v == name) {
      *out = value;
      return Status::Ok();
    }
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  return Status::InvalidArgument(c.entries().at(key).origin + ": " + key + " = '" + v +
                                 "' is not one of " + list);
}

}  // namespace

namespace {

// [train]: steps, batch, the optimizer, device and precision, resume and init.
Status LoadOptim(const Config& c, OptimSection* out) {
  OptimSection& o = *out;
  FT_RETURN_IF_ERROR(c.GetInt("train.steps", &o.steps));
  if (!c.Has("train.steps")) return Status::InvalidArgument("config key 'train.steps' is required");
  FT_RETURN_IF_ERROR(Positive(c, "train.steps", o.steps));
  FT_RETURN_IF_ERROR(c.GetInt("train.stop_after", &o.stop_after));
  if (o.stop_after < 0 || o.stop_after > o.steps) {
    return Status::InvalidArgument(
        "train.stop_after = " + std::to_string(o.stop_after) +
        " must be 0 (off) or a step from 1 to " + "train.steps = " + std::to_string(o.steps) +
        " (to train longer, raise train.steps: that changes the LR schedule and the config hash)");
  }
  FT_RETURN_IF_ERROR(c.GetInt("train.micro_batch", &o.micro_batch));
  FT_RETURN_IF_ERROR(Positive(c, "train.micro_batch", o.micro_batch));
  FT_RETURN_IF_ERROR(c.GetInt("train.grad_accum", &o.grad_accum));
  FT_RETURN_IF_ERROR(Positive(c, "train.grad_accum", o.grad_accum));
  FT_RETURN_IF_ERROR(c.GetInt("train.global_batch", &o.global_batch));
  FT_RETURN_IF_ERROR(c.GetDouble("train.lr", &o.lr));
  if (o.lr <= 0) return Status::InvalidArgument("train.lr must be > 0");
  FT_RETURN_IF_ERROR(c.GetDouble("train.min_lr", &o.min_lr));
  if (o.min_lr < 0) o.min_lr = o.lr / 10;
  FT_RETURN_IF_ERROR(c.GetInt("train.warmup_steps", &o.warmup_steps));
  if (o.warmup_steps < 0) return Status::InvalidArgument("train.warmup_steps must be >= 0");
  FT_RETURN_IF_ERROR(c.GetBool("train.lr_scale_with_batch", &o.lr_scale_with_batch));
  FT_RETURN_IF_ERROR(c.GetInt("train.base_batch", &o.base_batch));
  FT_RETURN_IF_ERROR(c.GetDouble("train.weight_decay", &o.weight_decay));
  FT_RETURN_IF_ERROR(c.GetDouble("train.beta1", &o.beta1));
  FT_RETURN_IF_ERROR(c.GetDouble("train.beta2", &o.beta2));
  FT_RETURN_IF_ERROR(c.GetDouble("train.eps", &o.eps));
  FT_RETURN_IF_ERROR(c.GetDouble("train.clip", &o.clip));
  if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1 || o.eps <= 0 ||
      o.weight_decay < 0 || o.clip < 0) {
    return Status::InvalidArgument(
        "train.beta1/beta2 must be in [0, 1), train.eps > 0, train.weight_decay >= 0, "
        "train.clip >= 0");
  }
  FT_RETURN_IF_ERROR(c.GetInt("train.seed", &o.seed));
  FT_RETURN_IF_ERROR(c.GetInt("train.threads", &o.threads));
  FT_RETURN_IF_ERROR(Positive(c, "train.threads", o.threads));
  FT_RETURN_IF_ERROR(
      GetChoice(c, "train.device", {{"cpu", Device::kCpu}, {"cuda", Device::kCuda}}, &o.device));
  const std::initializer_list<std::pair<const char*, Precision>> precisions = {
      {"float32", Precision::kFloat32}, {"bfloat16", Precision::kBFloat16}};
  FT_RETURN_IF_ERROR(GetChoice(c, "train.param_dtype", precisions, &o.param_dtype));
  FT_RETURN_IF_ERROR(GetChoice(c, "train.reduce_dtype", precisions, &o.reduce_dtype));
  FT_RETURN_IF_ERROR(c.GetBool("train.activation_checkpointing", &o.activation_checkpointing));
  FT_RETURN_IF_ERROR(c.GetInt("train.ac_every", &o.ac_every));
  if (o.ac_every < 1 || o.ac_every > 1000) {
    return Status::InvalidArgument(
        "train.ac_every must be in [1, 1000] (recompute every N-th "
        "layer; 1 = every layer), got " +
        std::to_string(o.ac_every));
  }
  if (!o.activation_checkpointing && c.Has("train.ac_every")) {
    return Status::InvalidArgument(
        "train.ac_every is set but train.activation_checkpointing = false: no layer is "
        "recomputed; set activation_checkpointing = true or drop train.ac_every");
  }
  FT_RETURN_IF_ERROR(c.GetBool("train.prefetch", &o.prefetch));
  FT_RETURN_IF_ERROR(c.GetString("train.resume", &o.resume));
  if (o.resume.empty()) return Status::InvalidArgument("train.resume must be auto, none or a path");
  FT_RETURN_IF_ERROR(c.GetBool("train.allow_resume_mismatch", &o.allow_resume_mismatch));
  FT_RETURN_IF_ERROR(c.GetString("train.init", &o.init));
  FT_RETURN_IF_ERROR(c.GetInt("train.log_every", &o.log_every));
  FT_RETURN_IF_ERROR(Positive(c, "train.log_every", o.log_every));
  FT_RETURN_IF_ERROR(c.GetString("train.profile_steps", &o.profile_steps));
  if (!o.profile_steps.empty()) {
    long long a = 0, b = 0;
    char tail = 0;
    if (std::sscanf(o.profile_steps.c_str(), "%lld:%lld%c", &a, &b, &tail) != 2 || a < 1 || b < a) {
      return Status::InvalidArgument("train.profile_steps = '" + o.profile_steps +
                                     "': give A:B, the first and last step to profile (1 <= A "
                                     "<= B), e.g. 10:12");
    }
    o.profile_first = a;
    o.profile_last = b;
  }
  return Status::Ok();
}

std::string Origin(const Config& c, const char* key) {
  return c.Has(key) ? c.entries().at(key).origin + ": " : std::string();
}

// dist.reduce, and the settings `exact` replaces or cannot serve (each named).
Status LoadReduce(const Config& c, TrainConfig* out) {
  TrainConfig& t = *out;
  const OptimSection& o = t.train;
  std::string reduce = "float";
  FT_RETURN_IF_ERROR(c.GetString("dist.reduce", &reduce));
  FT_RETURN_IF_ERROR(OneOf(c, "dist.reduce", reduce, {"float", "exact"}));
  t.dist.exact_reduce = reduce == "exact";
  if (!t.dist.exact_reduce) {
    if (c.Has("train.global_batch")) {
      return Status::InvalidArgument(Origin(c, "train.global_batch") +
                                     "train.global_batch is read with dist.reduce = exact only; "
                                     "with float the batch is train.micro_batch x "
                                     "train.grad_accum x ranks");
    }
    return Status::Ok();
  }
  if (o.global_batch <= 0 || o.global_batch % o.micro_batch != 0) {
    return Status::InvalidArgument(
        Origin(c, "train.global_batch") + "train.global_batch = " + std::to_string(o.global_batch) +
        ": dist.reduce = exact needs the global batch (sequences per step, all ranks) as a "
        "whole number of micro-batches of train.micro_batch = " +
        std::to_string(o.micro_batch) + " (give --train.global_batch=N x " +
        std::to_string(o.micro_batch) + ")");
  }
  if (o.global_batch / o.micro_batch > (int64_t{1} << 13)) {
    return Status::InvalidArgument(Origin(c, "train.global_batch") +
                                   "train.global_batch: dist.reduce = exact sums at most 8192 "
                                   "micro-batches per step");
  }
  if (o.grad_accum != 1) {
    return Status::InvalidArgument(Origin(c, "train.grad_accum") +
                                   "train.grad_accum = " + std::to_string(o.grad_accum) +
                                   ": dist.reduce = exact deals train.global_batch's "
                                   "micro-batches to the ranks itself; set grad_accum = 1");
  }
  if (o.reduce_dtype != Precision::kFloat32) {
    return Status::InvalidArgument(Origin(c, "train.reduce_dtype") +
                                   "train.reduce_dtype = bfloat16: dist.reduce = exact replaces "
                                   "the reduce dtype (int64 fixed point); set float32");
  }
  if (t.dist.sharding != Sharding::kFullShard && t.dist.sharding != Sharding::kShardGradOp) {
    return Status::InvalidArgument(Origin(c, "dist.sharding") +
                                   "dist.sharding = " + ShardingName(t.dist.sharding) +
                                   ": dist.reduce = exact serves full_shard and shard_grad_op "
                                   "only (no replica all-reduce yet)");
  }
  return Status::Ok();
}

// [data] and [dist], and the device/backend pairing.
Status LoadDataAndDist(const Config& c, TrainConfig* out) {
  TrainConfig& t = *out;
  const OptimSection& o = t.train;
  FT_RETURN_IF_ERROR(c.RequireString("data.path", &t.data.path));
  FT_RETURN_IF_ERROR(c.GetInt("data.prefetch_depth", &t.data.prefetch_depth));
  if (t.data.prefetch_depth < 0) return Status::InvalidArgument("data.prefetch_depth must be >= 0");

  std::string sharding = ShardingName(t.dist.sharding);
  FT_RETURN_IF_ERROR(c.GetString("dist.sharding", &sharding));
  StatusOr<Sharding> parsed = ParseSharding(sharding);
  // ParseSharding's message is OneOf's without the origin: the same text as every other key.
  if (!parsed.ok()) {
    return Status::InvalidArgument(Origin(c, "dist.sharding") + parsed.status().message());
  }
  t.dist.sharding = *parsed;
  FT_RETURN_IF_ERROR(c.GetString("dist.backend", &t.dist.backend));
  FT_RETURN_IF_ERROR(OneOf(c, "dist.backend", t.dist.backend, {"gloo", "nccl"}));
  FT_RETURN_IF_ERROR(c.GetInt("dist.rdzv_timeout_s", &t.dist.rdzv_timeout_s));
  FT_RETURN_IF_ERROR(Positive(c, "dist.rdzv_timeout_s", t.dist.rdzv_timeout_s));
  FT_RETURN_IF_ERROR(c.GetInt("dist.timeout_s", &t.dist.timeout_s));
  FT_RETURN_IF_ERROR(Positive(c, "dist.timeout_s", t.dist.timeout_s));
  FT_RETURN_IF_ERROR(LoadReduce(c, &t));
  if (o.device == Device::kCuda && t.dist.backend != "nccl") {
    return Status::InvalidArgument(
        "train.device = cuda needs dist.backend = nccl (gloo moves CPU tensors only); set "
        "--dist.backend=nccl");
  }
  if (o.device == Device::kCpu && t.dist.backend == "nccl") {
    return Status::InvalidArgument(
        "dist.backend = nccl needs train.device = cuda (NCCL moves GPU tensors only); set "
        "--train.device=cuda, or use dist.backend = gloo on CPUs");
  }

  return Status::Ok();
}

// ckpt.root = s3://BUCKET/PREFIX (ckpt/s3_staging.h): checkpoints are staged in ckpt.staging
// (default RUN/ckpt-staging) and committed on S3; t->ckpt.root becomes the staging root.
Status LoadS3Root(const Config& c, const MirrorConfig& mirror, TrainConfig* t) {
  std::string staging = RunLayout(t->run_dir).default_staging_root();
  FT_RETURN_IF_ERROR(c.GetString("ckpt.staging", &staging));
  if (t->ckpt.root.rfind("s3://", 0) != 0) return Status::Ok();
  const std::string where = c.Has("ckpt.root") ? c.entries().at("ckpt.root").origin + ": " : "";
  const size_t slash = t->ckpt.root.find('/', 5);
  if (t->ckpt.root.size() <= 5 || slash == 5) {
    return Status::InvalidArgument(where + "ckpt.root = " + t->ckpt.root +
                                   ": no bucket; set ckpt.root = s3://BUCKET/PREFIX");
  }
  if (mirror.enabled()) {
    return Status::InvalidArgument(where + "ckpt.root = " + t->ckpt.root +
                                   " is already on S3: unset ckpt.mirror (" + mirror.url + ")");
  }
  if (staging.empty() || staging.rfind("s3://", 0) == 0) {
    return Status::InvalidArgument("ckpt.staging must be a directory, got '" + staging + "'");
  }
  t->ckpt.s3_root = t->ckpt.root;
  t->ckpt.root = staging;
  return Status::Ok();
}

// run.dir and [ckpt].
Status LoadCheckpointing(const Config& c, TrainConfig* out) {
  TrainConfig& t = *out;
  FT_RETURN_IF_ERROR(c.RequireString("run.dir", &t.run_dir));
  t.ckpt.root = RunLayout(t.run_dir).default_checkpoint_root();
  FT_RETURN_IF_ERROR(c.GetString("ckpt.root", &t.ckpt.root));
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.every_minutes", &t.ckpt.every_minutes));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.every_steps", &t.ckpt.every_steps));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.keep", &t.ckpt.keep));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.keep_every", &t.ckpt.keep_every));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.zstd_level", &t.ckpt.zstd_level));
  FT_RETURN_IF_ERROR(c.GetBool("ckpt.shuffle", &t.ckpt.shuffle));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.threads", &t.ckpt.threads));
  FT_RETURN_IF_ERROR(c.GetBool("ckpt.save_final", &t.ckpt.save_final));
  FT_RETURN_IF_ERROR(GetChoice(
      c, "ckpt.daemon",
      {{"off", DaemonMode::kOff}, {"auto", DaemonMode::kAuto}, {"require", DaemonMode::kRequire}},
      &t.ckpt.daemon));
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.flush_timeout_s", &t.ckpt.flush_timeout_s));
  FT_RETURN_IF_ERROR(c.GetBool("ckpt.restore_from_memory", &t.ckpt.restore_from_memory));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.memory_every_steps", &t.ckpt.memory_every_steps));
  if (t.ckpt.memory_every_steps < 0 || t.ckpt.memory_every_steps > 100000000) {
    std::string where = c.Has("ckpt.memory_every_steps")
                            ? c.entries().at("ckpt.memory_every_steps").origin + ": "
                            : "";
    return Status::InvalidArgument(
        where +
        "ckpt.memory_every_steps must be in [0, 100000000] steps (0 = no memory tier), got " +
        std::to_string(t.ckpt.memory_every_steps));
  }
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.memory_every_seconds", &t.ckpt.memory_every_seconds));
  if (!(t.ckpt.memory_every_seconds >= 0 && t.ckpt.memory_every_seconds <= 1e9)) {
    std::string where = c.Has("ckpt.memory_every_seconds")
                            ? c.entries().at("ckpt.memory_every_seconds").origin + ": "
                            : "";
    return Status::InvalidArgument(where +
                                   "ckpt.memory_every_seconds must be in [0, 1e9] seconds (0 = "
                                   "no time-based memory interval), got " +
                                   c.entries().at("ckpt.memory_every_seconds").value);
  }
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.resume_retry_s", &t.ckpt.resume_retry_s));
  if (!(t.ckpt.resume_retry_s >= 0 && t.ckpt.resume_retry_s <= 86400)) {
    std::string where =
        c.Has("ckpt.resume_retry_s") ? c.entries().at("ckpt.resume_retry_s").origin + ": " : "";
    return Status::InvalidArgument(where +
                                   "ckpt.resume_retry_s must be in [0, 86400] seconds (how long "
                                   "a resume retries unreadable checkpoint storage), got " +
                                   c.entries().at("ckpt.resume_retry_s").value);
  }
  if (t.ckpt.flush_timeout_s <= 0) {
    std::string where =
        c.Has("ckpt.flush_timeout_s") ? c.entries().at("ckpt.flush_timeout_s").origin + ": " : "";
    return Status::InvalidArgument(where + "ckpt.flush_timeout_s must be > 0 seconds");
  }
  if (t.ckpt.every_minutes < 0 || t.ckpt.every_steps < 0 || t.ckpt.keep < 1 ||
      t.ckpt.keep_every < 0 || t.ckpt.zstd_level < 0 || t.ckpt.zstd_level > 22 ||
      t.ckpt.threads < 0) {
    return Status::InvalidArgument(
        "ckpt: every_minutes/every_steps/keep_every must be >= 0, keep >= 1, zstd_level in "
        "[0, 22], threads >= 0");
  }
  // The object-store tier: validated here (exit 2 naming the key), read by the trainer.
  FT_ASSIGN_OR_RETURN(MirrorConfig mirror, ParseMirrorConfig(c));
  FT_RETURN_IF_ERROR(ParseS3UploadConfig(c).status());
  return LoadS3Root(c, mirror, &t);
}

// [metrics].
Status LoadMetrics(const Config& c, TrainConfig* out) {
  TrainConfig& t = *out;
  MetricsSection& m = t.metrics;
  FT_RETURN_IF_ERROR(c.GetBool("metrics.tensorboard", &m.tensorboard));
  m.prometheus_dir = RunLayout(t.run_dir).default_prometheus_dir();
  FT_RETURN_IF_ERROR(c.GetString("metrics.prometheus_dir", &m.prometheus_dir));
  if (m.prometheus_dir.empty()) {
    return Status::InvalidArgument(
        "metrics.prometheus_dir is empty: give a directory (node_exporter's textfile "
        "directory) or 'off'");
  }
  FT_RETURN_IF_ERROR(c.GetDouble("metrics.peak_tflops", &m.peak_tflops));
  FT_RETURN_IF_ERROR(
      c.GetDouble("metrics.baseline_tokens_per_s_per_gpu", &m.baseline_tokens_per_s_per_gpu));
  FT_RETURN_IF_ERROR(c.GetInt("metrics.step_time_window", &m.step_time_window));
  if (m.peak_tflops < 0 || m.peak_tflops > 1e6 || m.baseline_tokens_per_s_per_gpu < 0) {
    return Status::InvalidArgument(
        "metrics.peak_tflops must be in [0, 1e6] (TFLOP/s per device; 0 = from the GPU "
        "model) and metrics.baseline_tokens_per_s_per_gpu >= 0 (0 = no scaling efficiency)");
  }
  FT_RETURN_IF_ERROR(c.GetInt("metrics.rank_phases_every", &m.rank_phases_every));
  FT_RETURN_IF_ERROR(c.GetDouble("metrics.straggler_threshold", &m.straggler_threshold));
  FT_RETURN_IF_ERROR(c.GetInt("metrics.straggler_window", &m.straggler_window));
  if (m.rank_phases_every < 0 || m.straggler_threshold <= 0 || m.straggler_window < 1 ||
      m.straggler_window > 100000) {
    return Status::InvalidArgument(
        "metrics.rank_phases_every must be >= 0 (0 = never), metrics.straggler_threshold > 0 "
        "(a share of the median, 0.2 = 20 %) and metrics.straggler_window in [1, 100000] steps");
  }
  if (m.step_time_window < 1 || m.step_time_window > 100000) {
    return Status::InvalidArgument("metrics.step_time_window must be in [1, 100000] steps, got " +
                                   std::to_string(m.step_time_window));
  }
  return Status::Ok();
}

// [eval].
Status LoadEval(const Config& c, EvalSection* e) {
  FT_RETURN_IF_ERROR(c.GetString("eval.path", &e->path));
  FT_RETURN_IF_ERROR(c.GetInt("eval.every_steps", &e->every_steps));
  FT_RETURN_IF_ERROR(c.GetInt("eval.batches", &e->batches));
  auto where = [&c](const char* key) {
    return c.Has(key) ? c.entries().at(key).origin + ": " : std::string();
  };
  if (e->every_steps < 0) {
    return Status::InvalidArgument(where("eval.every_steps") +
                                   "eval.every_steps must be >= 0 (0 = no evaluation)");
  }
  if (e->batches < 1) {
    return Status::InvalidArgument(where("eval.batches") + "eval.batches must be >= 1, got " +
                                   std::to_string(e->batches));
  }
  if (e->every_steps > 0 && e->path.empty()) {
    return Status::InvalidArgument(where("eval.every_steps") +
                                   "eval.every_steps is set but eval.path is not: give the "
                                   "held-out packed directory or URL (--eval.path=DIR)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<TrainConfig> TrainConfig::Load(const Config& c) {
  TrainConfig t;
  t.raw = c;
  FT_ASSIGN_OR_RETURN(t.model, LlamaConfig::FromConfig(c));
  FT_RETURN_IF_ERROR(LoadOptim(c, &t.train));
  FT_RETURN_IF_ERROR(LoadDataAndDist(c, &t));
  FT_RETURN_IF_ERROR(LoadCheckpointing(c, &t));
  FT_RETURN_IF_ERROR(LoadMetrics(c, &t));
  FT_RETURN_IF_ERROR(LoadEval(c, &t.eval));
  FT_RETURN_IF_ERROR(LoadGuard(c, &t.guard));
  FT_RETURN_IF_ERROR(CheckHangAgainstTimeout(c, t.guard, t.dist.timeout_s));
  // guard.hang_io_s unset: the storage waits get the collective timeout, as before the key.
  if (!c.Has("guard.hang_io_s")) t.guard.hang_io_s = static_cast<double>(t.dist.timeout_s);
  FT_RETURN_IF_ERROR(ParseSkipList(c, t.train.steps, &t.data.skip));
  FT_RETURN_IF_ERROR(c.CheckAllConsumed());
  return t;
}

StatusOr<TrainConfig> TrainConfig::LoadFile(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  FT_ASSIGN_OR_RETURN(Config config, Config::LoadFile(path));
  for (const auto& o : overrides) FT_RETURN_IF_ERROR(config.ApplyOverride(o));
  return Load(config);
}

const char* DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }
const char* PrecisionName(Precision p) {
  return p == Precision::kBFloat16 ? "bfloat16" : "float32";
}
const char* DaemonModeName(DaemonMode m) {
  switch (m) {
    case DaemonMode::kOff:
      return "off";
    case DaemonMode::kRequire:
      return "require";
    case DaemonMode::kAuto:
      break;
  }
  return "auto";
}

std::string TrainConfig::ConfigHash() const {
  std::string canon;
  for (const auto& [key, entry] : raw.entries()) {
    // Where metrics go and what MFU is measured against: not a bit of the run changes.
    if (key.rfind("metrics.", 0) == 0) continue;
    // The held-out loss reads the weights, never changes them (train/eval/eval_loop.h).
    if (key.rfind("eval.", 0) == 0) continue;
    // The guard and the skip list change a run's bits only where they skip a step, and every
    // skip is recorded in the checkpoints: a resume may turn them on (train/verdicts/guard.h).
    if (key.rfind("guard.", 0) == 0 || key == "data.skip") continue;
    const bool irrelevant =
        key.rfind("run.", 0) == 0 || key.rfind("ckpt.", 0) == 0 || key == "train.resume" ||
        key == "train.stop_after" || key == "train.allow_resume_mismatch" ||
        key == "train.log_every" || key == "train.profile_steps" || key == "data.path" ||
        key == "data.prefetch_depth" || key == "dist.rdzv_timeout_s" || key == "train.init" ||
        key == "dist.timeout_s" ||
        // Where it runs, not what it computes: a CPU checkpoint may resume on GPUs and back
        // (the trainer says that bits are not promised across devices).
        key == "train.device" || key == "dist.backend" ||
        // Where config.json was, not what it says: its contents are hashed below, so a base
        // directory that moved does not change the hash.
        key == "model.hf";
    if (!irrelevant) canon += key + "=" + entry.value + "\n";
  }
  if (!model.hf_config_path.empty()) canon += "model.hf.resolved=" + model.Canonical() + "\n";
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(canon.data(), canon.size())));
  return buf;
}

}  // namespace ftrain::train
