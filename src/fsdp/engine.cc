// FsdpEngine: flat sharded units, gather/free around compute, reduce-scatter of gradients,
// sharded AdamW. The schedule of one micro-batch (with prefetch):
//   gather root; embed; [gather L0]
//   for each layer i: wait gather i; gather i+1; forward i (saving its input); free i
//   head + loss; backward of head
//   for each layer i from last: re-gather i (and prefetch i-1); recompute + backward i;
//       flatten i's gradients into one buffer and reduce-scatter it into i's gradient shard
//       (added to the micro-batches before); free i; at most two reductions in flight
//   backward of embed; reduce-scatter root's gradients; wait for the reductions
// On the last micro-batch of a step each unit's gradient shard, once complete, is all-reduced
// across the replicas (hybrid_shard, no_shard) right away, overlapping the rest of the
// backward. So no rank ever holds more than the unit being computed at full size: gradients
// live as shards between micro-batches (FSDP2's schedule).
#include "fsdp/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/log.h"
#include "fsdp/engine_units.h"
#include "fsdp/stream_waits.h"
#include "trace/trace_range.h"

namespace ftrain::fsdp {

namespace {

using Clock = std::chrono::steady_clock;

size_t ElemSize(torch::ScalarType t) { return torch::elementSize(t); }

// A CPU buffer every element of which is written before it is read.
torch::Tensor EmptyToOverwrite(at::IntArrayRef shape, torch::ScalarType dtype) {
  NoUninitializedFill no_fill;
  return torch::empty(shape, dtype);
}

}  // namespace

NoUninitializedFill::NoUninitializedFill()
    : fill_(at::globalContext().deterministicFillUninitializedMemory()) {
  at::globalContext().setDeterministicFillUninitializedMemory(false);
}
NoUninitializedFill::~NoUninitializedFill() {
  at::globalContext().setDeterministicFillUninitializedMemory(fill_);
}

FsdpGroups GroupsFor(Sharding s, comm::Comm& world, comm::Comm& intra_node, comm::Comm& inter_node,
                     comm::Comm* world_reduce, comm::Comm* intra_reduce) {
  FsdpGroups g;
  g.world_size = world.size();
  switch (s) {
    case Sharding::kFullShard:
    case Sharding::kShardGradOp:
      g.shard = &world;
      g.shard_reduce = world_reduce;
      break;
    case Sharding::kNoShard:
      g.replicate = &world;
      break;
    case Sharding::kHybridShard:
      g.shard = &intra_node;
      g.shard_reduce = intra_reduce;
      g.replicate = &inter_node;
      break;
  }
  return g;
}

FsdpEngine::~FsdpEngine() {
  // Drain collectives in flight so their worker never touches freed tensors.
  for (auto& u : units_) {
    if (u->gather_work) (void)u->gather_work->Wait();  // errors were or will be reported
  }
  for (auto& r : reductions_) {
    (void)r.work->Wait();
    if (r.work_low) (void)r.work_low->Wait();
  }
  for (auto& w : all_reduces_) (void)w->Wait();
}

StatusOr<std::unique_ptr<FsdpEngine>> FsdpEngine::Create(model::LlamaModel model,
                                                         const FsdpConfig& config,
                                                         const FsdpGroups& groups) {
  if (config.param_dtype != torch::kFloat32 && config.param_dtype != torch::kBFloat16) {
    return Status::InvalidArgument("train.param_dtype must be float32 or bfloat16");
  }
  if (config.reduce_dtype != torch::kFloat32 && config.reduce_dtype != torch::kBFloat16) {
    return Status::InvalidArgument("train.reduce_dtype must be float32 or bfloat16");
  }
  if (config.exact_reduce) {
    if (config.reduce_dtype != torch::kFloat32) {
      return Status::InvalidArgument(
          "dist.reduce = exact replaces the reduce dtype: train.reduce_dtype must be float32");
    }
    if (groups.replicate != nullptr && groups.replicate->size() > 1) {
      return Status::InvalidArgument(
          "dist.reduce = exact serves dist.sharding = full_shard or shard_grad_op only");
    }
    if (config.exact_micro_batches < 1 || config.exact_micro_batches > exact::kMaxAddends) {
      return Status::InvalidArgument(
          "dist.reduce = exact needs 1 to " + std::to_string(exact::kMaxAddends) +
          " micro-batches per step, got " + std::to_string(config.exact_micro_batches));
    }
  }
  std::unique_ptr<FsdpEngine> e(new FsdpEngine());
  e->model_ = model;
  e->config_ = config;
  e->groups_ = groups;
  e->waits_ = CommWaits(MakeStreamEvents(config.device));
  e->gather_limit_ = GatherLimit(MakeStreamEvents(config.device), kReleasesPending);
  const int shard_size = groups.shard ? groups.shard->size() : 1;
  const int shard_rank = groups.shard ? groups.shard->rank() : 0;
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : model->named_parameters()) by_name[item.key()] = item.value();
  std::vector<std::pair<int, std::vector<std::string>>> unit_names;
  unit_names.push_back({-1, model->RootParamNames()});
  for (int i = 0; i < static_cast<int>(model->config().num_layers); ++i) {
    unit_names.push_back({i, model->LayerParamNames(i)});
  }
  size_t assigned = 0;
  // One host buffer for the full values of the unit being sharded, reused: allocating per
  // unit leaves holes between the persistent shards that the allocator never returns.
  torch::Tensor flat_buffer;
  for (const auto& [layer, names] : unit_names) {
    auto u = std::make_unique<Unit>();
    u->layer = layer;
    u->name = layer < 0 ? "root" : "layer" + std::to_string(layer);
    for (const auto& n : names) {
      auto it = by_name.find(n);
      if (it == by_name.end()) return Status::Internal("model has no parameter " + n);
      Unit::Param p;
      p.name = n;
      p.param = it->second;
      p.shape = it->second.sizes().vec();
      p.numel = it->second.numel();
      p.offset = u->numel;
      u->numel += p.numel;
      u->params.push_back(p);
      ++assigned;
    }
    u->span = comm::ShardOf(u->numel, shard_size, shard_rank);
    if (config.defer_init) {
      // Filled later by LoadState; the model's (never touched) full tensors are dropped now.
      for (auto& p : u->params) p.param.set_data(torch::empty({0}, e->Opts(config.param_dtype)));
      u->master = torch::zeros({u->span.length}, e->Opts(torch::kFloat32));
      e->FinishUnitState(*u);
      e->units_.push_back(std::move(u));
      continue;
    }
    // This rank's slice of the flat unit, from the initial values (or the model's current,
    // identical on every rank); the full unit lives only for this iteration.
    if (!flat_buffer.defined() || flat_buffer.numel() < u->numel) {
      flat_buffer = torch::Tensor();  // freed before the larger one is allocated
      flat_buffer = EmptyToOverwrite({u->numel}, torch::kFloat32);
    }
    torch::Tensor flat = flat_buffer.narrow(0, 0, u->numel);
    for (auto& p : u->params) {
      torch::Tensor dst = flat.narrow(0, p.offset, p.numel);
      if (config.init_seed) {
        model::LlamaModelImpl::InitialValueInto(p.name, dst, *config.init_seed);
      } else {
        dst.copy_(p.param.detach().reshape(-1).to(torch::kFloat32));
      }
      // The model's full tensor is not needed any more: free it now, not after all units.
      p.param.set_data(torch::empty({0}, e->Opts(config.param_dtype)));
    }
    // On the engine's device (a no-op on the CPU).
    u->master = flat.narrow(0, u->span.offset, u->span.length).clone().to(config.device);
    e->FinishUnitState(*u);
    e->units_.push_back(std::move(u));
  }
  if (assigned != by_name.size()) {
    return Status::Internal("the model's units do not cover all of its " +
                            std::to_string(by_name.size()) + " parameters");
  }
  return e;
}

