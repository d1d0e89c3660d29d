// Time to train in `ftrain plan`: FLOPs per token, the GPU peak table, the MFU (default, flag or
// measured by a real run), throughput, time per epoch, the data rate per node, and whether a
// deadline can be met. Arithmetic only: plan/sources.h reads the dataset index and the run
// directory. Formulas and sources: docs/plan.md, "Time to train".
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plan/internal.h"

namespace ftrain {

// bf16 dense tensor peaks, TFLOP/s, from the vendors' datasheets (dense = half the "with
// sparsity" figure); memory per GPU in GB. docs/plan.md, "GPU peaks", gives the sources.
const std::vector<GpuSpec>& KnownGpus() {
  static const std::vector<GpuSpec> gpus = {
      {"a100-40gb", 312, 40}, {"a100-80gb", 312, 80}, {"h100-pcie", 756, 80}, {"h100-nvl", 835, 94},
      {"h100-sxm", 989, 80},  {"h200", 989, 141},     {"b200", 2250, 180},    {"l40s", 362, 48},
      {"l4", 121, 24},        {"a10", 125, 24},       {"rtx3090", 71, 24},    {"rtx4090", 165, 24},
      {"mi300x", 1307, 192},
  };
  return gpus;
}

StatusOr<GpuSpec> FindGpu(const std::string& name) {
  std::string known;
  for (const auto& g : KnownGpus()) {
    if (name == g.name) return g;
    known += (known.empty() ? "" : ", ") + std::string(g.name);
  }
  return Status::InvalidArgument("--gpu '" + name + "' is not in the table; known: " + known +
                                 " (or give --peak-tflops X, the bf16 dense peak per GPU)");
}

namespace plan_internal {
namespace {

constexpr double kDefaultMfu = 0.40;
constexpr double kRealisticMfu = 0.60;  // beyond this, a dense LLM run is not credible
constexpr double kDefaultBytesPerToken = 4.0;
constexpr double kDefaultDiskBytesPerToken = 2.0;  // uint16 packed tokens
constexpr int64_t kMinCalibrationSteps = 10;
constexpr double kDay = 86400.0;

// Three significant digits: 0.000170, 42.4, 6.78e+05.
std::string Sig(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

std::string Rate(double bytes_per_s) {
  std::string out = Sig(bytes_per_s / kGB) + " GB/s";
  if (bytes_per_s < 1e8) out += " (" + Sig(bytes_per_s / 1e6) + " MB/s)";
  return out;
}

std::string Days(double seconds) {
  return Num(seconds / kDay, 1) + " days (" + Num(seconds / 3600, 0) + " h)";
}

double FlopsPerToken(double parameters, bool attention, double layers, double hidden,
                     double seq_len) {
  return 6.0 * parameters + (attention ? 12.0 * layers * hidden * seq_len : 0.0);
}

// The run's MFU by the plan's FLOPs-per-token rule; fills the calibration fields of *t.
Status Calibrate(const PlanResult& r, TimePlan* t) {
  const CalibrationRun& run = *r.input.calibrate;
  const std::string what = "--calibrate " + run.run_dir;
  // Skip the first `skip` steps after each (re)start (allocator, NCCL and data warm-up), and
  // steps that wrote a checkpoint; the median of the rest is the run's steady throughput.
  std::vector<double> tps;
  int64_t in_segment = 0, checkpoint_steps = 0;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const CalibrationStep& s = run.steps[i];
    if (i > 0 &&
        (s.restart_count != run.steps[i - 1].restart_count || s.step <= run.steps[i - 1].step)) {
      in_segment = 0;
    }
    if (in_segment++ < r.input.calibrate_skip) continue;
    if (s.ckpt_stall_s > 0) {
      ++checkpoint_steps;
      continue;
    }
    if (s.tokens_per_s > 0) tps.push_back(s.tokens_per_s);
  }
  if (static_cast<int64_t>(tps.size()) < kMinCalibrationSteps) {
    return Status::InvalidArgument(
        what + ": " + std::to_string(tps.size()) + " usable steps in metrics.jsonl (" +
        std::to_string(run.steps.size()) + " recorded; the first " +
        std::to_string(r.input.calibrate_skip) + " after each start and " +
        std::to_string(checkpoint_steps) + " checkpoint steps are skipped); it needs at least " +
        std::to_string(kMinCalibrationSteps) + ": let the run train " +
        std::to_string(kMinCalibrationSteps - static_cast<int64_t>(tps.size())) +
        " more steps, or lower --calibrate-skip");
  }
  if (run.gpus <= 0) {
    return Status::InvalidArgument(what +
                                   ": the run's GPU count is unknown (no complete checkpoint "
                                   "records it); give --calibrate-gpus N");
  }
  std::sort(tps.begin(), tps.end());
  const size_t n = tps.size();
  const double median = n % 2 ? tps[n / 2] : (tps[n / 2 - 1] + tps[n / 2]) / 2;
  double flops = t->flops_per_token;
  if (run.model) {
    const LlamaConfig& m = *run.model;
    const double seq = static_cast<double>(run.seq_len ? *run.seq_len : m.max_seq_len);
    flops =
        FlopsPerToken(static_cast<double>(m.NumParameters()), t->attention_counted,
                      static_cast<double>(m.num_layers), static_cast<double>(m.hidden_size), seq);
  }
  const double mfu = flops * median / (static_cast<double>(run.gpus) * t->peak_flops);
  if (mfu > 1) {
    return Status::InvalidArgument(what + ": the measured MFU is " + Num(100 * mfu, 0) +
                                   "%, above the peak: the run's GPU count (" +
                                   std::to_string(run.gpus) + ", from " + run.gpus_source +
                                   ") or the peak (--gpu / --peak-tflops) is wrong");
  }
  t->mfu = mfu;
  t->calibration_tokens_per_s = median;
  t->calibration_steps = static_cast<int64_t>(n);
  t->mfu_source = "measured by " + run.run_dir + ": median " + Num(median, 0) + " tokens/s over " +
                  std::to_string(n) + " steps on " + std::to_string(run.gpus) + " GPUs (" +
                  run.gpus_source + ")" + (run.model ? "" : ", the model of this plan");
  return Status::Ok();
}

}  // namespace

Status ValidateTimeInput(const PlanInput& in) {
  if (in.tokens) {
    FT_RETURN_IF_ERROR(CheckPositive("--tokens", *in.tokens));
    if (in.data) {
      return Status::InvalidArgument(
          "--tokens and --data both give the token count; use one (--data counts rows x "
          "seq_len of the packed dataset)");
    }
    if (in.text_bytes) {
      return Status::InvalidArgument(
          "--tokens and --text-bytes both give the token count; use one");
    }
  }
  if (in.text_bytes) FT_RETURN_IF_ERROR(CheckPositive("--text-bytes", *in.text_bytes));
  if (in.bytes_per_token) {
    FT_RETURN_IF_ERROR(CheckPositive("--bytes-per-token", *in.bytes_per_token));
  }
  if (in.data && (in.data->rows == 0 || in.data->seq_len == 0)) {
    return Status::InvalidArgument("--data " + in.data->path + " holds no rows");
  }
  if (!in.gpu.empty()) {
    FT_ASSIGN_OR_RETURN(GpuSpec gpu, FindGpu(in.gpu));
    // Less than the GPU has is legitimate (a MIG slice, memory kept for something else).
    if (in.gpu_mem_given && in.gpu_mem_gb > gpu.memory_gb * (1 + 1e-9)) {
      return Status::InvalidArgument("--gpu-mem-gb " + Short(in.gpu_mem_gb) + " is more than a " +
                                     in.gpu + " has (" + Short(gpu.memory_gb) +
                                     " GB); drop --gpu-mem-gb or fix --gpu");
    }
    if (in.peak_tflops) {
      return Status::InvalidArgument("--gpu " + in.gpu + " already gives the peak (" +
                                     Short(gpu.bf16_dense_tflops) +
                                     " TFLOP/s); give one of --gpu and --peak-tflops");
    }
  }
  if (in.peak_tflops) {
    FT_RETURN_IF_ERROR(CheckPositive("--peak-tflops", *in.peak_tflops));
    if (*in.peak_tflops > 1e6) {
      return Status::InvalidArgument("--peak-tflops " + Short(*in.peak_tflops) +
                                     " is above any GPU; it is in TFLOP/s (989 for an H100 SXM)");
    }
  }
  if (in.mfu) {
    if (!(*in.mfu > 0 && *in.mfu <= 1)) {
      return Status::InvalidArgument(
          "--mfu must be a fraction in (0, 1], got " + Short(*in.mfu) +
          (*in.mfu > 1 && *in.mfu <= 100
               ? "; for " + Short(*in.mfu) + " % give --mfu " + Short(*in.mfu / 100)
               : ""));
    }
    if (in.calibrate) {
      return Status::InvalidArgument(
          "--mfu and --calibrate both give the MFU; use one (--calibrate measures it from a run)");
    }
  }
  const bool have_peak = !in.gpu.empty() || in.peak_tflops;
  if (in.calibrate && !have_peak) {
    return Status::InvalidArgument(
        "--calibrate needs the peak of the GPUs the run used: give --gpu NAME or --peak-tflops X");
  }
  if (in.calibrate_skip < 0) {
    return Status::InvalidArgument("--calibrate-skip must be 0 or more, got " +
                                   std::to_string(in.calibrate_skip));
  }
  if (in.deadline_days) {
    FT_RETURN_IF_ERROR(CheckPositive("--deadline-days", *in.deadline_days));
    if (!in.tokens && !in.data && !in.text_bytes) {
      return Status::InvalidArgument(
          "--deadline-days needs a token count: give --tokens N, --data DIR or --text-bytes B");
    }
    if (!have_peak) {
      return Status::InvalidArgument(
          "--deadline-days needs a throughput: give --gpu NAME (e.g. h100-sxm) or "
          "--peak-tflops X, and optionally --mfu or --calibrate");
    }
  }
  return Status::Ok();
}

// Bytes of raw text per token, and packed bytes read per trained token, with their sources.
void SetBytesPerToken(const PlanInput& in, TimePlan* t) {
  if (in.bytes_per_token) {
    t->bytes_per_token = *in.bytes_per_token;
    t->bytes_per_token_source = "--bytes-per-token";
  } else if (in.data && in.data->text_bytes > 0 && in.data->stream_tokens > 0) {
    t->bytes_per_token =
        static_cast<double>(in.data->text_bytes) / static_cast<double>(in.data->stream_tokens);
    t->bytes_per_token_source = "measured by " + in.data->path + ": " +
                                std::to_string(in.data->text_bytes) + " bytes of text / " +
                                std::to_string(in.data->stream_tokens) + " tokens";
  } else {
    t->bytes_per_token = kDefaultBytesPerToken;
    t->bytes_per_token_source =
        std::string("assumed") + (in.data ? " (" + in.data->path + " records no text bytes)" : "") +
        "; give --bytes-per-token, or --data with a pack of this text to measure it";
  }
  if (in.data) {
    t->disk_bytes_per_token = static_cast<double>(in.data->seq_len + 1) * in.data->token_bytes /
                              static_cast<double>(in.data->seq_len);
    t->disk_bytes_source = in.data->path + ": rows of " + std::to_string(in.data->seq_len + 1) +
                           " tokens of " + std::to_string(in.data->token_bytes) + " bytes";
  } else {
    t->disk_bytes_per_token = kDefaultDiskBytesPerToken;
    t->disk_bytes_source = "uint16 packed tokens";
  }
}

// The tokens to train on: --tokens, --text-bytes over the bytes per token, or --data's rows.
void SetTokens(const PlanInput& in, TimePlan* t) {
  if (in.tokens) {
    t->tokens = *in.tokens;
    t->tokens_source = "--tokens";
  } else if (in.text_bytes) {
    t->tokens = *in.text_bytes / t->bytes_per_token;
    t->tokens_source = "--text-bytes " + Short(*in.text_bytes) + " / " +
                       Num(t->bytes_per_token, 2) + " bytes per token";
  } else if (in.data) {
    t->tokens = static_cast<double>(in.data->rows) * in.data->seq_len;
    t->tokens_source = "--data " + in.data->path + ": " + std::to_string(in.data->rows) +
                       " rows x " + std::to_string(in.data->seq_len) + " tokens";
  }
}

// What the deadline needs (rate, MFU, GPUs, nodes, disk rate) and the verdict.
void SetDeadline(const PlanResult& r, TimePlan* t) {
  const double g = static_cast<double>(r.input.gpus_per_node);
  t->have_deadline = true;
  t->deadline_days = *r.input.deadline_days;
  const double seconds = t->deadline_days * kDay;
  t->needed_tokens_per_s = t->tokens / seconds;
  t->needed_mfu = t->needed_tokens_per_s * t->flops_per_token / (r.num_gpus * t->peak_flops);
  t->gpus_needed = std::ceil(t->needed_tokens_per_s / t->tokens_per_s_per_gpu - 1e-9);
  t->nodes_needed = std::ceil(t->gpus_needed / g - 1e-9);
  t->tokens_in_deadline = std::min(t->tokens, t->tokens_per_s * seconds);
  t->needed_disk_bytes_per_s_per_node =
      t->needed_tokens_per_s / r.input.nodes * t->disk_bytes_per_token;
  if (t->needed_mfu > 1) {
    t->verdict = "impossible";
  } else if (t->needed_mfu > kRealisticMfu) {
    t->verdict = "unrealistic";
  } else if (t->needed_mfu > t->mfu) {
    t->verdict = "needs a higher MFU";
  } else {
    t->verdict = "possible";
  }
}

StatusOr<TimePlan> ComputeTime(const PlanResult& r) {
  const PlanInput& in = r.input;
  TimePlan t;
  const double p = static_cast<double>(r.parameters);
  // The attention term needs the real shape; an assumed one would only look precise.
  t.attention_counted = !r.layers_assumed && !r.hidden_assumed;
  t.dense_flops_per_token = 6.0 * p;
  t.flops_per_token =
      FlopsPerToken(p, t.attention_counted, static_cast<double>(r.layers),
                    static_cast<double>(r.hidden), static_cast<double>(*in.seq_len));
  t.attention_flops_per_token = t.flops_per_token - t.dense_flops_per_token;

  SetBytesPerToken(in, &t);
  SetTokens(in, &t);
  t.have_tokens = t.tokens > 0;
  t.total_flops = t.tokens * t.flops_per_token;

  if (!in.gpu.empty()) {
    FT_ASSIGN_OR_RETURN(GpuSpec gpu, FindGpu(in.gpu));
    t.gpu = gpu.name;
    t.peak_flops = gpu.bf16_dense_tflops * 1e12;
  } else if (in.peak_tflops) {
    t.peak_flops = *in.peak_tflops * 1e12;
  }
  t.have_peak = t.peak_flops > 0;
  if (!t.have_peak) return t;

  if (in.mfu) {
    t.mfu = *in.mfu;
    t.mfu_source = "--mfu";
  } else if (in.calibrate) {
    FT_RETURN_IF_ERROR(Calibrate(r, &t));
  } else {
    t.mfu = kDefaultMfu;
    t.mfu_source = "default; give --mfu, or --calibrate RUN_DIR to measure it";
  }
  const double g = static_cast<double>(in.gpus_per_node);
  t.tokens_per_s_per_gpu = t.peak_flops * t.mfu / t.flops_per_token;
  t.tokens_per_s = t.tokens_per_s_per_gpu * r.num_gpus;
  t.tokens_per_s_per_node = t.tokens_per_s_per_gpu * g;
  t.disk_bytes_per_s_per_node = t.tokens_per_s_per_node * t.disk_bytes_per_token;
  t.text_bytes_per_s_per_node = t.tokens_per_s_per_node * t.bytes_per_token;
  if (!t.have_tokens) return t;
  t.epoch_seconds = t.tokens / t.tokens_per_s;
  t.epoch_seconds_with_overhead = t.epoch_seconds * (1 + r.stall_overhead + r.rework_overhead);

  if (!in.deadline_days) return t;
  SetDeadline(r, &t);
  return t;
}

void AppendTimeText(const PlanResult& r, std::ostringstream& o) {
  const TimePlan& t = r.time;
  const PlanInput& in = r.input;
  o << "\ntime to train:\n  FLOPs per token: " << Sci(t.flops_per_token);
  if (t.attention_counted) {
    o << " = 6 x P " << Sci(t.dense_flops_per_token) << " + attention 12 x L x h x s "
      << Sci(t.attention_flops_per_token) << " (PaLM, app. B)\n";
  } else {
    o << " = 6 x P (the attention term 12 x L x h x s is left out: the shape is assumed; give "
         "--model, or --layers and --hidden)\n";
  }
  if (!t.have_tokens && !t.have_peak) {
    o << "  for the time per epoch give a token count (--tokens N, --data DIR or --text-bytes B) "
         "and a GPU (--gpu NAME or --peak-tflops X)\n";
    return;
  }
  if (t.have_tokens) {
    o << "  tokens per epoch: " << Sci(t.tokens) << " (" << t.tokens_source << "); "
      << Sci(t.total_flops) << " FLOPs\n";
  } else {
    o << "  tokens per epoch: not given (--tokens N, --data DIR or --text-bytes B)\n";
  }
  o << "  bytes per token: " << Num(t.bytes_per_token, 2) << " of text ("
    << t.bytes_per_token_source << "), " << Num(t.disk_bytes_per_token, 2) << " on disk ("
    << t.disk_bytes_source << ")\n";
  if (!t.have_peak) {
    o << "  throughput: give --gpu NAME or --peak-tflops X for the time per epoch\n";
    return;
  }
  o << "  GPU: " << (t.gpu.empty() ? "--peak-tflops" : t.gpu) << ", " << Num(t.peak_flops / 1e12, 0)
    << " TFLOP/s bf16 dense peak; MFU " << Num(100 * t.mfu, 1) << "% (" << t.mfu_source
    << ") = " << Num(t.peak_flops * t.mfu / 1e12, 0) << " TFLOP/s per GPU\n";
  o << "  throughput: " << Sci(t.tokens_per_s) << " tokens/s on " << Num(r.num_gpus, 0) << " GPUs ("
    << Num(t.tokens_per_s_per_gpu, 0) << " per GPU, " << Num(t.tokens_per_s_per_node, 0)
    << " per node)\n";
  o << "  data each node must read: " << Rate(t.disk_bytes_per_s_per_node) << " of packed tokens, "
    << Rate(t.text_bytes_per_s_per_node) << " as raw text\n";
  if (!t.have_tokens) return;
  o << "  one epoch: " << Days(t.epoch_seconds) << " of compute; "
    << Num(t.epoch_seconds_with_overhead / kDay, 1) << " days with the checkpoint overhead "
    << "above; queue waits after a failure come on top\n";
  if (!t.have_deadline) return;
  o << "deadline " << Short(t.deadline_days) << " days: " << t.verdict << " -- ";
  const std::string needs =
      "it needs " + Num(100 * t.needed_mfu, 1) + "% MFU on these " + Num(r.num_gpus, 0) + " GPUs";
  if (t.verdict == "impossible") {
    o << needs << ", more than the peak";
  } else if (t.verdict == "unrealistic") {
    o << needs << "; above " << Num(100 * kRealisticMfu, 0)
      << "% is not credible for dense training (well-tuned runs reach 40-55%)";
  } else if (t.verdict == "needs a higher MFU") {
    o << needs << ", more than the assumed " << Num(100 * t.mfu, 1) << "%";
  } else {
    o << "one epoch takes " << Num(t.epoch_seconds / kDay, 1) << " days at " << Num(100 * t.mfu, 1)
      << "% MFU (" << Num(100 * t.needed_mfu, 1) << "% would do)";
  }
  o << "\n  needed: " << Sci(t.needed_tokens_per_s) << " tokens/s, "
    << Rate(t.needed_disk_bytes_per_s_per_node) << " of packed tokens per node\n"
    << "  at " << Num(100 * t.mfu, 1) << "% MFU: " << Num(t.gpus_needed, 0) << " GPUs ("
    << Num(t.nodes_needed, 0) << " nodes of " << in.gpus_per_node << ") finish in "
    << Short(t.deadline_days) << " days; these " << Num(r.num_gpus, 0) << " GPUs reach "
    << Sci(t.tokens_in_deadline) << " tokens (" << Num(100 * t.tokens_in_deadline / t.tokens, 1)
    << "% of the epoch)\n";
}

nlohmann::ordered_json TimeJson(const PlanResult& r) {
  using json = nlohmann::ordered_json;
  const TimePlan& t = r.time;
  auto opt = [](bool have, double v) { return have ? json(v) : json(nullptr); };
  const bool run = t.have_peak && t.have_tokens;
  json j = {
      {"flops_per_token", t.flops_per_token},
      {"dense_flops_per_token", t.dense_flops_per_token},
      {"attention_flops_per_token", t.attention_flops_per_token},
      {"attention_counted", t.attention_counted},
      {"tokens", opt(t.have_tokens, t.tokens)},
      {"tokens_source", t.have_tokens ? json(t.tokens_source) : json(nullptr)},
      {"total_flops", opt(t.have_tokens, t.total_flops)},
      {"text_bytes_per_token", t.bytes_per_token},
      {"text_bytes_per_token_source", t.bytes_per_token_source},
      {"disk_bytes_per_token", t.disk_bytes_per_token},
      {"gpu", t.gpu.empty() ? json(nullptr) : json(t.gpu)},
      {"peak_flops_per_gpu", opt(t.have_peak, t.peak_flops)},
      {"mfu", opt(t.have_peak, t.mfu)},
      {"mfu_source", t.have_peak ? json(t.mfu_source) : json(nullptr)},
      {"calibration_tokens_per_s", opt(t.calibration_steps > 0, t.calibration_tokens_per_s)},
      {"calibration_steps", t.calibration_steps},
      {"tokens_per_s", opt(t.have_peak, t.tokens_per_s)},
      {"tokens_per_s_per_gpu", opt(t.have_peak, t.tokens_per_s_per_gpu)},
      {"tokens_per_s_per_node", opt(t.have_peak, t.tokens_per_s_per_node)},
      {"disk_bytes_per_s_per_node", opt(t.have_peak, t.disk_bytes_per_s_per_node)},
      {"text_bytes_per_s_per_node", opt(t.have_peak, t.text_bytes_per_s_per_node)},
      {"epoch_seconds", opt(run, t.epoch_seconds)},
      {"epoch_days", opt(run, t.epoch_seconds / kDay)},
      {"epoch_seconds_with_overhead", opt(run, t.epoch_seconds_with_overhead)},
  };
  if (t.have_deadline) {
    j["deadline"] = {
        {"days", t.deadline_days},
        {"verdict", t.verdict},
        {"needed_tokens_per_s", t.needed_tokens_per_s},
        {"needed_mfu", t.needed_mfu},
        {"gpus_needed", t.gpus_needed},
        {"nodes_needed", t.nodes_needed},
        {"tokens_in_deadline", t.tokens_in_deadline},
        {"needed_disk_bytes_per_s_per_node", t.needed_disk_bytes_per_s_per_node},
    };
  } else {
    j["deadline"] = nullptr;
  }
  return j;
}

}  // namespace plan_internal
}  // namespace ftrain
