// `ftrain plan` arithmetic and its two renderings (text, JSON). Every formula here is written
// out with its source in docs/plan.md; keep the two in step. Bytes are doubles until printed:
// the inputs are estimates, and doubles cannot overflow on absurd flags.
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/internal.h"

namespace ftrain {

namespace plan_internal {

Status CheckPositiveInt(const char* flag, int64_t v, int64_t max) {
  if (v <= 0) {
    return Status::InvalidArgument(std::string(flag) + " must be a positive integer, got " +
                                   std::to_string(v));
  }
  if (v > max) {
    return Status::InvalidArgument(std::string(flag) + " " + std::to_string(v) +
                                   " is larger than " + std::to_string(max) +
                                   "; check for an extra digit");
  }
  return Status::Ok();
}

Status CheckPositive(const char* flag, double v) {
  if (!(v > 0) || !std::isfinite(v)) {
    return Status::InvalidArgument(std::string(flag) + " must be a positive number, got " +
                                   Short(v));
  }
  return Status::Ok();
}

double RecomputedLayers(const PlanResult& r) {
  if (!r.input.act_ckpt) return 0;
  const int64_t n = std::max<int64_t>(1, r.input.ac_every);
  return static_cast<double>((r.layers + n - 1) / n);  // layers 0, n, 2n, ...
}

double GatheredLayers(const PlanResult& r) {
  // A layer the backward does not recompute keeps its gathered weights (its saved graph holds
  // them) from its forward to its backward. With some layers recomputed, the one being
  // recomputed (or computed) is the one more: the next, prefetched, is a kept one already
  // gathered. With all recomputed: the layer computed and the one prefetched.
  const double layers = static_cast<double>(r.layers);
  const double kept = layers - RecomputedLayers(r);
  return kept >= layers ? layers : std::max(2.0, kept + 1);
}

double LayerActivationBytesPerToken(const PlanResult& r) {
  const double h = static_cast<double>(r.hidden), kv = static_cast<double>(r.kv_dim);
  const double i = static_cast<double>(r.intermediate), a = r.heads;
  const double input = 2 * h;                    // the engine keeps it for the backward
  const double norms = 2 * (2 * h + 4) + 2 * h;  // outputs, fp32 rsqrt; the 2nd one's input
  const double attention = 2 * (h + kv) + 2 * kv + 2 * h + 4 * a;  // q, k, v, output, lse
  const double mlp = 3 * 2 * i;                                    // gate, up, their SwiGLU product
  return input + norms + attention + mlp;
}

double CheckpointedActivationBytes(const PlanResult& r) {
  const double s = static_cast<double>(*r.input.seq_len);
  const double b = static_cast<double>(r.input.micro_batch);
  const double h = static_cast<double>(r.hidden);
  const double l = static_cast<double>(r.layers);
  return l * 2.0 * s * b * h + r.activation_bytes_per_layer;
}

}  // namespace plan_internal

namespace {

using plan_internal::Bytes;
using plan_internal::CheckPositive;
using plan_internal::CheckPositiveInt;
using plan_internal::Gb;
using plan_internal::kGB;
using plan_internal::Num;
using plan_internal::Pad;
using plan_internal::Short;
constexpr double kDefaultSeqLen = 4096;
constexpr double kHeadDim = 128;  // heads = hidden / 128 when no model config gives them
constexpr double kMaxParameters = 1e15;

// Mixed-precision AdamW, bytes per parameter (docs/plan.md, "State").
constexpr double kWeightBytes = 2;  // bf16 weights
constexpr double kGradBytes = 2;    // bf16 gradients
constexpr double kMasterBytes = 4;  // fp32 master copy
constexpr double kMomentBytes = 8;  // fp32 Adam m and v
// Flattened unit gradients being reduce-scattered besides the one just filled (the engine's
// kReductionsInFlight).
constexpr double kReductionsInFlight = 1;
constexpr int64_t kAssumedVocab = 32000;  // Llama 2's, when no --model gives one

// Standard Llama shapes used when neither flags nor a model config give layers/hidden.
struct StandardShape {
  const char* name;
  double parameters;
  int64_t layers;
  int64_t hidden;
};
constexpr StandardShape kStandardShapes[] = {
    {"1B", 1e9, 16, 2048},   {"3B", 3e9, 26, 3200},   {"7B", 7e9, 32, 4096},
    {"13B", 13e9, 40, 5120}, {"33B", 33e9, 60, 6656}, {"65B", 65e9, 80, 8192},
};

// Strategies in order of increasing sharding; on equal traffic the earlier one wins.
enum StrategyIndex { kDdp = 0, kZero1, kZero2, kFullShard, kHybridShard, kNumStrategies };
constexpr const char* kStrategyNames[] = {"ddp", "zero1", "zero2", "full_shard", "hybrid_shard"};

}  // namespace

const char* PlanRowName(Sharding s) {
  switch (s) {
    case Sharding::kNoShard:
      return kStrategyNames[kDdp];
    case Sharding::kShardGradOp:
      return kStrategyNames[kZero2];
    case Sharding::kHybridShard:
      return kStrategyNames[kHybridShard];
    case Sharding::kFullShard:
      break;
  }
  return kStrategyNames[kFullShard];
}

namespace {

// Nearest by ratio (log distance): 5e9 is nearer 7B than 3B.
const StandardShape& NearestShape(double parameters) {
  const StandardShape* best = &kStandardShapes[0];
  for (const auto& s : kStandardShapes) {
    if (std::fabs(std::log(parameters / s.parameters)) <
        std::fabs(std::log(parameters / best->parameters))) {
      best = &s;
    }
  }
  return *best;
}

Status ValidateInput(const PlanInput& in) {
  if (!in.parameters && !in.model) {
    return Status::InvalidArgument(
        "one of --params (e.g. --params 7e9) or --model (e.g. --model configs/llama-7b.cfg) "
        "is required");
  }
  if (in.parameters && in.model) {
    return Status::InvalidArgument(
        "--params and --model both give the parameter count; use one "
        "(override shapes with --model.<key>=<value>)");
  }
  if (in.model && (in.layers || in.hidden)) {
    return Status::InvalidArgument(std::string(in.layers ? "--layers" : "--hidden") +
                                   " cannot be combined with --model; override the config "
                                   "instead, e.g. --model.num_layers=16");
  }
  if (in.parameters) {
    FT_RETURN_IF_ERROR(CheckPositive("--params", *in.parameters));
    if (*in.parameters < 1 || *in.parameters > kMaxParameters) {
      return Status::InvalidArgument("--params " + Short(*in.parameters) +
                                     " is outside [1, 1e15]; check the exponent");
    }
  }
  constexpr int64_t kBig = int64_t{1} << 24;
  if (in.layers) FT_RETURN_IF_ERROR(CheckPositiveInt("--layers", *in.layers, 100000));
  if (in.hidden) FT_RETURN_IF_ERROR(CheckPositiveInt("--hidden", *in.hidden, kBig));
  if (in.seq_len) FT_RETURN_IF_ERROR(CheckPositiveInt("--seq-len", *in.seq_len, kBig));
  FT_RETURN_IF_ERROR(CheckPositiveInt("--nodes", in.nodes, 1000000));
  FT_RETURN_IF_ERROR(CheckPositiveInt("--gpus-per-node", in.gpus_per_node, 4096));
  FT_RETURN_IF_ERROR(CheckPositiveInt("--micro-batch", in.micro_batch, kBig));
  FT_RETURN_IF_ERROR(CheckPositive("--gpu-mem-gb", in.gpu_mem_gb));
  FT_RETURN_IF_ERROR(CheckPositive("--mtbf-hours", in.mtbf_hours));
  FT_RETURN_IF_ERROR(CheckPositive("--ckpt-stall-s", in.ckpt_stall_s));
  FT_RETURN_IF_ERROR(CheckPositive("--memory-stall-s", in.memory_stall_s));
  if (!(in.reserve_fraction >= 0 && in.reserve_fraction < 1)) {
    return Status::InvalidArgument("--reserve must be a fraction in [0, 1), got " +
                                   Short(in.reserve_fraction));
  }
  if (in.model) {
    FT_RETURN_IF_ERROR(in.model->Validate());
    if (in.seq_len && *in.seq_len > in.model->max_seq_len) {
      return Status::InvalidArgument(
          "--seq-len " + std::to_string(*in.seq_len) +
          " is longer than model.max_seq_len = " + std::to_string(in.model->max_seq_len) + " of " +
          (in.model_source.empty() ? "the model config" : in.model_source) +
          "; lower --seq-len or raise --model.max_seq_len");
    }
  }
  FT_RETURN_IF_ERROR(plan_internal::ValidateAdapterInput(in));
  return plan_internal::ValidateTimeInput(in);
}

// ckptd's host memory for one strategy (StrategyPlan::host_bytes_per_rank). A rank's snapshot
// is its master shard's elements x (4 master + 8 moments + 2 bf16 copy). Only the first
// replica of a replicated state writes tensors (the engine's WritesTensorState): for ddp one
// rank, for hybrid_shard the first node's ranks. Replicas go to the next node (none on one
// node), so with a state replicated across nodes a node holds its writers' slots or their
// replicas, never both; with a sharded one every node holds both.
void AddHostMemory(StrategyIndex index, const PlanResult& r, StrategyPlan* s) {
  s->snapshot_bytes = s->master_bytes / kMasterBytes * (kMasterBytes + kMomentBytes + kWeightBytes);
  const bool buddy = r.input.nodes > 1;
  const double slots = kCkptdSlotsPerRank * s->snapshot_bytes;
  const double replicas = buddy ? kBuddyReplicasPerRank * s->snapshot_bytes : 0;
  const bool replicated = (index == kDdp && r.num_gpus > 1) || (index == kHybridShard && buddy);
  s->host_bytes_per_rank = replicated ? std::max(slots, replicas) : slots + replicas;
  const double writers_per_node = index == kDdp ? 1 : static_cast<double>(r.input.gpus_per_node);
  s->host_bytes_per_node = writers_per_node * s->host_bytes_per_rank;
}

// Memory and traffic of one strategy: each component is divided by the number of GPUs it is
// sharded over (1: replicated), per docs/plan.md, "Memory per strategy".
StrategyPlan Strategy(StrategyIndex index, const PlanResult& r) {
  const double p = static_cast<double>(r.parameters);
  const double n = r.num_gpus;
  const double g = static_cast<double>(r.input.gpus_per_node);
  const double m = static_cast<double>(r.input.nodes);
  StrategyPlan s;
  s.name = kStrategyNames[index];
  // Sharding degree of each component.
  double w = 1, gr = 1, opt = 1;
  switch (index) {
    case kDdp:
      break;
    case kZero1:
      opt = n;
      break;
    case kZero2:
      opt = gr = n;
      break;
    case kFullShard:
      opt = gr = w = n;
      break;
    case kHybridShard:
      opt = gr = w = g;
      break;
    case kNumStrategies:
      break;
  }
  const double gb = r.input.grad_bytes;
  s.weights_bytes = kWeightBytes * p / w;
  s.grads_bytes = gb * p / gr;
  s.master_bytes = kMasterBytes * p / opt;
  s.moments_bytes = kMomentBytes * p / opt;
  const double root = static_cast<double>(r.root_unit_parameters);
  const double layer = static_cast<double>(r.layer_unit_parameters);
  const double head = static_cast<double>(r.head_parameters);
  // Sharded weights are gathered unit by unit: the root for the whole micro-batch, the layer
  // being computed and the prefetched one; nothing to gather when not split.
  if (w > 1) s.gathered_bytes = kWeightBytes * (root + plan_internal::GatheredLayers(r) * layer);
  // Gradients on their way to the shards: lm_head's from the loss on, one layer's in bf16 and
  // flattened (plus the one before still being reduce-scattered), then the root's at the end.
  // Each flattened unit has a shard-sized result beside it (after the first micro-batch of a
  // step: with grad_accum > 1). Unsharded gradients are added into the shard in place: no
  // flattened copies.
  const double flat = gr > 1 ? gb * (1 + 1 / gr) : 0;  // per parameter of a flattened unit
  const double flats = gr > 1 ? 1 + kReductionsInFlight : 0;
  s.grad_buffer_bytes =
      std::max(kWeightBytes * head + (kWeightBytes * layer + flats * flat * layer),
               (kWeightBytes + flat) * root + (flats > 0 ? kReductionsInFlight * flat * layer : 0));
  s.loss_bytes = r.loss_bytes;
  s.activation_bytes = r.activation_bytes;
  s.state_bytes = s.weights_bytes + s.grads_bytes + s.master_bytes + s.moments_bytes;
  s.total_bytes =
      s.state_bytes + s.gathered_bytes + s.grad_buffer_bytes + s.loss_bytes + s.activation_bytes;
  s.headroom_bytes = r.usable_bytes - s.total_bytes;
  s.fits = s.headroom_bytes >= 0;
  AddHostMemory(index, r, &s);

  // Traffic per GPU per optimizer step (ring collectives on bf16): an all-reduce of 2P bytes
  // over k GPUs sends 2(k-1)/k * 2P; FSDP's gather+gather+reduce-scatter sends 1.5x that.
  auto all_reduce = [](double k, double bytes) { return 2 * (k - 1) / k * bytes; };
  const double grad_bytes = kGradBytes * p;
  if (index == kHybridShard) {
    s.intra_node_bytes_per_step = 1.5 * all_reduce(g, grad_bytes);
    s.inter_node_bytes_per_step = all_reduce(m, grad_bytes / g);
  } else {
    double bytes = all_reduce(n, grad_bytes) * (index == kFullShard ? 1.5 : 1.0);
    // One flat ring over all GPUs: with several nodes every byte crosses the slowest link.
    (m > 1 ? s.inter_node_bytes_per_step : s.intra_node_bytes_per_step) = bytes;
  }
  return s;
}

// True when a is a strictly better choice than b (both fit): fewer inter-node bytes, then
// fewer intra-node bytes, then less sharding (the lower index). Bytes within 1e-9 are equal.
bool Better(const StrategyPlan& a, int ia, const StrategyPlan& b, int ib) {
  auto less = [](double x, double y) { return x < y - 1e-9 * std::max(std::fabs(y), 1.0); };
  if (less(a.inter_node_bytes_per_step, b.inter_node_bytes_per_step)) return true;
  if (less(b.inter_node_bytes_per_step, a.inter_node_bytes_per_step)) return false;
  if (less(a.intra_node_bytes_per_step, b.intra_node_bytes_per_step)) return true;
  if (less(b.intra_node_bytes_per_step, a.intra_node_bytes_per_step)) return false;
  return ia < ib;
}

std::string ExplainChoice(const PlanResult& r) {
  const auto& all = r.strategies;
  const StrategyPlan& best = all[r.recommended];
  std::vector<int> fitting, others;
  std::string not_fitting;
  for (int i = 0; i < static_cast<int>(all.size()); ++i) {
    if (all[i].fits) {
      fitting.push_back(i);
      if (i != r.recommended) others.push_back(i);
    } else {
      not_fitting += (not_fitting.empty() ? "" : ", ") + all[i].name + " needs " +
                     Gb(all[i].total_bytes) + " GB";
    }
  }
  std::string out = std::to_string(fitting.size()) + " of " + std::to_string(all.size()) +
                    " strategies fit in " + Gb(r.usable_bytes) + " GB";
  if (!not_fitting.empty()) out += " (" + not_fitting + ")";
  out += ". ";
  if (others.empty()) {
    return out + best.name + " is the only one that fits.";
  }
  // The runner-up decides which criterion to name.
  int runner = others[0];
  for (int i : others) {
    if (Better(all[i], i, all[runner], runner)) runner = i;
  }
  const StrategyPlan& second = all[runner];
  const bool single_node = r.input.nodes == 1;
  if (Better(best, r.recommended, second, runner) &&
      best.inter_node_bytes_per_step < second.inter_node_bytes_per_step) {
    std::string rivals;
    for (int i : others) {
      rivals +=
          (rivals.empty() ? "" : ", ") + all[i].name + " " + Gb(all[i].inter_node_bytes_per_step);
    }
    out += best.name +
           " sends the fewest bytes between nodes: " + Gb(best.inter_node_bytes_per_step) +
           " GB per GPU per step (" + rivals + " GB)";
    if (best.intra_node_bytes_per_step > 0) {
      out += "; its sharding traffic (" + Gb(best.intra_node_bytes_per_step) +
             " GB) stays on the fast intra-node link";
    }
    return out + ".";
  }
  std::string inter = single_node ? "One node: nothing crosses nodes"
                                  : "No fitting strategy sends fewer bytes between nodes (" +
                                        Gb(best.inter_node_bytes_per_step) + " GB per GPU)";
  if (best.intra_node_bytes_per_step < second.intra_node_bytes_per_step) {
    return out + inter + "; " + best.name +
           " sends the fewest bytes within a node: " + Gb(best.intra_node_bytes_per_step) +
           " GB per GPU per step (" + second.name + ": " + Gb(second.intra_node_bytes_per_step) +
           " GB).";
  }
  return out + inter + "; " + best.name + " sends as many bytes as " + second.name +
         " and shards less: fewer collectives per step, and the memory sharding would save is "
         "not needed (headroom " +
         Gb(best.headroom_bytes) + " GB).";
}

StatusOr<PlanResult> Compute(const PlanInput& input, bool with_suggestions);

// What to change when nothing fits; each line is checked by re-planning.
std::vector<std::string> Suggest(const PlanResult& r) {
  std::vector<std::string> out;
  auto best_of = [](const PlanResult& p) -> std::string {
    return p.recommended >= 0 ? p.strategies[p.recommended].name : "";
  };
  if (!r.input.act_ckpt) {
    PlanInput in = r.input;
    in.act_ckpt = true;
    auto p = Compute(in, false);
    std::string fit = p.ok() && p->recommended >= 0 ? "; then " + best_of(*p) + " fits" : "";
    if (p.ok()) {
      out.push_back("turn on activation checkpointing (--act-ckpt): activations " +
                    Gb(r.activation_bytes) + " -> " + Gb(p->activation_bytes) + " GB per GPU" +
                    fit);
    }
  }
  if (r.input.micro_batch > 1) {
    out.push_back(
        "use a smaller --micro-batch (activations grow linearly with it) and keep "
        "the global batch with gradient accumulation");
  }
  if (!r.input.fused_attention) {
    out.push_back(
        "use fused attention (--attention fused): the s x s score matrices are not "
        "stored");
  }
  // The smallest footprint data parallelism can reach: full_shard on many GPUs still holds
  // the gathered units, the gradients on their way to the shards, the head + loss and the
  // activations; the state (16P/N) shrinks with N.
  const StrategyPlan& fs = r.strategies[kFullShard];
  const double fixed = fs.gathered_bytes + fs.grad_buffer_bytes + fs.loss_bytes;
  const double state = (14.0 + r.input.grad_bytes) * static_cast<double>(r.parameters);
  double activations = r.activation_bytes;
  std::string with_ckpt;
  if (fixed + activations >= r.usable_bytes && !r.input.act_ckpt) {
    PlanInput in = r.input;
    in.act_ckpt = true;
    auto p = Compute(in, false);
    if (p.ok()) activations = p->activation_bytes;
    with_ckpt = "with --act-ckpt, ";
  }
  if (fixed + activations < r.usable_bytes) {
    // (When the current GPUs would do once --act-ckpt is on, the first suggestion says so.)
    const double needed = state / (r.usable_bytes - fixed - activations);
    const double gpus = std::max(2.0, std::ceil(needed));
    const double per_node = static_cast<double>(r.input.gpus_per_node);
    if (gpus > r.num_gpus) {
      out.push_back("more GPUs: " + with_ckpt + "full_shard fits on " + Num(gpus, 0) +
                    " GPUs (--nodes " + Num(std::ceil(gpus / per_node), 0) + " with " +
                    Num(per_node, 0) + " per node)");
    }
  } else {
    out.push_back(
        "sharding alone cannot help: the gathered units, the gradients on their way "
        "to the shards and the head + loss (" +
        Gb(fixed) + " GB) plus the activations (" + Gb(activations) + " GB) exceed " +
        Gb(r.usable_bytes) +
        " GB; shorten --seq-len, or split layers across GPUs with tensor or pipeline "
        "parallelism (not in ftrain)");
  }
  std::string adapters;
  for (const auto& a : r.adapters) {
    if (a.fits)
      adapters += (adapters.empty() ? "" : ", ") + a.name + " " + Gb(a.total_bytes) + " GB";
  }
  if (!adapters.empty()) {
    out.push_back("fine-tune with adapters instead of all weights, which fit: " + adapters +
                  " per GPU (the adapter rows below; ftrain train itself trains all weights)");
  }
  return out;
}

StatusOr<PlanResult> Compute(const PlanInput& input, bool with_suggestions) {
  FT_RETURN_IF_ERROR(ValidateInput(input));
  PlanResult r;
  r.input = input;
  const LlamaConfig* model = input.model ? &*input.model : nullptr;

  // Model size and shape.
  if (model) {
    r.parameters = model->NumParameters();
    r.parameters_source = input.model_source.empty() ? "model config" : input.model_source;
    r.layers = model->num_layers;
    r.hidden = model->hidden_size;
    r.heads = static_cast<double>(model->num_heads);
    r.intermediate = model->intermediate_size;
    r.kv_dim = model->num_kv_heads * model->HeadDim();
    r.largest_unit_parameters = model->LargestUnitParameters();
    r.vocab = model->vocab_size;
    r.root_unit_parameters = model->RootUnitParameters();
    r.head_parameters =
        model->tie_embeddings ? model->EmbeddingParameters() : model->HeadParameters();
    r.layer_unit_parameters = model->LayerParameters();
  } else {
    r.parameters = std::llround(*input.parameters);
    r.parameters_source = "--params";
    const StandardShape& shape = NearestShape(*input.parameters);
    r.layers = input.layers ? *input.layers : shape.layers;
    r.hidden = input.hidden ? *input.hidden : shape.hidden;
    r.layers_assumed = !input.layers;
    r.hidden_assumed = !input.hidden;
    if (r.layers_assumed || r.hidden_assumed) r.assumed_shape = shape.name;
    r.heads = static_cast<double>(r.hidden) / kHeadDim;
    // Llama's SwiGLU width: 8h/3 rounded up to a multiple of 256 (11008 for h = 4096).
    r.intermediate =
        256 * static_cast<int64_t>(std::ceil(8.0 * static_cast<double>(r.hidden) / 3.0 / 256.0));
    r.kv_dim = r.hidden;  // no grouped-query attention assumed
    // Every parameter assigned to some layer: a slight over-estimate of the largest unit.
    r.largest_unit_parameters = std::max<int64_t>(1, r.parameters / r.layers);
    r.largest_unit_estimated = true;
    // The units as a Llama of this shape has them: an untied 32000-token embedding and head.
    r.vocab = kAssumedVocab;
    r.vocab_assumed = true;
    r.head_parameters = r.vocab * r.hidden;
    r.root_unit_parameters = std::min(r.parameters, 2 * r.head_parameters + r.hidden);
    r.layer_unit_parameters =
        std::max<int64_t>(1, (r.parameters - r.root_unit_parameters) / r.layers);
  }
  if (!r.input.seq_len) {
    r.input.seq_len = model ? model->max_seq_len : static_cast<int64_t>(kDefaultSeqLen);
  }

  // Activations: what ftrain's Llama layer leaves in autograd's graph (docs/plan.md).
  const double s = static_cast<double>(*r.input.seq_len);
  const double b = static_cast<double>(input.micro_batch);
  const double h = static_cast<double>(r.hidden);
  const double l = static_cast<double>(r.layers);
  // Eager attention also keeps the [s, s] scores per head: Korthikanti et al.'s 5as/h.
  const double attention_scores = input.fused_attention ? 0.0 : 5.0 * r.heads * s / h;
  r.activation_bytes_per_layer =
      s * b * (plan_internal::LayerActivationBytesPerToken(r) + h * attention_scores);
  r.activation_bytes =
      l * r.activation_bytes_per_layer -
      plan_internal::RecomputedLayers(r) * (r.activation_bytes_per_layer - 2.0 * s * b * h);
  if (input.act_ckpt) r.activation_bytes += r.activation_bytes_per_layer;  // one recomputed
  // The head + loss: a chunk's float32 logits (softmax in place) and bf16 d logits, lm_head's
  // float32 gradient, then scaled and cast to bf16, and the normed hidden states [N, H] and
  // their gradient in bf16.
  const double n_tokens = s * b;
  const double v = static_cast<double>(r.vocab);
  const double chunk = std::min(n_tokens, static_cast<double>(LossChunkTokens(r.vocab)));
  r.loss_bytes =
      chunk * v * (4 + kWeightBytes) + v * h * (4 + kWeightBytes) + 2 * kWeightBytes * n_tokens * h;

  r.num_gpus = static_cast<double>(input.nodes) * static_cast<double>(input.gpus_per_node);
  if (!input.gpu_mem_given && !input.gpu.empty()) {
    FT_ASSIGN_OR_RETURN(GpuSpec gpu, FindGpu(input.gpu));
    r.input.gpu_mem_gb = gpu.memory_gb;
  }
  r.usable_bytes = r.input.gpu_mem_gb * kGB * (1.0 - input.reserve_fraction);
  FT_ASSIGN_OR_RETURN(r.adapters, plan_internal::ComputeAdapters(r));
  for (int i = 0; i < kNumStrategies; ++i) {
    r.strategies.push_back(Strategy(static_cast<StrategyIndex>(i), r));
  }
  for (int i = 0; i < kNumStrategies; ++i) {
    if (!r.strategies[i].fits) continue;
    if (r.recommended < 0 ||
        Better(r.strategies[i], i, r.strategies[r.recommended], r.recommended)) {
      r.recommended = i;
    }
  }
  if (r.recommended >= 0) {
    r.reason = ExplainChoice(r);
  } else {
    const StrategyPlan* smallest = &r.strategies[0];
    for (const auto& s : r.strategies) {
      if (s.total_bytes < smallest->total_bytes) smallest = &s;
    }
    r.reason = "none of the 5 strategies fits in " + Gb(r.usable_bytes) +
               " GB per GPU; the smallest, " + smallest->name + ", needs " +
               Gb(smallest->total_bytes) + " GB";
    if (with_suggestions) r.suggestions = Suggest(r);
  }

  // Young (1974) / Daly (2006) first order: T = sqrt(2 * stall * MTBF).
  const double mtbf_s = input.mtbf_hours * 3600.0;
  r.checkpoint_interval_s = std::sqrt(2.0 * input.ckpt_stall_s * mtbf_s);
  r.work_lost_s = r.checkpoint_interval_s / 2.0;
  r.stall_overhead = input.ckpt_stall_s / r.checkpoint_interval_s;
  r.rework_overhead = r.work_lost_s / mtbf_s;
  r.memory_interval_s = std::sqrt(2.0 * input.memory_stall_s * mtbf_s);
  r.memory_work_lost_s = r.memory_interval_s / 2.0;
  r.memory_overhead = input.memory_stall_s / r.memory_interval_s + r.memory_work_lost_s / mtbf_s;
  const StrategyPlan& host = r.strategies[r.recommended >= 0 ? r.recommended : kFullShard];
  r.host_bytes_per_rank = host.host_bytes_per_rank;
  r.host_bytes_per_node = host.host_bytes_per_node;

  FT_ASSIGN_OR_RETURN(r.time, plan_internal::ComputeTime(r));
  return r;
}

std::string DurationText(double seconds) {
  if (seconds >= 3600 && std::fmod(seconds, 3600) == 0) return Num(seconds / 3600, 0) + " h";
  if (seconds >= 3600) return Num(seconds / 3600, 1) + " h";
  return Num(seconds, seconds == std::floor(seconds) ? 0 : 1) + " s";
}

}  // namespace

StatusOr<PlanResult> MakePlan(const PlanInput& input) { return Compute(input, true); }

std::string FormatPlanText(const PlanResult& r) {
  const PlanInput& in = r.input;
  std::ostringstream o;
  const double p = static_cast<double>(r.parameters);
  o << "model: " << (p >= 1e9 ? Num(p / 1e9, 2) + "B" : Num(p / 1e6, 1) + "M") << " parameters ("
    << r.parameters << ", from " << r.parameters_source << "), " << r.layers << " layers"
    << (r.layers_assumed ? " (assumed)" : "") << ", hidden " << r.hidden
    << (r.hidden_assumed ? " (assumed)" : "") << ", "
    << Num(r.heads, r.heads == std::floor(r.heads) ? 0 : 1) << " heads\n";
  if (!r.assumed_shape.empty()) {
    o << "  assumed: the standard Llama " << r.assumed_shape
      << " shape, the nearest to this parameter count; give --layers/--hidden or --model to "
         "be exact\n";
  }
  auto plural = [](double n, const char* what) {
    return Num(n, 0) + " " + what + (n == 1 ? "" : "s");
  };
  o << "cluster: " << plural(static_cast<double>(in.nodes), "node") << " x "
    << plural(static_cast<double>(in.gpus_per_node), "GPU") << " = " << plural(r.num_gpus, "GPU")
    << " of " << Num(in.gpu_mem_gb, 1) << " GB" << (in.gpu.empty() ? "" : " (" + in.gpu + ")")
    << "; usable " << Gb(r.usable_bytes) << " GB per GPU after a "
    << Num(in.reserve_fraction * 100, 0)
    << "% reserve (allocator fragmentation, CUDA context, NCCL buffers)\n";
  o << "activations: seq-len " << *in.seq_len << ", micro-batch " << in.micro_batch
    << ", activation checkpointing "
    << (!in.act_ckpt      ? std::string("off")
        : in.ac_every > 1 ? "every " + std::to_string(in.ac_every) + " layers (selective)"
                          : std::string("on"))
    << ", " << (in.fused_attention ? "fused" : "eager") << " attention: " << Gb(r.activation_bytes)
    << " GB per GPU\n";
  o << "state: mixed-precision AdamW, " << Num(14 + in.grad_bytes, 0)
    << " bytes/parameter = bf16 weights 2 + " << (in.grad_bytes == 4 ? "fp32" : "bf16") << " grads "
    << Num(in.grad_bytes, 0) << " + fp32 master 4 + Adam m,v 8\n\n";

  o << "memory per GPU in GB (1 GB = 1e9 bytes); traffic in GB sent per GPU per step\n";
  const size_t kName = 15, kCol = 8;
  const char* headers[] = {"weights", "grads",    "master",    "adam",     "gather",
                           "gradbuf", "loss",     "activ",     "state",    "total",
                           "fits",    "headroom", "internode", "intranode"};
  o << Pad("strategy", kName, true);
  for (const char* hdr : headers) o << Pad(hdr, std::max(kCol, std::string(hdr).size() + 1));
  o << "\n";
  for (size_t i = 0; i < r.strategies.size(); ++i) {
    const StrategyPlan& s = r.strategies[i];
    std::string name = s.name + (static_cast<int>(i) == r.recommended ? " *" : "");
    o << Pad(name, kName, true) << Pad(Gb(s.weights_bytes), kCol) << Pad(Gb(s.grads_bytes), kCol)
      << Pad(Gb(s.master_bytes), kCol) << Pad(Gb(s.moments_bytes), kCol)
      << Pad(Gb(s.gathered_bytes), kCol) << Pad(Gb(s.grad_buffer_bytes), kCol)
      << Pad(Gb(s.loss_bytes), kCol) << Pad(Gb(s.activation_bytes), kCol)
      << Pad(Gb(s.state_bytes), kCol) << Pad(Gb(s.total_bytes), kCol)
      << Pad(s.fits ? "yes" : "no", kCol) << Pad(Gb(s.headroom_bytes), 9)
      << Pad(Gb(s.inter_node_bytes_per_step), 10) << Pad(Gb(s.intra_node_bytes_per_step), 10)
      << "\n";
  }
  const double gathered = plan_internal::GatheredLayers(r);
  o << "  gather: bf16 parameters of the root unit (" << r.root_unit_parameters
    << ", embeddings + final norm + lm_head) + " << Num(gathered, 0) << " layers ("
    << r.layer_unit_parameters << " each: "
    << (!r.input.act_ckpt      ? "without activation checkpointing every layer's saved graph "
                                 "holds its weights until its backward"
        : r.input.ac_every > 1 ? "the layers not recomputed hold theirs until their backward, "
                                 "+ the one recomputed"
                               : "computed + prefetched")
    << ")" << (r.vocab_assumed ? ", assuming a 32000-token vocabulary" : "")
    << "; only sharded-weight strategies gather\n"
    << "  gradbuf: gradients on their way to the shards (lm_head's, one unit's in bf16 and "
       "flattened, and the one before it being reduce-scattered)\n"
    << "  loss: the head + loss in chunks of "
    << std::min<int64_t>(LossChunkTokens(r.vocab), *in.seq_len * in.micro_batch)
    << " tokens (no [tokens, vocab] logits kept), lm_head's float32 gradient\n\n";

  if (r.recommended >= 0) {
    o << "recommended: " << r.strategies[r.recommended].name << "\n  why: " << r.reason << "\n";
  } else {
    o << "recommended: none -- " << r.reason << "\n";
    for (const auto& s : r.suggestions) o << "  try: " << s << "\n";
  }
  o << "  rule: among strategies that fit, fewest inter-node bytes per GPU per step, then fewest "
       "intra-node bytes, then the least sharding\n\n";
  plan_internal::AppendAdapterText(r, o);

  o << "checkpoint every " << Num(r.checkpoint_interval_s / 60, 1) << " min ("
    << Num(r.checkpoint_interval_s, 0) << " s) = sqrt(2 x " << DurationText(in.ckpt_stall_s)
    << " x " << DurationText(in.mtbf_hours * 3600) << ") (Young/Daly); expected work lost per "
    << "failure " << Num(r.work_lost_s / 60, 1) << " min; overhead "
    << Num(100 * (r.stall_overhead + r.rework_overhead), 1) << "% ("
    << Num(100 * r.stall_overhead, 1) << "% checkpoint stalls + " << Num(100 * r.rework_overhead, 1)
    << "% rework after failures)\n";
  o << "memory tier every " << Num(r.memory_interval_s, 0) << " s = sqrt(2 x "
    << DurationText(in.memory_stall_s) << " x " << DurationText(in.mtbf_hours * 3600)
    << ") (Young/Daly per tier; ckpt.memory_every_steps = that / the step time); expected work "
    << "lost per failure restorable from memory " << Num(r.memory_work_lost_s / 60, 1)
    << " min instead of " << Num(r.work_lost_s / 60, 1) << " min (a requeue onto new nodes "
    << "still reads the disk); overhead " << Num(100 * r.memory_overhead, 1) << "%\n";
  const StrategyPlan& host = r.strategies[r.recommended >= 0 ? r.recommended : kFullShard];
  o << "host memory (ckptd) per rank up to " << Gb(r.host_bytes_per_rank) << " GB, per node up to "
    << Gb(r.host_bytes_per_node) << " GB: " << kCkptdSlotsPerRank << " slots + "
    << (in.nodes > 1 ? kBuddyReplicasPerRank : 0) << " buddy replicas of a "
    << Gb(host.snapshot_bytes) << " GB snapshot (" << host.name
    << " shard: master, m, v, bf16; a replicated state is written, and replicated, by its first "
    << "copy only); ckptd --memory-gb and FTRAIN_REPLICA_MEMORY_GB (8 GiB each by default) "
    << "must hold it\n";
  plan_internal::AppendTimeText(r, o);
  return o.str();
}

std::string FormatPlanJson(const PlanResult& r) {
  using json = nlohmann::ordered_json;
  const PlanInput& in = r.input;
  json strategies = json::array();
  for (const auto& s : r.strategies) {
    strategies.push_back({
        {"name", s.name},
        {"weights_bytes", Bytes(s.weights_bytes)},
        {"grads_bytes", Bytes(s.grads_bytes)},
        {"master_bytes", Bytes(s.master_bytes)},
        {"moments_bytes", Bytes(s.moments_bytes)},
        {"gathered_bytes", Bytes(s.gathered_bytes)},
        {"grad_buffer_bytes", Bytes(s.grad_buffer_bytes)},
        {"loss_bytes", Bytes(s.loss_bytes)},
        {"activation_bytes", Bytes(s.activation_bytes)},
        {"state_bytes_per_gpu", Bytes(s.state_bytes)},
        {"total_bytes_per_gpu", Bytes(s.total_bytes)},
        {"fits", s.fits},
        {"headroom_bytes", Bytes(s.headroom_bytes)},
        {"inter_node_bytes_per_step", Bytes(s.inter_node_bytes_per_step)},
        {"intra_node_bytes_per_step", Bytes(s.intra_node_bytes_per_step)},
        {"snapshot_bytes", Bytes(s.snapshot_bytes)},
        {"host_bytes_per_rank", Bytes(s.host_bytes_per_rank)},
        {"host_bytes_per_node", Bytes(s.host_bytes_per_node)},
    });
  }
  // Results first, then the inputs they came from, then the per-strategy detail.
  json j = {
      {"recommended", r.recommended >= 0 ? json(r.strategies[r.recommended].name) : json(nullptr)},
      {"reason", r.reason},
      {"suggestions", r.suggestions},
      {"checkpoint_interval_s", r.checkpoint_interval_s},
      {"expected_work_lost_s", r.work_lost_s},
      {"checkpoint_overhead_fraction", r.stall_overhead + r.rework_overhead},
      {"mtbf_s", in.mtbf_hours * 3600.0},
      {"ckpt_stall_s", in.ckpt_stall_s},
      {"memory_interval_s", r.memory_interval_s},
      {"expected_work_lost_memory_s", r.memory_work_lost_s},
      {"memory_overhead_fraction", r.memory_overhead},
      {"memory_stall_s", in.memory_stall_s},
      {"host_bytes_per_rank", Bytes(r.host_bytes_per_rank)},
      {"host_bytes_per_node", Bytes(r.host_bytes_per_node)},
      {"ckptd_slots_per_rank", kCkptdSlotsPerRank},
      {"buddy_replicas_per_rank", kBuddyReplicasPerRank},
      {"parameters", r.parameters},
      {"parameters_source", r.parameters_source},
      {"layers", r.layers},
      {"hidden", r.hidden},
      {"intermediate", r.intermediate},
      {"kv_dim", r.kv_dim},
      {"heads", r.heads},
      {"layers_assumed", r.layers_assumed},
      {"hidden_assumed", r.hidden_assumed},
      {"assumed_shape", r.assumed_shape.empty() ? json(nullptr) : json(r.assumed_shape)},
      {"largest_unit_parameters", r.largest_unit_parameters},
      {"root_unit_parameters", r.root_unit_parameters},
      {"layer_unit_parameters", r.layer_unit_parameters},
      {"vocab", r.vocab},
      {"vocab_assumed", r.vocab_assumed},
      {"grad_bytes_per_parameter", in.grad_bytes},
      {"nodes", in.nodes},
      {"gpus_per_node", in.gpus_per_node},
      {"gpu", in.gpu.empty() ? json(nullptr) : json(in.gpu)},
      {"gpu_mem_bytes", Bytes(in.gpu_mem_gb * kGB)},
      {"reserve_fraction", in.reserve_fraction},
      {"usable_bytes_per_gpu", Bytes(r.usable_bytes)},
      {"seq_len", *in.seq_len},
      {"micro_batch", in.micro_batch},
      {"act_ckpt", in.act_ckpt},
      {"ac_every", in.ac_every},
      {"attention", in.fused_attention ? "fused" : "eager"},
      {"activation_bytes_per_gpu", Bytes(r.activation_bytes)},
      {"loss_bytes_per_gpu", Bytes(r.loss_bytes)},
      {"strategies", strategies},
      {"adapters", plan_internal::AdaptersJson(r)},
      {"time", plan_internal::TimeJson(r)},
  };
  return j.dump(2) + "\n";
}

}  // namespace ftrain