void FsdpEngine::FinishUnitState(Unit& u) const {
  u.exp_avg = torch::zeros_like(u.master);
  u.exp_avg_sq = torch::zeros_like(u.master);
  u.param_shard =
      config_.param_dtype == torch::kFloat32 ? u.master : u.master.to(config_.param_dtype);
  u.grad_shard = torch::zeros({u.span.length}, Opts(config_.reduce_dtype));
  if (config_.exact_reduce) u.exact_shard = exact::BlocksOf(u.span.offset, u.span.length);
}

bool FsdpEngine::ReshardAfterForward(int layer) const {
  // Freeing after forward only pays when backward recomputes the block (otherwise the saved
  // graph holds the gathered parameters anyway).
  return (config_.sharding == Sharding::kFullShard || config_.sharding == Sharding::kHybridShard) &&
         Recomputes(layer);
}

Status FsdpEngine::Gather(Unit& u) {
  if (u.attached || u.gather_work || u.full.defined()) return Status::Ok();
  const int s = groups_.shard ? groups_.shard->size() : 1;
  if (s == 1) {
    u.full = u.param_shard;  // the whole unit; views of it stay valid across steps
    return Status::Ok();
  }
  gather_limit_.BeforeGather();  // a GPU host too far ahead waits for a freed unit's last use
  u.full = torch::empty({u.numel}, Opts(config_.param_dtype));
  gathered_live_ += u.full.nbytes();
  gathered_peak_ = std::max(gathered_peak_, gathered_live_);
  u.gather_work = groups_.shard->AllGather(u.full, u.param_shard);
  comm_bytes_ += static_cast<uint64_t>(u.numel * (s - 1) / s) * ElemSize(config_.param_dtype);
  return Status::Ok();
}

