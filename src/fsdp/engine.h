// The FSDP engine: applies sharding, mixed precision and activation checkpointing to an
// unchanged LlamaModel (the model knows nothing about it). Sharding units: one per decoder
// block, plus a root unit (embeddings, final norm, lm_head) that is gathered for the whole
// micro-batch. Each unit's parameters live as one flat buffer split with comm::ShardOf across
// the shard group; fp32 master weights, AdamW moments and gradients exist only as shards.
//
// Strategies (dist.sharding):
//   full_shard     shard over the world; gather a unit before its forward, free it after,
//                  re-gather for its backward, reduce-scatter its gradients.
//   shard_grad_op  like full_shard, but keep a unit gathered from its forward to its
//                  backward (ZeRO-2: less communication, more memory).
//   no_shard       every rank holds everything; gradients are all-reduced (DDP).
//   hybrid_shard   full_shard within a node (intra-node group) and all-reduce of the
//                  gradient shards across nodes (inter-node group).
// Determinism: collectives are issued in a fixed order, reductions have a fixed order, and
// gradient accumulation adds micro-batches in order; two runs give the same bits.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "core/sharding.h"
#include "core/status.h"
#include "fsdp/adamw.h"
#include "fsdp/stream_waits.h"
#include "model/llama.h"

namespace ftrain::fsdp {

// While alive, torch::empty does not fill what it allocates even in deterministic mode (a GPU
// run): for buffers every element of which is written before it is read, and for tensors
// that are allocated only for their shapes and never touched (their pages never become
// resident). Process-wide: hold it only around such allocations on the training thread.
class NoUninitializedFill {
 public:
  NoUninitializedFill();
  ~NoUninitializedFill();
  NoUninitializedFill(const NoUninitializedFill&) = delete;
  NoUninitializedFill& operator=(const NoUninitializedFill&) = delete;

