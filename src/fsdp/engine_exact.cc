// The engine's dist.reduce = exact path (fsdp/exact.h for the fixed point): after a unit's
// backward its gradient becomes digits under block bins agreed over the shard group (an
// all-reduce MAX of each rank's bins), reduce-scattered as int64 and added into the unit's
// digit shard; at the step the shards become fp32 gradients, and the norm and the loss are
// integer sums. Nothing here depends on how many ranks hold which micro-batch.
#include <cmath>
#include <limits>

#include "fsdp/engine.h"
#include "fsdp/engine_units.h"
#include "fsdp/exact.h"
#include "trace/trace_range.h"

namespace ftrain::fsdp {
namespace {

// Losses are summed as rint(loss 2^32): exact for up to kMaxAddends losses below 2^20.
constexpr int kLossScale = 32;
constexpr double kLossLimit = 1048576.0;  // 2^20

}  // namespace

Status FsdpEngine::ReduceUnitGradsExact(Unit& u) {
  torch::NoGradGuard no_grad;
  const int s = groups_.shard ? groups_.shard->size() : 1;
  const bool fresh = u.grad_fresh;
  u.grad_fresh = false;
  // The fp32 gradient, then two int64 digit buffers of the whole unit.
  NoteGradBuffers(u, static_cast<uint64_t>(u.numel) * (4 + 16));
  torch::Tensor flat = torch::zeros({u.numel}, Opts(torch::kFloat32));
  for (auto& p : u.params) {
    const torch::Tensor g = p.param.grad();
    if (contributes_ && g.defined()) flat.narrow(0, p.offset, p.numel).copy_(g.reshape(-1));
    p.param.mutable_grad() = torch::Tensor();
  }
  torch::Tensor bins = exact::TopBins(flat);
  comm::Comm* reduce = groups_.shard_reduce != nullptr ? groups_.shard_reduce : groups_.shard;
  if (s > 1) {
    TraceRange range("fsdp/wait block bins " + u.name);
    std::unique_ptr<comm::Work> w = reduce->AllReduce(bins, comm::ReduceOp::kMax);
    FT_RETURN_IF_ERROR(waits_.Wait([&] { return w->Wait(); }).Annotate("block bins of " + u.name));
    comm_bytes_ += static_cast<uint64_t>(bins.nbytes()) * 2;
  }
  // A block with inf or NaN on any rank: its agreed bin says so everywhere; no digits are
  // formed (Step makes the whole gradient NaN on every rank alike).
  const bool finite = !bins.eq(exact::kNonFiniteBin).any().item<bool>();
  exact::Digits d;
  if (finite) {
    d = exact::ToDigits(flat, bins);
  } else {
    d.top = torch::zeros({u.numel}, Opts(torch::kInt64));
    d.low = torch::zeros({u.numel}, Opts(torch::kInt64));
  }
  Reduction r;
  r.unit = &u;
  r.bins = bins;
  r.fresh = fresh;
  if (s == 1) {  // the shard is the whole unit
    r.out = d.top;
    r.out_low = d.low;
    FinishExact(r);
    return Status::Ok();
  }
  r.flat = d.top;
  r.flat_low = d.low;
  r.out = torch::empty({u.span.length}, Opts(torch::kInt64));
  r.out_low = torch::empty({u.span.length}, Opts(torch::kInt64));
  r.work = reduce->ReduceScatter(r.out, r.flat, comm::ReduceOp::kSum);
  r.work_low = reduce->ReduceScatter(r.out_low, r.flat_low, comm::ReduceOp::kSum);
  comm_bytes_ += static_cast<uint64_t>(u.numel * (s - 1) / s) * 2 * sizeof(int64_t);
  reductions_.push_back(std::move(r));
  return Status::Ok();
}

void FsdpEngine::FinishExact(Reduction& r) {
  Unit& u = *r.unit;
  if (r.fresh) {
    u.exact_top = r.out;
    u.exact_low = r.out_low;
    u.exact_bins = r.bins;
    return;
  }
  exact::Accumulate(u.exact_top, u.exact_low, u.exact_bins, r.out, r.out_low, r.bins,
                    u.exact_shard);
}

void FsdpEngine::AddExactLoss(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  const torch::Tensor l = loss.to(torch::kFloat64).reshape({1});
  const torch::Tensor bad = torch::isfinite(l).logical_not().logical_or(l.abs().ge(kLossLimit));
  const torch::Tensor q =
      (l * std::ldexp(1.0, kLossScale)).round_().masked_fill_(bad, 0).to(torch::kInt64);
  const torch::Tensor add = torch::cat({q, bad.to(torch::kInt64)});
  exact_loss_ = exact_loss_.defined() ? exact_loss_ + add : add;
}

bool FsdpEngine::ExactGradients() {
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (const auto& u : units_) {
    if (u->exact_bins.defined() && u->exact_bins.eq(exact::kNonFiniteBin).any().item<bool>()) {
      finite = false;
    }
  }
  const double divisor = static_cast<double>(config_.exact_micro_batches);
  for (auto& u : units_) {
    if (u->span.length > 0) {
      if (finite && u->exact_top.defined()) {
        exact::ToFloat(u->exact_top, u->exact_low, u->exact_bins, u->exact_shard, divisor,
                       u->grad_shard);
      } else {
        u->grad_shard.fill_(finite ? 0.0 : std::numeric_limits<double>::quiet_NaN());
      }
    }
    u->exact_top = u->exact_low = u->exact_bins = torch::Tensor();  // the next step starts afresh
  }
  return finite;
}

// The squared norm as an integer sum: every element's g^2 (exact in float64) scaled by one
// power of two that the largest |g| of the world (an all-reduce MAX) fixes so that no sum of
// all the model's elements can overflow, rounded, summed as int64 on the shard and across the
// shard group together with the step's fixed-point loss.
StatusOr<double> FsdpEngine::ExactSquaredNorm(const std::vector<torch::Tensor>& grads,
                                              bool finite) {
  const int s = groups_.shard ? groups_.shard->size() : 1;
  torch::Tensor largest = torch::zeros({1}, Opts(torch::kFloat64));
  if (finite) {
    for (const auto& g : grads) {
      largest = torch::maximum(largest, g.abs().max().to(torch::kFloat64).reshape({1}));
    }
  }
  if (s > 1) {
    TraceRange wait("fsdp/wait grad-norm all-reduce");
    std::unique_ptr<comm::Work> w = groups_.shard->AllReduce(largest, comm::ReduceOp::kMax);
    FT_RETURN_IF_ERROR(waits_.Wait([&] { return w->Wait(); }));
  }
  const double g_max = largest.to(torch::kCPU).item<double>();
  const int scale = exact::ScaleFor(g_max * g_max, std::max<int64_t>(1, NumParameters()));
  torch::Tensor sum = torch::zeros({1}, Opts(torch::kInt64));
  if (finite) {
    for (const auto& g : grads) sum += exact::FixedSumOfSquares(g, scale);
  }
  const torch::Tensor loss =
      exact_loss_.defined() ? exact_loss_ : torch::zeros({2}, Opts(torch::kInt64));
  torch::Tensor pack = torch::cat({sum, loss});
  if (s > 1) {
    TraceRange wait("fsdp/wait grad-norm all-reduce");
    std::unique_ptr<comm::Work> w = groups_.shard->AllReduce(pack, comm::ReduceOp::kSum);
    FT_RETURN_IF_ERROR(waits_.Wait([&] { return w->Wait(); }));
  }
  const torch::Tensor host = pack.to(torch::kCPU);
  const int64_t* v = host.data_ptr<int64_t>();
  exact_loss_ = torch::Tensor();
  loss_sum_ = torch::Tensor();
  last_loss_sum_ = v[2] > 0 ? std::numeric_limits<double>::quiet_NaN()
                            : std::ldexp(static_cast<double>(v[1]), -kLossScale);
  double sumsq = finite ? std::ldexp(static_cast<double>(v[0]), -scale)
                        : std::numeric_limits<double>::quiet_NaN();
  if (guard_nonfinite_ && !std::isfinite(last_loss_sum_)) {
    sumsq = std::numeric_limits<double>::quiet_NaN();
  }
  return sumsq;
}

}  // namespace ftrain::fsdp
