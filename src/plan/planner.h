// The planner behind `ftrain plan`: per-GPU memory of DDP, ZeRO-1, ZeRO-2, FSDP full shard and
// hybrid shard for mixed-precision AdamW, which of them fit, the recommended one and why, the
// checkpoint interval by Young/Daly, the LoRA/QLoRA rows next to them, and the time to train
// (FLOPs, MFU, deadline). Pure arithmetic on a PlanInput (no I/O, no LibTorch): what a packed
// dataset or a run directory says is read by plan/sources.h. The formulas and their
// sources are in docs/plan.md. Flag parsing lives in src/cli/cmd_plan.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/sharding.h"
#include "core/status.h"
#include "formats/llama_config.h"

namespace ftrain {

// One row of the GPU table (docs/plan.md, "GPU peaks"): bf16 dense tensor peak from the
// vendor's datasheet (dense: half the "with sparsity" figure), and the memory of one GPU.
struct GpuSpec {
  const char* name;  // --gpu value, e.g. "h100-sxm"
  double bf16_dense_tflops;
  double memory_gb;
};
const std::vector<GpuSpec>& KnownGpus();
// The row for `name`; InvalidArgument listing the known names otherwise.
StatusOr<GpuSpec> FindGpu(const std::string& name);

// What `--data DIR` says about a packed dataset (its index only; no token is read).
struct DataFacts {
  std::string path;
  uint64_t rows = 0;
  uint32_t seq_len = 0;      // a row holds seq_len + 1 tokens and trains seq_len of them
  uint32_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  uint64_t text_bytes = 0;   // UTF-8 bytes the packer tokenised; 0 when not recorded
  uint64_t stream_tokens = 0;
};

// What `--calibrate RUN_DIR` read from a run: one record per metrics.jsonl line, the model
// of its config.resolved.cfg, and its GPU count.
struct CalibrationStep {
  int64_t step = 0;
  double tokens_per_s = 0;
  double ckpt_stall_s = 0;
  int64_t restart_count = 0;
};
struct CalibrationRun {
  std::string run_dir;
  std::vector<CalibrationStep> steps;
  std::optional<LlamaConfig> model;  // the run's [model]; else the plan's own model is used
  std::optional<int64_t> seq_len;    // the run's rows (its data index), when readable
  int64_t gpus = 0;                  // 0: unknown (then --calibrate-gpus is required)
  std::string gpus_source;           // "--calibrate-gpus" or the checkpoint it came from
};

// One field per `ftrain plan` flag; messages about a field name its flag.
struct PlanInput {
  std::optional<double> parameters;  // --params: parameter count (7e9)
  std::optional<LlamaConfig> model;  // --model: shapes and parameter count from a config
  std::string model_source;          // where `model` came from, for the output
  std::optional<int64_t> layers;     // --layers (not with --model)
  std::optional<int64_t> hidden;     // --hidden (not with --model)
  int64_t nodes = 1;                 // --nodes
  int64_t gpus_per_node = 8;         // --gpus-per-node
  double gpu_mem_gb = 80.0;          // --gpu-mem-gb, 1 GB = 1e9 bytes
  std::optional<int64_t> seq_len;    // --seq-len; default: the model's max_seq_len, else 4096
  int64_t micro_batch = 1;           // --micro-batch: sequences per GPU per forward pass
  bool act_ckpt = false;             // --act-ckpt: recompute each layer in the backward pass
  // --ac-every N (with --act-ckpt): recompute layers 0, N, 2N, ... only; the others keep
  // their activations and, sharded, their gathered weights until their backward.
  int64_t ac_every = 1;
  bool fused_attention = true;  // --attention fused|eager (docs/plan.md, "Activations")
  double mtbf_hours = 24.0;     // --mtbf-hours: mean time between failures of the job
  double ckpt_stall_s = 13.0;   // --ckpt-stall-s: training time lost per checkpoint
  // --memory-stall-s: what one memory-tier snapshot stalls (the hand-over to ckptd: about one
  // memcpy of a rank's state on CPU, the exposed part of the device-to-host copy on GPU).
  double memory_stall_s = 0.5;
  double reserve_fraction = 0.10;  // --reserve: GPU memory kept free (allocator, CUDA, NCCL)
  double grad_bytes = 2;           // --reduce-dtype: gradient shards in bf16 (2) or fp32 (4)
  bool gpu_mem_given = true;       // false: --gpu-mem-gb absent, take --gpu's memory

  // Adapters (docs/plan.md, "LoRA and QLoRA").
  int64_t lora_rank = 16;  // --lora-rank
  std::vector<std::string> lora_targets = {"q", "k", "v", "o", "gate", "up", "down"};