 private:
  bool fill_;
};

struct FsdpConfig {
  Sharding sharding = Sharding::kFullShard;
  torch::ScalarType param_dtype = torch::kFloat32;   // compute and all-gather dtype
  torch::ScalarType reduce_dtype = torch::kFloat32;  // gradient reduction dtype
  bool activation_checkpointing = true;
  // Selective by layer: with checkpointing on, layers 0, N, 2N, ... are recomputed in the
  // backward; the others keep their activations (and, sharded, their gathered parameters,
  // which the saved graph holds) until their backward. 1: every layer.
  int ac_every = 1;
  bool prefetch = true;  // all-gather the next unit while the current one computes
  // Where every flat shard, gathered unit, gradient buffer and AdamW moment lives. The same
  // code runs on both: only this option differs between a CPU and a GPU run.
  torch::Device device = torch::kCPU;
  // Set: every parameter starts at model::LlamaModelImpl::InitialValue(name, shape, seed),
  // computed unit by unit while sharding, and the model's own (torch::empty, never touched)
  // tensors are not read, so a rank holds one unit's full values at a time instead of the
  // whole fp32 model (28 GB per rank for 7B). Bit-identical to InitWeights(seed) + Create.
  // Unset: the model's current values are sharded (safetensors import).
  std::optional<uint64_t> init_seed;
  // Set (init_seed unset): neither is computed or read; every master shard starts at zero and
  // the caller fills it with LoadState (from a checkpoint, or from the base model's files
  // range by range), so no rank ever holds more than its shards plus one read buffer.
  bool defer_init = false;
  // dist.reduce = exact (fsdp/exact.h): each micro-batch's gradient becomes fixed-point digits
  // summed as integers over micro-batches and ranks, and the norm and loss are integer sums:
  // the step's bits do not depend on the number of ranks. Full or grad-op sharding over the
  // world only (no replicas), fp32 reduce dtype. The step's gradient is the sum over
  // `exact_micro_batches` micro-batches (all ranks together) divided by it.
  bool exact_reduce = false;
  int64_t exact_micro_batches = 1;
};

// The groups the engine communicates over. `shard` may be null (a group of one rank);
// `replicate` may be null (no replication). The engine does not own them.
struct FsdpGroups {
  comm::Comm* shard = nullptr;
  // The same ranks as `shard` on a communicator of their own for the gradient
  // reduce-scatters (its own stream on a GPU); null: `shard`.
  comm::Comm* shard_reduce = nullptr;
  comm::Comm* replicate = nullptr;
  int world_size = 1;  // shard size x replicate size: the data-parallel degree
};

// The groups a sharding strategy uses, from the job's world group and its node groups
// (intra-node: this node's ranks; inter-node: the same local rank on every node), and the
// reduce-scatter communicators over world and intra-node (null: the groups themselves).
FsdpGroups GroupsFor(Sharding s, comm::Comm& world, comm::Comm& intra_node, comm::Comm& inter_node,
                     comm::Comm* world_reduce = nullptr, comm::Comm* intra_reduce = nullptr);

struct StepStats {
  double grad_norm = 0;   // before clipping
  double loss_sum = 0;    // this rank's micro-batch losses (unscaled means), summed
  int micro_batches = 0;  // how many
  // Exposed communication this step: how long the compute stream stood still waiting for
  // collectives (CUDA events on a GPU; the host's waits on the CPU), and its part during the
  // micro-batches (the rest: the optimizer's all-reduces).
  double comm_wait_s = 0;
  double comm_wait_fb_s = 0;
  uint64_t comm_bytes = 0;  // bytes this rank sent in collectives this step (estimate)
  // The update was not applied (see FsdpEngine::Step): master weights, moments and the
  // optimizer step count are as before the step, its gradients are dropped.
  bool skipped = false;
};

// A numeric fault armed for the next optimizer step (core/fault_inject.h; testing only).
struct InjectedFault {
  bool nan_loss = false;   // every micro-batch's loss (so every gradient) becomes NaN
  bool nan_grad = false;   // one gradient element becomes NaN before the reductions
  double grad_factor = 1;  // the backward runs on loss x factor: a gradient spike
  bool any() const { return nan_loss || nan_grad || grad_factor != 1; }
};

// What the engine holds per rank, in bytes, under the names of `ftrain plan --json`'s strategy
// rows: the sharded state exactly, and the peaks of the buffers a step comes and goes through
// since the last ResetMemoryPeaks (the gathered units; the gradients on their way to the
// shards: the unit's and the root's parameter gradients and the flattened reduce-scatter
// buffers in flight). Activations and the head + loss live in autograd's graph: not counted
// here (the process's peak memory shows them).
struct MemoryAccount {
  uint64_t weights_bytes = 0;      // compute-dtype shards (0 when they alias fp32 master shards)
  uint64_t grads_bytes = 0;        // gradient shards (reduce dtype)
  uint64_t master_bytes = 0;       // fp32 master shards
  uint64_t moments_bytes = 0;      // AdamW exp_avg + exp_avg_sq shards
  uint64_t gathered_bytes = 0;     // peak of gathered units alive at once
  uint64_t grad_buffer_bytes = 0;  // peak of gradients between backward and their shard
};

// One contiguous piece of a parameter held by this rank, for checkpointing.
struct ShardPiece {
  std::string kind;            // "master", "optim/exp_avg", "optim/exp_avg_sq", "model" (bf16 only)
  std::string name;            // Hugging Face parameter name
  torch::Tensor data;          // a 1-D view into the engine's buffer (fp32 or bf16)
  std::vector<int64_t> shape;  // global shape
  int64_t offset = 0;          // in the flattened parameter
};

class FsdpEngine {
 public:
  static StatusOr<std::unique_ptr<FsdpEngine>> Create(model::LlamaModel model,
                                                      const FsdpConfig& config,
                                                      const FsdpGroups& groups);
  ~FsdpEngine();

  // Forward and backward of one micro-batch: tokens [B, T+1] int64 (inputs are [:, :-1],
  // targets [:, 1:]; on a GPU already on the device, their range checked by the caller on the
  // host). The loss is multiplied by loss_scale (1/K for K accumulation steps) before
  // backward. Each unit's gradient is reduce-scattered into its shard as its backward ends;
  // on the last micro-batch of a step the complete shards are all-reduced across replicas.
  // Returns the unscaled mean loss of this micro-batch as a detached float32 scalar on the
  // engine's device: reading it synchronises the host with the device, so the trainer does
  // not (Step() returns the sum with its one synchronisation).
  // With exact_reduce, `contributes` false runs the micro-batch for its collectives only (a
  // rank with one fewer micro-batch than others): its gradient and loss count as exact zeros.
  StatusOr<torch::Tensor> ForwardBackward(const torch::Tensor& tokens, double loss_scale,
                                          bool last_micro_batch, bool contributes = true);

