// The step boundary's agreement (boundary_agreement.h): the loss all-reduce, then the flags
// and phases all-gather.
#include "train/boundary_agreement.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "comm/collectives.h"
#include "comm/context.h"
#include "trace/trace_range.h"
#include "train/signals.h"

namespace ftrain::train {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

StatusOr<BoundaryDecision> DecideAtBoundary(comm::DistContext& ctx, double local_loss,
                                            bool time_due, bool memory_time_due,
                                            PhaseClock& clock) {
  torch::Tensor loss_t = torch::tensor({local_loss}, torch::kFloat64);
  const auto tw = Clock::now();
  {
    TraceRange range("ftrain/boundary all-reduce");
    FT_RETURN_IF_ERROR(ctx.control().AllReduce(loss_t, comm::ReduceOp::kAvg)->Wait());
  }
  const records::RankPhases mine = clock.Take(Seconds(tw, Clock::now()));
  std::vector<double> flags;
  BoundaryDecision d;
  FT_RETURN_IF_ERROR(GatherAtBoundary(
      ctx.control(),
      {time_due ? 1.0 : 0.0, StopRequested() != 0 ? 1.0 : 0.0, memory_time_due ? 1.0 : 0.0}, mine,
      &flags, &d.phases));
  d.loss = loss_t.item<double>();
  d.time_due = flags[0] != 0;
  d.stop = flags[1] != 0;
  d.memory_time_due = flags[2] != 0;
  return d;
}

Status GatherAtBoundary(comm::Comm& control, const std::vector<double>& flags,
                        const records::RankPhases& mine, std::vector<double>* flags_max,
                        std::vector<records::RankPhases>* all) {
  const int64_t f = static_cast<int64_t>(flags.size());
  const int64_t k = f + records::kNumPhases + 1;  // flags, phases, bytes read
  const int n = control.size();
  torch::Tensor in = torch::empty({k}, torch::kFloat64);
  double* p = in.data_ptr<double>();
  for (int64_t i = 0; i < f; ++i) p[i] = flags[static_cast<size_t>(i)];
  for (int i = 0; i < records::kNumPhases; ++i) p[f + i] = mine.s[i];
  p[f + records::kNumPhases] = mine.read_bytes;
  torch::Tensor out = torch::empty({k * n}, torch::kFloat64);
  FT_RETURN_IF_ERROR(control.AllGather(out, in)->Wait());
  const double* v = out.data_ptr<double>();
  flags_max->assign(flags.size(), 0.0);
  all->assign(static_cast<size_t>(n), records::RankPhases());
  for (int r = 0; r < n; ++r) {
    const double* row = v + r * k;
    for (int64_t i = 0; i < f; ++i) {
      (*flags_max)[static_cast<size_t>(i)] =
          r == 0 ? row[i] : std::max((*flags_max)[static_cast<size_t>(i)], row[i]);
    }
    for (int i = 0; i < records::kNumPhases; ++i) (*all)[static_cast<size_t>(r)].s[i] = row[f + i];
    (*all)[static_cast<size_t>(r)].read_bytes = row[f + records::kNumPhases];
  }
  return Status::Ok();
}

}  // namespace ftrain::train
