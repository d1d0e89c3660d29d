// metrics.jsonl: one JSON object per optimizer step, appended and flushed line by line so a
// crash loses at most the line being written; losses printed with %.9g so float32 values
// round-trip exactly. Written by rank 0 only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::train {

struct PhaseSummary;  // train/telemetry/step_phases.h

struct StepMetrics {
  int64_t step = 0;  // optimizer steps completed after this one (1 for the first)
  float loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double data_wait_s = 0;
  double comm_s = 0;
  double ckpt_stall_s = 0;
  int64_t restart_count = 0;
  int64_t tokens = 0;  // tokens consumed so far (global)
  double unix_time = 0;
  // Written only when known (train/telemetry/metrics_sinks.h): CPU runs have no gpu_* fields, mfu
  // needs a peak, scaling_efficiency a baseline. Like the timings above, they are not part of what
  // bit-exact resume compares (the losses and the checkpoint's training state).
  std::optional<double> gpu_util;    // 0-100, this rank's GPU (NVML)
  std::optional<double> gpu_mem_gb;  // GiB in use on that GPU
  // The CUDA caching allocator's peaks over this step (train/device/device.h) and its cumulative
  // free-and-retry count: the memory the plan must cover, and its slow edge.
  std::optional<double> gpu_alloc_peak_gb;
  std::optional<double> gpu_reserved_peak_gb;
  std::optional<double> gpu_alloc_retries;
  std::optional<double> tokens_per_s_per_gpu;
  std::optional<double> mfu;                 // 0-1
  std::optional<double> scaling_efficiency;  // per-GPU throughput / metrics.baseline_...
  // Steps that ran the held-out evaluation ([eval], train/eval/eval_loop.h): its mean loss (a
  // float32, printed %.9g) and its wall time, which step_time_s includes (like ckpt_stall_s).
  std::optional<double> eval_loss;
  std::optional<double> eval_s;
  // Over http/s3: rank 0's range requests completed since the previous line, and the p50/p95
  // of their latency (request to last byte, retries included). Absent for local files and on
  // steps that read nothing (the reader reads whole windows ahead).
  std::optional<double> data_reads;
  std::optional<double> data_read_p50_s;
  std::optional<double> data_read_p95_s;
  // Every rank's step phases summarised by rank 0 ("phases", "ranks", "stragglers").
  std::shared_ptr<const PhaseSummary> phases;
};

std::string FormatMetricsLine(const StepMetrics& m);

// Sets m's data_reads and read latency p50/p95 (nearest rank) from `latencies` (seconds;
// reordered); leaves them unset when it is empty.
void SetReadLatency(std::vector<float> latencies, StepMetrics* m);

// Appends one line (a JSON object without its newline) to `path` with a single O_APPEND
// write, so that records from the trainer and from slurm/train.sh never interleave.
Status AppendJsonLine(const std::string& path, const std::string& line);

// RunLayout::config_error() (RUN_DIR/.config_error): the message of a configuration or input error
// that made `ftrain train` exit 2, for slurm/train.sh to fail the job with instead of restarting
// it.
Status RecordConfigError(const std::string& run_dir, const std::string& message);

class MetricsWriter {
 public:
  ~MetricsWriter();
  // Appends to `path` (created if needed). Lines of steps after `truncate_after_step` that a
  // crashed previous run left behind are dropped first, so the file stays one line per step.
  // `resume_line` (the line of step truncate_after_step saved in the checkpoint) is appended
  // when the file lacks that step: the previous run died between its commit and its append.
  static StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path,
                                                       int64_t truncate_after_step,
                                                       const std::string& resume_line = "");
  Status Append(const StepMetrics& m);

 private:
  MetricsWriter() = default;
  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace ftrain::train