  // Loss of one micro-batch without gradients (held-out evaluation): tokens [B, T+1] as for
  // ForwardBackward, the same gathers and the same compute dtype and device, each unit
  // released after its forward. Collective over the shard group. Nothing the training step
  // owns changes: master, moment and gradient shards, the accumulation count, the comm
  // counters of the next StepStats. Returns the mean token loss (float32).
  StatusOr<float> Forward(const torch::Tensor& tokens);

  // Waits for the step's gradient reductions, clips by the global gradient norm (max_norm <=
  // 0: no clipping), applies AdamW (fused) with learning rate `lr`, refreshes the
  // compute-dtype parameter shards and starts the next step's gradients afresh. The host
  // synchronises with the device once: for the norm and the step's summed loss together.
  //
  // With the non-finite guard on, a step whose global gradient norm is not finite, or
  // whose norm `skip_if` rejects (the same value on every rank, so every rank decides
  // alike), is skipped: StepStats::skipped, nothing of the optimizer state changes.
  StatusOr<StepStats> Step(const AdamWConfig& adamw, double lr, double max_norm,
                           const std::function<bool(double grad_norm)>& skip_if = {});

  // The non-finite guard (off by default). On: a non-finite loss on any rank makes the
  // step's global gradient norm NaN on every rank, folded on the device into the reductions
  // the step already runs (the norm's all-reduce; across replicas, the gradient all-reduce),
  // so it costs no collective and no host synchronisation; and Step skips such steps.
  void set_guard_nonfinite(bool on) { guard_nonfinite_ = on; }
  // Arms `f` for the next step (cleared by Step).
  void InjectFault(const InjectedFault& f) { fault_ = f; }

  int64_t optimizer_step() const { return optimizer_step_; }
  void set_optimizer_step(int64_t s) { optimizer_step_ = s; }

  // The first failure of the groups this engine communicates over (comm::Comm::Health):
  // after a host synchronisation, a non-OK status means some collective of this step was
  // aborted and its results are not to be trusted.
  Status CommHealth() const;

  // Whether every value of this rank's persistent state (master weights, moments, compute-
  // dtype shards) is finite: Corruption naming the first unit and kind that is not. One
  // host synchronisation; for checkpoint time, not every step.
  Status CheckFinite() const;

  // Every piece of persistent state this rank holds (views, not copies).
  std::vector<ShardPiece> StatePieces() const;
  // Whether this rank writes its tensor pieces to checkpoints: replicas (hybrid_shard across
  // nodes, no_shard across ranks) hold identical shards, so only the first replica writes.
  bool WritesTensorState() const { return !groups_.replicate || groups_.replicate->rank() == 0; }
  // Fills this rank's state by calling `read` for every piece (kind, name, offset, length,
  // destination). Model (bf16) pieces are re-derived from the master weights.
  Status LoadState(
      const std::function<Status(const std::string& kind, const std::string& name, int64_t offset,
                                 int64_t length, torch::Tensor dst)>& read);
  // Every parameter's Hugging Face name and global shape, in unit order (the model's list:
  // what a base model's files must hold).
  std::vector<std::pair<std::string, std::vector<int64_t>>> ParameterShapes() const;
  // Gathers the full fp32 master weights of every parameter (collective: all ranks call it).
  StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> GatherFullParameters();

  // Bytes of persistent state per rank: parameter, gradient, master and moment shards.
  uint64_t PersistentBytes() const;
  MemoryAccount Memory() const;
  void ResetMemoryPeaks() {
    gathered_peak_ = gathered_live_;
    grad_buffer_peak_ = 0;
  }
  int64_t NumParameters() const;
  const FsdpConfig& config() const { return config_; }