Status FsdpEngine::WaitGather(Unit& u) {
  if (!u.gather_work) return Status::Ok();
  TraceRange range("fsdp/wait all-gather " + u.name);
  Status s = waits_.Wait([&] { return u.gather_work->Wait(); });
  u.gather_work.reset();
  return s.Annotate("all-gather of " + u.name);
}

void FsdpEngine::Attach(Unit& u) {
  if (u.attached) return;
  for (auto& p : u.params) p.param.set_data(u.full.narrow(0, p.offset, p.numel).view(p.shape));
  u.attached = true;
}

Status FsdpEngine::ReadyUnit(Unit& u, Unit* next) {
  FT_RETURN_IF_ERROR(Gather(u));
  FT_RETURN_IF_ERROR(WaitGather(u));
  Attach(u);
  if (config_.prefetch && next != nullptr) FT_RETURN_IF_ERROR(Gather(*next));
  return Status::Ok();
}

void FsdpEngine::Release(Unit& u) {
  if (KeepsFullParams()) return;
  for (auto& p : u.params) p.param.set_data(torch::empty({0}, Opts(config_.param_dtype)));
  if (u.full.defined() && !u.full.is_same(u.param_shard)) {
    gather_limit_.Released();
    gathered_live_ -= u.full.nbytes();
  }
  u.full = torch::Tensor();
  u.attached = false;
}

Status FsdpEngine::ReduceUnitGrads(Unit& u, bool last_micro_batch) {
  if (config_.exact_reduce) return ReduceUnitGradsExact(u);
  torch::NoGradGuard no_grad;
  const int s = groups_.shard ? groups_.shard->size() : 1;
  const bool fresh = u.grad_fresh;
  u.grad_fresh = false;
  if (s == 1) {
    // The shard is the whole unit: add the gradients in place (no collective, no copy).
    NoteGradBuffers(u, 0);
    for (auto& p : u.params) {
      torch::Tensor g = p.param.grad();
      torch::Tensor dst = u.grad_shard.narrow(0, p.offset, p.numel);
      if (!g.defined()) {
        if (fresh) dst.zero_();
      } else if (fresh) {
        dst.copy_(g.reshape(-1));
      } else {
        dst.add_(g.reshape(-1).to(config_.reduce_dtype));
      }
      p.param.mutable_grad() = torch::Tensor();
    }
    if (last_micro_batch) StartAllReduce(u);
    return Status::Ok();
  }
  // One flat buffer in the reduce dtype, filled parameter by parameter (the dtype conversion
  // happens in the copy), reduce-scattered into the shard or into a buffer added to it.
  Reduction r;
  r.unit = &u;
  r.flat = torch::empty({u.numel}, Opts(config_.reduce_dtype));
  r.out = fresh ? u.grad_shard : torch::empty({u.span.length}, Opts(config_.reduce_dtype));
  NoteGradBuffers(u, r.flat.nbytes() + (fresh ? 0 : r.out.nbytes()));
  for (auto& p : u.params) {
    torch::Tensor g = p.param.grad();
    torch::Tensor dst = r.flat.narrow(0, p.offset, p.numel);
    if (g.defined()) {
      dst.copy_(g.reshape(-1));
    } else {
      dst.zero_();
    }
    p.param.mutable_grad() = torch::Tensor();
  }
  comm::Comm* reduce = groups_.shard_reduce != nullptr ? groups_.shard_reduce : groups_.shard;
  r.work = reduce->ReduceScatter(r.out, r.flat, comm::ReduceOp::kSum);
  comm_bytes_ += static_cast<uint64_t>(u.numel * (s - 1) / s) * ElemSize(config_.reduce_dtype);
  reductions_.push_back(std::move(r));
  return Status::Ok();
}

