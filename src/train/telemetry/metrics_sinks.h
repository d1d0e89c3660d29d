// Rank 0's per-step metrics beyond metrics.jsonl: the derived health fields (GPU utilisation
// and memory via NVML, tokens/s per GPU, MFU, scaling efficiency) added to each StepMetrics,
// and the same step published to TensorBoard event files and a Prometheus textfile. A sink
// that fails mid-run is logged and dropped (TensorBoard) or retried next step (Prometheus):
// metrics never stop training. metrics.jsonl itself stays in train/telemetry/metrics.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/prom_textfile.h"
#include "core/status.h"
#include "train/config/train_config.h"
#include "train/telemetry/gpu_health.h"
#include "train/telemetry/metrics.h"
#include "train/telemetry/tensorboard.h"

namespace ftrain::train {

struct SinkContext {
  SinkContext() = default;
  SinkContext(int world, int cuda, int64_t params, int64_t resumed)
      : world_size(world), cuda_index(cuda), num_params(params), resume_step(resumed) {}
  int world_size = 1;      // devices the throughput is spread over
  int cuda_index = -1;     // this rank's CUDA ordinal; -1: a CPU run (no NVML, no gpu_*)
  int64_t num_params = 0;  // P in MFU's 6 * P * tokens/s
  // Attention's own FLOPs per token, 12 * layers * hidden * seq_len (torchtitan's count, as
  // in PaLM app. B): mfu_attn counts 6 * P + this; 0 leaves mfu_attn out.
  double attention_flops_per_token = 0;
  int64_t resume_step = -1;  // the committed step this run resumed from, -1 for none
  std::string nvml_library = NvmlGpu::kLibrary;  // tests: a stand-in NVML
  std::string node;    // the node's id (records::LaunchContext::CkptdNodeId); "" = the host name
  std::string job_id;  // SLURM_JOB_ID as main read it (Prometheus labels); "" outside Slurm
  Env* env = nullptr;  // sees a checkpoint's commit (the main's Env); required
};

class MetricsSinks {
 public:
  // Writes the last step's Prometheus file if the once-a-second limit held it back.
  ~MetricsSinks();
  // Opens what cfg.metrics asks for. A sink that cannot be opened (a directory that is not
  // writable) is an error naming the key to fix.
  static StatusOr<std::unique_ptr<MetricsSinks>> Open(const TrainConfig& cfg,
                                                      const SinkContext& ctx);
  // Fills m's optional health fields from m->tokens_per_s and NVML (only what is known).
  void AddHealth(records::StepMetrics* m);
  // A checkpoint of `step` was saved; `committed`: it is durable now (else ckptd is
  // persisting it, and Publish looks for its step directory until it appears).
  void NoteCheckpoint(int64_t step, bool committed);
  // Publishes the finished step (after its checkpoint stall is known): a TensorBoard event
  // every step; the Prometheus file at most once a second (replacing a file costs about a
  // millisecond or two on ext4, too much for every short step) and at destruction.
  void Publish(const records::StepMetrics& m);

  // The TensorBoard scalars and Prometheus samples of one step (for tests).
  std::vector<std::pair<std::string, float>> TensorBoardScalars(
      const records::StepMetrics& m) const;
  std::vector<PromSample> PromSamples(const records::StepMetrics& m) const;
  int64_t last_committed_step() const { return last_committed_; }

 private:
  MetricsSinks() = default;
  void PollCommitted();
  void WriteProm();

  std::string ckpt_root_;
  SinkContext ctx_;
  double peak_tflops_ = 0;  // 0: unknown, no mfu
  double baseline_ = 0;
  std::unique_ptr<NvmlGpu> gpu_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<PromTextfile> prom_;
  std::string prom_error_;          // the last Prometheus write error logged (logged once per kind)
  records::StepMetrics prom_step_;  // the newest published step
  bool prom_pending_ = false;       // prom_step_ is not in the file yet
  double prom_written_unix_ = 0;    // when the file was last replaced
  StepTimeWindow window_{100};
  int64_t last_committed_ = -1;
  int64_t pending_step_ = -1;  // handed to ckptd, not yet seen committed
  int64_t eval_step_ = -1;     // the newest step with a held-out loss (-1: none yet)
  double eval_loss_ = 0;       // its loss: Prometheus keeps showing it between evaluations
};

}  // namespace ftrain::train