  // Time to train (docs/plan.md, "Time to train"). At most one token source.
  std::optional<double> tokens;             // --tokens: tokens in one epoch
  std::optional<DataFacts> data;            // --data DIR: rows x seq_len
  std::optional<double> text_bytes;         // --text-bytes: raw text, / bytes per token
  std::optional<double> bytes_per_token;    // --bytes-per-token; else measured, else 4
  std::string gpu;                          // --gpu NAME (KnownGpus); empty: none
  std::optional<double> peak_tflops;        // --peak-tflops: bf16 dense peak per GPU
  std::optional<double> mfu;                // --mfu; default 0.40 unless --calibrate
  std::optional<CalibrationRun> calibrate;  // --calibrate RUN_DIR
  int64_t calibrate_skip = 10;              // --calibrate-skip: warm-up steps per (re)start
  std::optional<double> deadline_days;      // --deadline-days
};

// Fine-tuning with adapters, bytes per GPU: a frozen base (bf16, or NF4 for QLoRA), the
// adapters' trainable state, one dequantised projection (QLoRA), and the activations.
struct AdapterPlan {
  std::string name;                 // lora, qlora
  double adapter_parameters = 0;    // r x (d_in + d_out) summed over the targeted projections
  double quantised_parameters = 0;  // qlora: the decoder layers' projection weights in NF4
  double base_bytes = 0;            // frozen weights (incl. quantisation constants)
  double adapter_bytes = 0;         // adapters: fp32 master + Adam m,v + bf16 grads
  double dequant_bytes = 0;         // bf16 copy of the largest projection being multiplied
  double activation_bytes = 0;
  double total_bytes = 0;
  bool fits = false;
  double headroom_bytes = 0;
};

// Time to train and, with a deadline, whether it is possible.
struct TimePlan {
  double flops_per_token = 0;  // 6P (+ 12 L h s when the shape is known)
  double dense_flops_per_token = 0;
  double attention_flops_per_token = 0;  // 0 when not counted
  bool attention_counted = false;

  bool have_tokens = false;
  double tokens = 0;  // one epoch
  std::string tokens_source;
  double total_flops = 0;
  double bytes_per_token = 4.0;  // raw text per token
  std::string bytes_per_token_source;
  double disk_bytes_per_token = 2.0;  // packed bytes read per trained token
  std::string disk_bytes_source;

  bool have_peak = false;
  std::string gpu;        // empty with --peak-tflops
  double peak_flops = 0;  // per GPU, FLOP/s
  double mfu = 0.40;
  std::string mfu_source;               // "default", "--mfu", "measured by RUN_DIR ..."
  double calibration_tokens_per_s = 0;  // the run's median (0 without --calibrate)
  int64_t calibration_steps = 0;        // steps it used

  double tokens_per_s = 0;  // whole cluster at the MFU
  double tokens_per_s_per_gpu = 0;
  double tokens_per_s_per_node = 0;
  double epoch_seconds = 0;                // compute only
  double epoch_seconds_with_overhead = 0;  // x (1 + Young/Daly overhead)
  double disk_bytes_per_s_per_node = 0;
  double text_bytes_per_s_per_node = 0;

  bool have_deadline = false;
  double deadline_days = 0;
  double needed_tokens_per_s = 0;
  double needed_mfu = 0;          // on the given GPUs
  std::string verdict;            // possible | needs higher MFU | unrealistic | impossible
  double gpus_needed = 0;         // at the assumed MFU, whole GPUs
  double nodes_needed = 0;        // of --gpus-per-node
  double tokens_in_deadline = 0;  // on the given GPUs at the assumed MFU
  double needed_disk_bytes_per_s_per_node = 0;
};

// Bytes per GPU for one strategy; state = weights + grads + master + moments.
struct StrategyPlan {
  std::string name;          // ddp, zero1, zero2, full_shard, hybrid_shard
  double weights_bytes = 0;  // bf16 parameters (2 bytes each, or their shard)
  double grads_bytes = 0;    // bf16 gradients
  double master_bytes = 0;   // fp32 master weights
  double moments_bytes = 0;  // AdamW m and v in fp32
  // bf16 units gathered for compute: the root unit (embeddings, final norm, lm_head; held for
  // the whole micro-batch) + the layer being computed + the prefetched next one.
  double gathered_bytes = 0;
  // Gradients between the backward and their shard: the lm_head's (from the loss on), one
  // unit's in the compute dtype, its flattened copy being reduce-scattered and the one before.
  double grad_buffer_bytes = 0;
  double loss_bytes = 0;        // the head + loss in chunks (PlanResult::loss_bytes)
  double activation_bytes = 0;  // saved for the backward pass
  double state_bytes = 0;
  double total_bytes = 0;
  bool fits = false;
  double headroom_bytes = 0;             // usable - total; negative when it does not fit
  double inter_node_bytes_per_step = 0;  // sent per GPU per optimizer step across nodes
  double intra_node_bytes_per_step = 0;  // ... over the intra-node link (NVLink)
  // Host memory (ckptd, docs/ckptd.md). A rank's snapshot is its shard of the state: fp32
  // master, m and v and the bf16 copy of the same span (14 bytes per element; the engine's
  // StatePieces). Per rank its node's daemon keeps kCkptdSlotsPerRank slots of it (the newest
  // retained for the memory tier and in-job restarts) and, for its buddy node's rank, up to
  // kBuddyReplicasPerRank replicas (the newest and the one before; none on one node). Only
  // the first copy of a replicated state writes (ddp: rank 0; hybrid_shard: the first node),
  // so its node holds the slots and the next node the replicas, never both: the figures are
  // the most any rank and any node holds.
  double snapshot_bytes = 0;
  double host_bytes_per_rank = 0;
  double host_bytes_per_node = 0;
};

// ckptd's snapshot slots per rank (--slots-per-rank default, daemon/server.h) and the buddy
// replicas it keeps per rank of its buddy (the newest and the previous,
// daemon/replica_store.h).
constexpr int kCkptdSlotsPerRank = 2;
constexpr int kBuddyReplicasPerRank = 2;

// The row (StrategyPlan::name) that models what the engine runs for dist.sharding = s: ddp for
// no_shard, zero2 for shard_grad_op (the engine shards optimizer state and gradients and keeps a
// unit gathered from its forward to its backward), full_shard and hybrid_shard as themselves.
const char* PlanRowName(Sharding s);

struct PlanResult {
  PlanInput input;  // as given, with defaults filled in (seq_len always set)