 private:
  struct Unit;
  struct Reduction;
  // Unit gathers the host may run ahead of the compute stream by (stream_waits.h).
  static constexpr size_t kReleasesPending = 2;
  FsdpEngine() = default;
  Status Gather(Unit& u);
  Status WaitGather(Unit& u);
  void Attach(Unit& u);
  // Gather (and wait for) u and attach its parameters; with prefetch, then start gathering
  // `next` (nullptr: none) so that it overlaps u's compute.
  Status ReadyUnit(Unit& u, Unit* next);
  void Release(Unit& u);
  // After u's backward: its parameters' gradients into its shard (one shard rank: added in
  // place; else flattened and reduce-scattered, queued in reductions_). The last
  // micro-batch's complete shard is then all-reduced across the replicas.
  Status ReduceUnitGrads(Unit& u, bool last_micro_batch);
  // exact_reduce (engine_exact.cc): u's gradient as digits under block bins agreed over the
  // shard group (an all-reduce MAX), reduce-scattered as int64; FinishExact adds a finished
  // reduction into u's digit shard.
  Status ReduceUnitGradsExact(Unit& u);
  void FinishExact(Reduction& r);
  void AddExactLoss(const torch::Tensor& loss);
  // The step's fp32 gradient shards from the digit shards; false when some block of the step
  // held inf or NaN (the same answer on every rank: the bins are agreed).
  bool ExactGradients();
  // The squared norm and the summed loss as integer sums (one all-reduce MAX, one SUM).
  StatusOr<double> ExactSquaredNorm(const std::vector<torch::Tensor>& grads, bool finite);
  // The gradient bytes alive as u's are about to be flattened: u's and the root's parameter
  // gradients, the new flat buffer and the reductions in flight; raises the peak.
  void NoteGradBuffers(const Unit& u, uint64_t flat_bytes);
  // Waits for the oldest reductions until at most `keep` are in flight, adding each result
  // into its unit's shard (and, on the last micro-batch, starting its all-reduce).
  Status FinishReductions(size_t keep, bool last_micro_batch);
  void StartAllReduce(Unit& u);
  // The guard's fold: `t` (one element) becomes NaN when the step's loss is not finite.
  void FoldLossInto(torch::Tensor t) const;
  // The armed nan_grad fault: one element of u's first gradient becomes NaN.
  void InjectNanGrad(Unit& u);
  Status WaitAllReduces();
  StatusOr<double> GlobalSquaredNorm(const std::vector<torch::Tensor>& grads);
  // The start of both forwards (training and eval): a [B, T+1] batch split into inputs
  // [:, :-1] and targets [:, 1:], the root unit gathered and attached (with prefetch, layer
  // 0's gather started), the inputs embedded under the caller's grad mode.
  struct ForwardStart {
    torch::Tensor embedded;  // [B, T, hidden]
    torch::Tensor targets;   // [B, T]
  };
  StatusOr<ForwardStart> BeginForward(const torch::Tensor& tokens);
  bool ReshardAfterForward(int layer) const;
  // Whether the backward recomputes layer `layer` (activation checkpointing, ac_every).
  bool Recomputes(int layer) const {
    return config_.activation_checkpointing && layer % std::max(1, config_.ac_every) == 0;
  }
  // A unit's moments, compute-dtype shard and gradient shard, once its master exists.
  void FinishUnitState(Unit& u) const;
  bool KeepsFullParams() const { return config_.sharding == Sharding::kNoShard; }
  torch::TensorOptions Opts(torch::ScalarType dtype) const {
    return torch::TensorOptions(dtype).device(config_.device);
  }

  model::LlamaModel model_{nullptr};
  CommWaits waits_;  // on the engine's device's stream (set by Create)
  GatherLimit gather_limit_{nullptr, kReleasesPending};
  FsdpConfig config_;
  FsdpGroups groups_;
  std::vector<std::unique_ptr<Unit>> units_;  // [0] root, [1..L] layers
  // Reduce-scatters in flight: FSDP2's bound, so that at most this many flattened unit
  // gradients are alive next to the one being computed.
  static constexpr size_t kReductionsInFlight = 1;
  std::deque<Reduction> reductions_;
  std::vector<std::unique_ptr<comm::Work>> all_reduces_;  // the step's, across replicas
  torch::Tensor loss_sum_;    // the step's micro-batch losses so far, on the device
  double last_loss_sum_ = 0;  // read back by GlobalSquaredNorm
  int64_t optimizer_step_ = 0;
  int micro_batches_ = 0;  // since the last Step
  uint64_t comm_bytes_ = 0;
  uint64_t gathered_live_ = 0, gathered_peak_ = 0, grad_buffer_peak_ = 0;
  bool guard_nonfinite_ = false;
  bool loss_folded_ = false;  // this step's loss already folded into a replicated gradient
  bool contributes_ = true;   // the current micro-batch's gradient counts (exact_reduce)
  torch::Tensor exact_loss_;  // exact_reduce: int64 [2]: sum of rint(loss 2^32), bad losses
  InjectedFault fault_;       // armed for the current step (testing only)
};

}  // namespace ftrain::fsdp
