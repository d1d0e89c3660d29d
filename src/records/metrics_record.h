// metrics.jsonl's record: one JSON object per optimizer step, written by rank 0 of the trainer
// (train/telemetry/metrics.h appends it, and every checkpoint carries the line of its step)
// and read back by `ftrain report`. The one definition of its fields: FormatMetricsLine
// writes them (losses with %.9g so float32 values round-trip exactly) and ParseMetricsRecord
// reads them. The per-rank phases inside a record are phases.h. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "records/phases.h"

namespace ftrain::records {

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
  // The step's end, checkpoint included ("time"), so unix_time - step_time_s is its start
  // (ftrain report's goodput adds step times up against wall time).
  double unix_time = 0;
  // Written only when known (train/telemetry/metrics_sinks.h): CPU runs have no gpu_* fields,
  // mfu needs a peak, scaling_efficiency a baseline. Like the timings above, they are not part
  // of what bit-exact resume compares (the losses and the checkpoint's training state).
  std::optional<double> gpu_util;    // 0-100, this rank's GPU (NVML)
  std::optional<double> gpu_mem_gb;  // GiB in use on that GPU
  // The CUDA caching allocator's peaks over this step (train/device/device.h) and its
  // cumulative free-and-retry count: the memory the plan must cover, and its slow edge.
  std::optional<double> gpu_alloc_peak_gb;
  std::optional<double> gpu_reserved_peak_gb;
  std::optional<double> gpu_alloc_retries;
  std::optional<double> tokens_per_s_per_gpu;
  std::optional<double> mfu;                 // 0-1, 6 * P FLOPs per token
  std::optional<double> mfu_attn;            // 0-1, 6 * P + 12 * L * H * T (torchtitan's)
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
  // Every rank's step phases summarised by rank 0 ("phases", "ranks", "stragglers"); absent
  // in records of older trainers.
  std::shared_ptr<const PhaseSummary> phases;
  // The step's update was not applied ([guard], train/guard.h): "nonfinite", "spike" or
  // "listed" (data.skip); empty for an applied step. A non-finite loss or grad_norm is
  // written as null.
  std::string skipped;

  double Start() const { return unix_time - step_time_s; }
};

// The record as one line of JSON, without the newline.
std::string FormatMetricsLine(const StepMetrics& m);

// One record read back. Required: step, time ("unix_time" is accepted for records from other
// tools) and step_time_s; every other field is optional. A field of the wrong type, a
// negative step_time_s or a time that is not finite is Corruption naming `where` (file:line).
// The stragglers first named at this step ("stragglers") go to *named, with the record's step.
StatusOr<StepMetrics> ParseMetricsRecord(const nlohmann::json& j, const std::string& where,
                                         std::vector<Straggler>* named);

}  // namespace ftrain::records