void FsdpEngine::NoteGradBuffers(const Unit& u, uint64_t flat_bytes) {
  auto grads = [](const Unit& v) {
    uint64_t b = 0;
    for (const auto& p : v.params) {
      const torch::Tensor& g = p.param.grad();
      if (g.defined()) b += g.nbytes();
    }
    return b;
  };
  uint64_t live = grads(u) + flat_bytes + (&u == units_[0].get() ? 0 : grads(*units_[0]));
  for (const auto& r : reductions_) {
    live += r.flat.nbytes();
    if (!r.out.is_same(r.unit->grad_shard)) live += r.out.nbytes();
  }
  grad_buffer_peak_ = std::max(grad_buffer_peak_, live);
}

Status FsdpEngine::FinishReductions(size_t keep, bool last_micro_batch) {
  while (reductions_.size() > keep) {
    Reduction r = std::move(reductions_.front());
    reductions_.pop_front();
    {
      TraceRange range("fsdp/wait reduce-scatter " + r.unit->name);
      FT_RETURN_IF_ERROR(waits_.Wait([&] { return r.work->Wait(); })
                             .Annotate("reduce-scatter of " + r.unit->name));
      if (r.work_low) {
        FT_RETURN_IF_ERROR(waits_.Wait([&] { return r.work_low->Wait(); })
                               .Annotate("reduce-scatter of " + r.unit->name));
      }
    }
    torch::NoGradGuard no_grad;
    if (config_.exact_reduce) {
      FinishExact(r);
      continue;
    }
    if (!r.out.is_same(r.unit->grad_shard)) r.unit->grad_shard.add_(r.out);
    if (last_micro_batch) StartAllReduce(*r.unit);
  }
  return Status::Ok();
}

void FsdpEngine::FoldLossInto(torch::Tensor t) const {
  if (!loss_sum_.defined()) return;
  t.masked_fill_(torch::isfinite(loss_sum_).logical_not(),
                 std::numeric_limits<double>::quiet_NaN());
}

void FsdpEngine::InjectNanGrad(Unit& u) {
  torch::NoGradGuard no_grad;
  for (auto& p : u.params) {
    torch::Tensor g = p.param.grad();
    if (!g.defined() || g.numel() == 0) continue;
    g.view(-1).narrow(0, 0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
    fault_.nan_grad = false;  // one element, once
    return;
  }
}

Status FsdpEngine::CheckFinite() const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flags;
  std::vector<std::string> names;
  for (const auto& u : units_) {
    if (u->span.length == 0) continue;
    const std::pair<const char*, const torch::Tensor*> kinds[] = {
        {"master", &u->master},
        {"optim/exp_avg", &u->exp_avg},
        {"optim/exp_avg_sq", &u->exp_avg_sq},
        {"model", &u->param_shard}};
    for (const auto& [kind, t] : kinds) {
      if (!t->defined()) continue;
      flags.push_back(torch::isfinite(*t).all().reshape({1}));
      names.push_back(std::string(kind) + " of unit " + u->name);
    }
  }
  if (flags.empty()) return Status::Ok();
  const torch::Tensor host = torch::cat(flags).to(torch::kCPU);
  const bool* ok = host.data_ptr<bool>();
  for (size_t i = 0; i < names.size(); ++i) {
    if (!ok[i]) return Status::Corruption("non-finite value in the " + names[i]);
  }
  return Status::Ok();
}

