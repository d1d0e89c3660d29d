// The planner behind `ftrain plan`: per-GPU memory of DDP, ZeRO-1, ZeRO-2, FSDP full shard and
// hybrid shard for mixed-precision AdamW, which of them fit, the recommended one and why, and
// the checkpoint interval by Young/Daly. Pure arithmetic on a PlanInput (no I/O, no LibTorch);
// the formulas and their sources are in docs/plan.md. Flag parsing lives in src/cli/cmd_plan.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/llama_config.h"

namespace ftrain {

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
  bool fused_attention = true;       // --attention fused|eager (docs/plan.md, "Activations")
  double mtbf_hours = 24.0;          // --mtbf-hours: mean time between failures of the job
  double ckpt_stall_s = 13.0;        // --ckpt-stall-s: training time lost per checkpoint
  double reserve_fraction = 0.10;    // --reserve: GPU memory kept free (allocator, CUDA, NCCL)
};

// Bytes per GPU for one strategy; state = weights + grads + master + moments.
struct StrategyPlan {
  std::string name;             // ddp, zero1, zero2, full_shard, hybrid_shard
  double weights_bytes = 0;     // bf16 parameters (2 bytes each, or their shard)
  double grads_bytes = 0;       // bf16 gradients
  double master_bytes = 0;      // fp32 master weights
  double moments_bytes = 0;     // AdamW m and v in fp32
  double gathered_bytes = 0;    // bf16 units gathered for compute (current + prefetched)
  double activation_bytes = 0;  // saved for the backward pass
  double state_bytes = 0;
  double total_bytes = 0;
  bool fits = false;
  double headroom_bytes = 0;             // usable - total; negative when it does not fit
  double inter_node_bytes_per_step = 0;  // sent per GPU per optimizer step across nodes
  double intra_node_bytes_per_step = 0;  // ... over the intra-node link (NVLink)
};

struct PlanResult {
  PlanInput input;  // as given, with defaults filled in (seq_len always set)

  int64_t parameters = 0;
  std::string parameters_source;  // "--params" or the model config path
  int64_t layers = 0;
  int64_t hidden = 0;
  double heads = 0;  // the model's num_heads, else hidden / 128
  bool layers_assumed = false;
  bool hidden_assumed = false;
  std::string assumed_shape;  // "7B" when layers or hidden came from the standard table
  int64_t largest_unit_parameters = 0;
  bool largest_unit_estimated = false;  // parameters / layers when no --model

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
};

// Validates the input (messages name the flag) and computes the plan. "Nothing fits" is a
// successful plan with recommended == -1, not an error.
StatusOr<PlanResult> MakePlan(const PlanInput& input);

// Human-readable report: table in GB (1 decimal, 1 GB = 1e9 bytes), reasoning, Young/Daly.
std::string FormatPlanText(const PlanResult& plan);
// One JSON object: strategies[], recommended (name or null), checkpoint_interval_s, ...
std::string FormatPlanJson(const PlanResult& plan);

}  // namespace ftrain
