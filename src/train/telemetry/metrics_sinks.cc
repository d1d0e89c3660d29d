// Health fields, TensorBoard and Prometheus publishing of rank 0's steps.
#include "train/telemetry/metrics_sinks.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/filename.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "train/telemetry/step_phases.h"

namespace ftrain::train {
namespace {

// The host's name, for a node id that the caller left empty (tests).
std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

}  // namespace

StatusOr<std::unique_ptr<MetricsSinks>> MetricsSinks::Open(const TrainConfig& cfg,
                                                           const SinkContext& ctx) {
  if (ctx.env == nullptr) return Status::InvalidArgument("SinkContext.env is not set");
  std::unique_ptr<MetricsSinks> s(new MetricsSinks());
  s->ctx_ = ctx;
  if (s->ctx_.node.empty()) s->ctx_.node = HostName();
  s->ckpt_root_ = cfg.ckpt.root;
  s->baseline_ = cfg.metrics.baseline_tokens_per_s_per_gpu;
  s->window_ = StepTimeWindow(static_cast<size_t>(cfg.metrics.step_time_window));
  s->last_committed_ = ctx.resume_step;
  if (ctx.cuda_index >= 0) {
    std::string why;
    s->gpu_ = NvmlGpu::Open(ctx.cuda_index, ctx.nvml_library, &why);
    if (s->gpu_ == nullptr) {
      FT_LOG(Warning) << "metrics: no GPU utilisation or memory in metrics.jsonl: " << why;
    }
  }
  s->peak_tflops_ = cfg.metrics.peak_tflops;
  if (s->peak_tflops_ <= 0 && s->gpu_ != nullptr) {
    s->peak_tflops_ = PeakBf16Tflops(s->gpu_->name());
    if (s->peak_tflops_ <= 0) {
      FT_LOG(Warning) << "metrics: no bf16 peak known for '" << s->gpu_->name()
                      << "', so no mfu; set metrics.peak_tflops (dense TFLOP/s per GPU)";
    }
  }
  if (s->gpu_ != nullptr) {
    FT_LOG(Info) << "metrics: GPU " << s->gpu_->name() << ", bf16 peak " << s->peak_tflops_
                 << " TFLOP/s" << (cfg.metrics.peak_tflops > 0 ? " (metrics.peak_tflops)" : "");
  }
  const double now = UnixSeconds();
  if (cfg.metrics.tensorboard) {
    FT_ASSIGN_OR_RETURN(s->tensorboard_,
                        TensorBoardWriter::Open(RunLayout(cfg.run_dir).tensorboard(),
                                                std::max<int64_t>(ctx.resume_step, 0) + 1, now));
  }
  if (cfg.metrics.prometheus_dir != "off") {
    const std::string& job = s->ctx_.job_id;
    PromLabels labels;
    if (!job.empty()) labels.push_back({"slurm_job_id", job});
    labels.push_back({"node", s->ctx_.node});
    labels.push_back({"rank", "0"});
    const std::string file =
        "ftrain-" + (!job.empty() ? PromSafeName(job) + "-" : "") + "rank0.prom";
    auto prom = PromTextfile::Open(cfg.metrics.prometheus_dir, file, std::move(labels));
    if (!prom.ok()) {
      return Status::InvalidArgument(prom.status().message() +
                                     "; set metrics.prometheus_dir to a writable directory or "
                                     "'off'");
    }
    s->prom_ = std::move(*prom);
  }
  return s;
}

void MetricsSinks::AddHealth(records::StepMetrics* m) {
  if (gpu_ != nullptr) {
    if (std::optional<GpuSample> g = gpu_->Sample()) {
      m->gpu_util = g->util_percent;
      m->gpu_mem_gb = g->mem_used_gib;
    }
  }
  const double per_device = m->tokens_per_s / std::max(ctx_.world_size, 1);
  if (ctx_.cuda_index >= 0) m->tokens_per_s_per_gpu = per_device;
  if (peak_tflops_ > 0) {
    const double dense = 6.0 * static_cast<double>(ctx_.num_params);
    m->mfu = Mfu(dense, m->tokens_per_s, ctx_.world_size, peak_tflops_);
    if (ctx_.attention_flops_per_token > 0) {
      m->mfu_attn = Mfu(dense + ctx_.attention_flops_per_token, m->tokens_per_s, ctx_.world_size,
                        peak_tflops_);
    }
  }
  if (baseline_ > 0) m->scaling_efficiency = per_device / baseline_;
}

void MetricsSinks::NoteCheckpoint(int64_t step, bool committed) {
  if (committed) {
    last_committed_ = std::max(last_committed_, step);
  } else {
    pending_step_ = std::max(pending_step_, step);
  }
}

void MetricsSinks::PollCommitted() {
  if (pending_step_ <= last_committed_) return;
  // The rename to step-<N> is the commit (ckpt/store.h); one stat per step while it is
  // pending. A reader's stat, not a counted Env operation.
  if (ctx_.env->IsDirectory(JoinPath(ckpt_root_, ckpt::StepDirName(pending_step_)))) {
    last_committed_ = pending_step_;
  }
}

std::vector<std::pair<std::string, float>> MetricsSinks::TensorBoardScalars(
    const records::StepMetrics& m) const {
  std::vector<std::pair<std::string, float>> v = {
      {"train/loss", m.loss},
      {"train/lr", static_cast<float>(m.lr)},
      {"train/grad_norm", static_cast<float>(m.grad_norm)},
      {"perf/tokens_per_s", static_cast<float>(m.tokens_per_s)},
      {"perf/step_time_s", static_cast<float>(m.step_time_s)},
      {"perf/step_time_p50_s", static_cast<float>(window_.Percentile(0.50))},
      {"perf/step_time_p95_s", static_cast<float>(window_.Percentile(0.95))},
      {"perf/ckpt_stall_s", static_cast<float>(m.ckpt_stall_s)},
      {"perf/data_wait_s", static_cast<float>(m.data_wait_s)},
      {"perf/comm_wait_s", static_cast<float>(m.comm_s)},
  };
  auto optional = [&v](const char* tag, const std::optional<double>& x) {
    if (x) v.push_back({tag, static_cast<float>(*x)});
  };
  optional("gpu/util_percent", m.gpu_util);
  optional("gpu/mem_gb", m.gpu_mem_gb);
  optional("perf/tokens_per_s_per_gpu", m.tokens_per_s_per_gpu);
  optional("perf/mfu", m.mfu);
  optional("perf/mfu_attn", m.mfu_attn);
  optional("perf/scaling_efficiency", m.scaling_efficiency);
  optional("eval/loss", m.eval_loss);
  optional("perf/eval_s", m.eval_s);
  optional("data/read_p50_s", m.data_read_p50_s);
  optional("data/read_p95_s", m.data_read_p95_s);
  if (m.phases) {
    for (const auto& [key, x] : PhaseScalars(*m.phases)) {
      v.push_back({"phases/" + key, static_cast<float>(x)});
    }
  }
  return v;
}

std::vector<PromSample> MetricsSinks::PromSamples(const records::StepMetrics& m) const {
  std::vector<PromSample> v = {
      {"ftrain_step", "Optimizer steps completed.", false, static_cast<double>(m.step)},
      {"ftrain_tokens_total", "Tokens consumed by the run (global).", true,
       static_cast<double>(m.tokens)},
      {"ftrain_tokens_per_second", "Global training throughput of the last step.", false,
       m.tokens_per_s},
      {"ftrain_step_seconds", "Wall time of the last step, checkpoint stall included.", false,
       m.step_time_s},
      {"ftrain_step_seconds_p50",
       "Median step time over the window, without checkpoint stall or evaluation.", false,
       window_.Percentile(0.50)},
      {"ftrain_step_seconds_p95",
       "95th percentile step time over the window, without checkpoint stall or evaluation.", false,
       window_.Percentile(0.95)},
      {"ftrain_loss", "Training loss of the last step (mean over ranks).", false, m.loss},
      {"ftrain_learning_rate", "Learning rate of the last step.", false, m.lr},
      {"ftrain_grad_norm", "Global gradient norm of the last step, before clipping.", false,
       m.grad_norm},
      {"ftrain_data_wait_seconds", "Time the last step waited for data.", false, m.data_wait_s},
      {"ftrain_comm_wait_seconds", "Time the last step waited for collectives.", false, m.comm_s},
      {"ftrain_checkpoint_stall_seconds", "Time the last step spent handing over a checkpoint.",
       false, m.ckpt_stall_s},
      {"ftrain_last_checkpoint_step", "Newest checkpoint step known committed; -1 for none.", false,
       static_cast<double>(last_committed_)},
      {"ftrain_restarts", "Restarts of this run so far.", false,
       static_cast<double>(m.restart_count)},
  };
  auto optional = [&v](const char* name, const char* help, const std::optional<double>& x,
                       double scale) {
    if (x) v.push_back({name, help, false, *x * scale});
  };
  optional("ftrain_gpu_utilization_ratio", "Busy share of rank 0's GPU (NVML), 0-1.", m.gpu_util,
           0.01);
  optional("ftrain_gpu_memory_used_bytes", "Memory in use on rank 0's GPU (NVML).", m.gpu_mem_gb,
           1024.0 * 1024.0 * 1024.0);
  optional("ftrain_tokens_per_second_per_gpu", "Throughput per GPU.", m.tokens_per_s_per_gpu, 1);
  optional("ftrain_mfu_ratio", "Model FLOPs utilisation (6 * params * tokens/s / peak), 0-1.",
           m.mfu, 1);
  optional("ftrain_mfu_attn_ratio",
           "MFU counting attention too ((6 * params + 12 * layers * hidden * seq) * tokens/s / "
           "peak), 0-1.",
           m.mfu_attn, 1);
  optional("ftrain_data_read_seconds_p50",
           "Median latency of rank 0's http/s3 range reads since the previous step.",
           m.data_read_p50_s, 1);
  optional("ftrain_data_read_seconds_p95",
           "95th percentile latency of rank 0's http/s3 range reads since the previous step.",
           m.data_read_p95_s, 1);
  optional("ftrain_scaling_efficiency_ratio",
           "Per-GPU throughput over metrics.baseline_tokens_per_s_per_gpu.", m.scaling_efficiency,
           1);
  if (eval_step_ >= 0) {
    v.push_back({"ftrain_eval_loss", "Held-out loss of the newest evaluation ([eval]).", false,
                 eval_loss_});
    v.push_back({"ftrain_eval_step", "Step of the newest held-out evaluation.", false,
                 static_cast<double>(eval_step_)});
  }
  if (m.phases) {
    // ftrain_phase_median_compute_seconds, ..., ftrain_phase_slowest_rank.
    for (const auto& [key, x] : PhaseScalars(*m.phases)) {
      std::string name = "ftrain_phase_" + key;
      if (name.size() > 2 && name.compare(name.size() - 2, 2, "_s") == 0) name += "econds";
      v.push_back({name, "Step phases over the ranks (train/telemetry/step_phases.h).", false, x});
    }
  }
  v.push_back({"ftrain_metrics_updated_timestamp_seconds", "When this file was written.", false,
               UnixSeconds()});
  return v;
}

void MetricsSinks::Publish(const records::StepMetrics& m) {
  window_.Add(m.step_time_s - m.ckpt_stall_s - m.eval_s.value_or(0));
  if (m.eval_loss) {
    eval_step_ = m.step;
    eval_loss_ = *m.eval_loss;
  }
  PollCommitted();
  if (tensorboard_ != nullptr) {
    Status s = tensorboard_->WriteScalars(m.step, m.unix_time, TensorBoardScalars(m));
    if (!s.ok()) {
      // Not fatal: training goes on, metrics.jsonl still has every step.
      FT_LOG(Error) << "metrics: " << s.message()
                    << "; TensorBoard events are off for the rest of this run";
      tensorboard_.reset();
    }
  }
  if (prom_ != nullptr) {
    prom_step_ = m;
    prom_pending_ = true;
    if (UnixSeconds() - prom_written_unix_ >= 1.0) WriteProm();
  }
}

void MetricsSinks::WriteProm() {
  prom_written_unix_ = UnixSeconds();
  prom_pending_ = false;
  Status s = prom_->Write(PromSamples(prom_step_));
  if (!s.ok() && s.message() != prom_error_) {
    // Not fatal and retried (a full disk may clear); logged once per error.
    FT_LOG(Warning) << "metrics: " << s.message() << " (retrying every second)";
  }
  prom_error_ = s.ok() ? "" : s.message();
}

MetricsSinks::~MetricsSinks() {
  if (prom_ != nullptr && prom_pending_) WriteProm();
}

}  // namespace ftrain::train