void FsdpEngine::StartAllReduce(Unit& u) {
  if (!groups_.replicate || groups_.replicate->size() <= 1) return;
  // Replicas must learn of each other's non-finite loss: one element of one shard carries it.
  if (guard_nonfinite_ && !loss_folded_ && u.span.length > 0) {
    FoldLossInto(u.grad_shard.narrow(0, 0, 1));
    loss_folded_ = true;
  }
  all_reduces_.push_back(groups_.replicate->AllReduce(u.grad_shard, comm::ReduceOp::kSum));
  const int r = groups_.replicate->size();
  comm_bytes_ +=
      static_cast<uint64_t>(2 * u.span.length * (r - 1) / r) * ElemSize(config_.reduce_dtype);
}

StatusOr<FsdpEngine::ForwardStart> FsdpEngine::BeginForward(const torch::Tensor& tokens) {
  ForwardStart start;
  torch::Tensor inputs = tokens.narrow(1, 0, tokens.size(1) - 1);
  start.targets = tokens.narrow(1, 1, tokens.size(1) - 1);
  FT_RETURN_IF_ERROR(ReadyUnit(*units_[0], units_.size() > 1 ? units_[1].get() : nullptr));
  start.embedded = model_->Embed(inputs);
  return start;
}

StatusOr<torch::Tensor> FsdpEngine::ForwardBackward(const torch::Tensor& tokens, double loss_scale,
                                                    bool last_micro_batch, bool contributes) {
  if (tokens.dim() != 2 || tokens.size(1) < 2) {
    return Status::InvalidArgument("a batch must be [B, T+1] tokens with T >= 1");
  }
  if (!contributes && !config_.exact_reduce) {
    return Status::InvalidArgument("a micro-batch that does not contribute needs exact_reduce");
  }
  contributes_ = contributes;
  ++micro_batches_;
  FT_ASSIGN_OR_RETURN(ForwardStart start, BeginForward(tokens));
  const int L = static_cast<int>(units_.size()) - 1;
  Unit& root = *units_[0];
  torch::Tensor h0 = start.embedded;
  torch::Tensor h = h0.detach();
  for (int i = 0; i < L; ++i) {
    Unit& u = *units_[static_cast<size_t>(i) + 1];
    FT_RETURN_IF_ERROR(
        ReadyUnit(u, i + 1 < L ? units_[static_cast<size_t>(i) + 2].get() : nullptr));
    TraceRange range("fsdp/forward " + u.name);
    if (Recomputes(i)) {
      torch::NoGradGuard no_grad;
      u.saved_input = h;
      h = model_->Layer(i, h);
    } else {
      torch::Tensor x = h.detach().requires_grad_(true);
      u.saved_input = x;
      u.saved_output = model_->Layer(i, x);
      h = u.saved_output.detach();
    }
    if (ReshardAfterForward(i)) Release(u);
  }
  torch::Tensor z = h.detach().requires_grad_(true);
  torch::Tensor loss;
  {
    TraceRange range("fsdp/head and loss");
    loss = model_->HeadLoss(z, start.targets);  // no [T, V] logits kept
    if (fault_.nan_loss) loss = loss * std::numeric_limits<double>::quiet_NaN();
    (loss * (loss_scale * fault_.grad_factor)).backward();
  }
  loss = loss.detach();  // read by the caller, or with the step's one host synchronisation
  // Summed in float64, as the host summed the float32 values before.
  if (contributes) {
    loss_sum_ =
        loss_sum_.defined() ? loss_sum_ + loss.to(torch::kFloat64) : loss.to(torch::kFloat64);
    if (config_.exact_reduce) AddExactLoss(loss);
  }
  torch::Tensor grad = z.grad();
  if (config_.prefetch && L > 0) FT_RETURN_IF_ERROR(Gather(*units_[static_cast<size_t>(L)]));
  for (int i = L - 1; i >= 0; --i) {
    Unit& u = *units_[static_cast<size_t>(i) + 1];
    FT_RETURN_IF_ERROR(ReadyUnit(u, i > 0 ? units_[static_cast<size_t>(i)].get() : nullptr));
    TraceRange range("fsdp/backward " + u.name);
    torch::Tensor x;
    if (Recomputes(i)) {
      x = u.saved_input.detach().requires_grad_(true);
      torch::Tensor y = model_->Layer(i, x);
      y.backward(grad);
    } else {
      x = u.saved_input;
      u.saved_output.backward(grad);
    }
    grad = x.grad();
    u.saved_input = torch::Tensor();
    u.saved_output = torch::Tensor();
    // This unit's reduction overlaps the backward of the blocks below; at most two in flight.
    if (fault_.nan_grad) InjectNanGrad(u);
    FT_RETURN_IF_ERROR(ReduceUnitGrads(u, last_micro_batch));
    Release(u);
    FT_RETURN_IF_ERROR(FinishReductions(kReductionsInFlight, last_micro_batch));
  }
  h0.backward(grad);
  FT_RETURN_IF_ERROR(ReduceUnitGrads(root, last_micro_batch));
  Release(root);
  FT_RETURN_IF_ERROR(FinishReductions(0, last_micro_batch));
  return loss;
}