  int64_t parameters = 0;
  std::string parameters_source;  // "--params" or the model config path
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;  // SwiGLU width: the model's, else the Llama rule from hidden
  int64_t kv_dim = 0;        // k/v projection width: kv_heads x head_dim, else hidden
  double heads = 0;          // the model's num_heads, else hidden / 128
  bool layers_assumed = false;
  bool hidden_assumed = false;
  std::string assumed_shape;  // "7B" when layers or hidden came from the standard table
  int64_t largest_unit_parameters = 0;
  bool largest_unit_estimated = false;  // parameters / layers when no --model
  // The engine's sharding units: the root (embeddings, final norm, untied lm_head) and one
  // decoder layer; without --model from the assumed shape and a 32000-token vocabulary.
  int64_t vocab = 0;
  bool vocab_assumed = false;
  int64_t root_unit_parameters = 0;
  int64_t head_parameters = 0;  // lm_head (the embedding when tied)
  int64_t layer_unit_parameters = 0;
  // The head + loss (model::LinearCrossEntropy): one chunk's float32 logits and compute-dtype
  // d logits, lm_head's float32 gradient and its compute-dtype copy, the normed hidden states
  // and their gradient.
  double loss_bytes = 0;

  double num_gpus = 0;
  double usable_bytes = 0;                // per GPU, after the reserve
  double activation_bytes_per_layer = 0;  // full (not checkpointed) activations of one layer
  double activation_bytes = 0;            // what the chosen settings keep per GPU

  std::vector<StrategyPlan> strategies;  // in the order ddp, zero1, zero2, full_shard, hybrid
  int recommended = -1;                  // index into strategies; -1: nothing fits
  std::string reason;                    // why `recommended` (or why none)
  std::vector<std::string> suggestions;  // what to change when nothing fits

  double checkpoint_interval_s = 0;  // sqrt(2 * stall * MTBF)
  double work_lost_s = 0;            // expected work lost per failure: interval / 2
  double stall_overhead = 0;         // stall / interval
  double rework_overhead = 0;        // (interval / 2) / MTBF
  // The memory tier (ckpt.memory_every_steps), Young/Daly with the memory snapshot's stall: a
  // failure restorable from memory (a rank crash, a node failure with its buddy alive) loses
  // memory_interval_s / 2 on average; a requeue onto new nodes still loses work_lost_s.
  double memory_interval_s = 0;   // sqrt(2 * memory stall * MTBF)
  double memory_work_lost_s = 0;  // memory_interval_s / 2
  double memory_overhead = 0;     // memory stall / memory interval + rework
  // Host memory of the recommended strategy (full_shard when none fits), StrategyPlan's.
  double host_bytes_per_rank = 0;
  double host_bytes_per_node = 0;  // x gpus_per_node

  std::vector<AdapterPlan> adapters;  // lora, qlora: beside the strategies, not ranked with them
  TimePlan time;
};

// Validates the input (messages name the flag) and computes the plan. "Nothing fits" is a
// successful plan with recommended == -1, not an error.
StatusOr<PlanResult> MakePlan(const PlanInput& input);

// Human-readable report: table in GB (1 decimal, 1 GB = 1e9 bytes), reasoning, Young/Daly,
// adapters, time to train.
std::string FormatPlanText(const PlanResult& plan);
// One JSON object: strategies[], recommended (name or null), checkpoint_interval_s, ...,
// adapters[], time{}.
std::string FormatPlanJson(const PlanResult& plan);

}  // namespace ftrain