StatusOr<float> FsdpEngine::Forward(const torch::Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.size(1) < 2) {
    return Status::InvalidArgument("a batch must be [B, T+1] tokens with T >= 1");
  }
  torch::NoGradGuard no_grad;
  // The counters belong to the training step's StepStats: not counted here.
  waits_.set_counting(false);
  const uint64_t bytes_before = comm_bytes_;
  FT_ASSIGN_OR_RETURN(ForwardStart start, BeginForward(tokens));
  const int L = static_cast<int>(units_.size()) - 1;
  Unit& root = *units_[0];
  torch::Tensor h = start.embedded;
  for (int i = 0; i < L; ++i) {
    Unit& u = *units_[static_cast<size_t>(i) + 1];
    FT_RETURN_IF_ERROR(
        ReadyUnit(u, i + 1 < L ? units_[static_cast<size_t>(i) + 2].get() : nullptr));
    h = model_->Layer(i, h);
    Release(u);
  }
  const float loss = model_->HeadLoss(h, start.targets).item<float>();
  Release(root);
  waits_.set_counting(true);
  comm_bytes_ = bytes_before;
  return loss;
}

Status FsdpEngine::WaitAllReduces() {
  TraceRange range("fsdp/wait gradient all-reduce");
  Status st;
  for (auto& w : all_reduces_) {
    Status one = waits_.Wait([&] { return w->Wait(); });
    if (st.ok() && !one.ok()) st = one.Annotate("gradient all-reduce");
  }
  all_reduces_.clear();
  return st;
}

StatusOr<StepStats> FsdpEngine::Step(const AdamWConfig& adamw, double lr, double max_norm,
                                     const std::function<bool(double)>& skip_if) {
  torch::NoGradGuard no_grad;
  if (micro_batches_ == 0) return Status::FailedPrecondition("Step() without ForwardBackward()");
  TraceRange range("fsdp/optimizer");
  waits_.set_forward_backward(false);
  FT_RETURN_IF_ERROR(WaitAllReduces());
  // exact_reduce: the digit shards become the fp32 gradient shards (the mean already).
  const bool exact_finite = config_.exact_reduce ? ExactGradients() : true;
  // The gradient of the mean loss over the data-parallel world, as fp32 shards (the shards
  // themselves when the reduce dtype is fp32), in unit order.
  std::vector<torch::Tensor> grads, masters, avgs, avg_sqs, params;
  for (auto& u : units_) {
    if (u->span.length == 0) continue;
    grads.push_back(u->grad_shard.scalar_type() == torch::kFloat32
                        ? u->grad_shard
                        : u->grad_shard.to(torch::kFloat32));
    masters.push_back(u->master);
    avgs.push_back(u->exp_avg);
    avg_sqs.push_back(u->exp_avg_sq);
    if (!u->param_shard.is_same(u->master)) params.push_back(u->param_shard);
  }
  if (!grads.empty() && !config_.exact_reduce) {
    at::_foreach_div_(grads, static_cast<double>(groups_.world_size));
  }
  FT_ASSIGN_OR_RETURN(const double sumsq, config_.exact_reduce
                                              ? ExactSquaredNorm(grads, exact_finite)
                                              : GlobalSquaredNorm(grads));
  StepStats stats;
  stats.loss_sum = last_loss_sum_;
  stats.micro_batches = micro_batches_;
  // The host has now waited for every collective of this step. One that was aborted
  // meanwhile (an NCCL Wait() does not block the host) left partially reduced gradients:
  // they must not reach the optimizer state, which the next checkpoint would then save.
  FT_RETURN_IF_ERROR(CommHealth().Annotate("optimizer step " + std::to_string(optimizer_step_ + 1) +
                                           " not applied"));
  stats.grad_norm = std::sqrt(sumsq);
  fault_ = InjectedFault();
  loss_folded_ = false;
  // The norm is the same on every rank: every rank skips alike, with no exchange.
  stats.skipped = (guard_nonfinite_ && !std::isfinite(stats.grad_norm)) ||
                  (skip_if && skip_if(stats.grad_norm));
  if (!stats.skipped) {
    const double coef = ClipCoefficient(stats.grad_norm, max_norm);
    ++optimizer_step_;
    if (coef < 1.0 && !grads.empty()) at::_foreach_mul_(grads, coef);
    if (config_.exact_reduce) {
      AdamWStepElementwise(adamw, optimizer_step_, lr, masters, grads, avgs, avg_sqs);
    } else {
      AdamWStep(adamw, optimizer_step_, lr, masters, grads, avgs, avg_sqs);
    }
    if (!params.empty()) at::_foreach_copy_(params, masters);
  }
  for (auto& u : units_) u->grad_fresh = true;  // a skipped step's gradients are dropped
  micro_batches_ = 0;
  const CommWaits::Seconds waited = waits_.Take();  // complete: the host synchronised above
  stats.comm_wait_s = waited.total;
  stats.comm_wait_fb_s = waited.forward_backward;
  stats.comm_bytes = comm_bytes_;
  comm_bytes_ = 0;
  waits_.set_forward_backward(true);
  return stats;
}

// The squared global gradient norm: fp32 norms per shard (one fused kernel on a GPU), their
// squares summed in float64 in unit order, then across the shard group (replicas hold
// identical shards, so the shard group covers every parameter once). Read back together with
// the step's summed loss: the step's one host synchronisation.
StatusOr<double> FsdpEngine::GlobalSquaredNorm(const std::vector<torch::Tensor>& grads) {
  torch::Tensor acc = torch::zeros({1}, Opts(torch::kFloat64));
  if (!grads.empty()) {
    acc.add_(torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat64).pow(2).sum());
  }
  if (guard_nonfinite_) FoldLossInto(acc);  // a non-finite loss makes the norm NaN
  if (groups_.shard && groups_.shard->size() > 1) {
    TraceRange wait("fsdp/wait grad-norm all-reduce");
    std::unique_ptr<comm::Work> w = groups_.shard->AllReduce(acc, comm::ReduceOp::kSum);
    FT_RETURN_IF_ERROR(waits_.Wait([&] { return w->Wait(); }));
  }
  torch::Tensor loss =
      loss_sum_.defined() ? loss_sum_.reshape({1}) : torch::zeros({1}, Opts(torch::kFloat64));
  const torch::Tensor host = torch::cat({acc, loss}).to(torch::kCPU);
  loss_sum_ = torch::Tensor();
  last_loss_sum_ = host[1].item<double>();
  return host[0].item<double>();
}

Status FsdpEngine::CommHealth() const {
  for (comm::Comm* c : {groups_.shard, groups_.shard_reduce, groups_.replicate}) {
    if (c == nullptr) continue;
    Status s = c->Health();
    if (!s.ok()) return s.Annotate("group " + c->name());
  }
  return Status::Ok();
}

std::vector<ShardPiece> FsdpEngine::StatePieces() const {
  std::vector<ShardPiece> out;
  for (const auto& u : units_) {
    const int64_t s = u->span.offset, e = u->span.offset + u->span.length;
    for (const auto& p : u->params) {
      const int64_t lo = std::max(s, p.offset), hi = std::min(e, p.offset + p.numel);
      if (lo >= hi) continue;
      auto add = [&](const char* kind, const torch::Tensor& buf) {
        out.push_back({kind, p.name, buf.narrow(0, lo - s, hi - lo), p.shape, lo - p.offset});
      };
      add("master", u->master);
      add("optim/exp_avg", u->exp_avg);
      add("optim/exp_avg_sq", u->exp_avg_sq);
      if (!u->param_shard.is_same(u->master)) add("model", u->param_shard);
    }
  }
  return out;
}

Status FsdpEngine::LoadState(const std::function<Status(const std::string&, const std::string&,
                                                        int64_t, int64_t, torch::Tensor)>& read) {
  torch::NoGradGuard no_grad;
  for (auto& u : units_) {
    const int64_t s = u->span.offset, e = u->span.offset + u->span.length;
    for (const auto& p : u->params) {
      const int64_t lo = std::max(s, p.offset), hi = std::min(e, p.offset + p.numel);
      if (lo >= hi) continue;
      for (auto [kind, buf] : {std::pair<const char*, torch::Tensor*>{"master", &u->master},
                               {"optim/exp_avg", &u->exp_avg},
                               {"optim/exp_avg_sq", &u->exp_avg_sq}}) {
        FT_RETURN_IF_ERROR(
            read(kind, p.name, lo - p.offset, hi - lo, buf->narrow(0, lo - s, hi - lo)));
      }
    }
    if (!u->param_shard.is_same(u->master)) u->param_shard.copy_(u->master);
    u->grad_fresh = true;
  }
  micro_batches_ = 0;
  loss_sum_ = torch::Tensor();
  exact_loss_ = torch::Tensor();
  return Status::Ok();
}

StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> FsdpEngine::GatherFullParameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const int s = groups_.shard ? groups_.shard->size() : 1;
  for (auto& u : units_) {
    torch::Tensor full;
    if (s > 1) {
      full = torch::empty({u->numel}, Opts(torch::kFloat32));
      FT_RETURN_IF_ERROR(groups_.shard->AllGather(full, u->master)->Wait());
    } else {
      full = u->master.clone();
    }
    full = full.to(torch::kCPU);  // the callers write files
    for (const auto& p : u->params) {
      out.push_back({p.name, full.narrow(0, p.offset, p.numel).view(p.shape).clone()});
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> FsdpEngine::ParameterShapes() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& u : units_) {
    for (const auto& p : u->params) out.push_back({p.name, p.shape});
  }
  return out;
}

uint64_t FsdpEngine::PersistentBytes() const {
  uint64_t b = 0;
  for (const auto& u : units_) {
    b += u->master.nbytes() + u->exp_avg.nbytes() + u->exp_avg_sq.nbytes() + u->grad_shard.nbytes();
    if (!u->param_shard.is_same(u->master)) b += u->param_shard.nbytes();
  }
  return b;
}

MemoryAccount FsdpEngine::Memory() const {
  MemoryAccount m;
  for (const auto& u : units_) {
    if (!u->param_shard.is_same(u->master)) m.weights_bytes += u->param_shard.nbytes();
    m.grads_bytes += u->grad_shard.nbytes();
    m.master_bytes += u->master.nbytes();
    m.moments_bytes += u->exp_avg.nbytes() + u->exp_avg_sq.nbytes();
  }
  m.gathered_bytes = gathered_peak_;
  m.grad_buffer_bytes = grad_buffer_peak_;
  return m;
}

int64_t FsdpEngine::NumParameters() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->numel;
  return n;
}

}  // namespace ftrain::fsdp
