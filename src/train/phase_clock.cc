// Per-rank phase timing, and the host names rank 0 labels the phases with.
#include "train/phase_clock.h"

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include <algorithm>

#include "comm/collectives.h"

namespace ftrain::train {
namespace {
double Since(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

// Three timing events on the current stream: step start, compute end, optimizer end.
struct PhaseClock::Events {
  explicit Events(int index)
      : device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)),
        start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT),
        compute(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT),
        optimizer(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT) {}
  c10::Stream Current() const {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
  }
  c10::Device device;
  c10::Event start, compute, optimizer;
};

PhaseClock::PhaseClock(int cuda_index) {
  if (cuda_index >= 0) events_ = std::make_unique<Events>(cuda_index);
}
PhaseClock::~PhaseClock() = default;

void PhaseClock::StepStart() {
  t0_ = Clock::now();
  if (events_) events_->start.record(events_->Current());
}

void PhaseClock::ComputeEnd(double data_wait_s, double comm_wait_s) {
  t1_ = Clock::now();
  data_wait_s_ = data_wait_s;
  comm_fb_s_ = comm_wait_s;
  if (events_) events_->compute.record(events_->Current());
}

void PhaseClock::OptimizerEnd(double comm_wait_total_s) {
  t2_ = Clock::now();
  comm_total_s_ = comm_wait_total_s;
  if (events_) events_->optimizer.record(events_->Current());
}

records::RankPhases PhaseClock::Take(double boundary_wait_s) {
  double fb_s = Since(t0_, t1_), opt_s = Since(t1_, t2_);
  if (events_) {
    // The device's own spans: the host returns from asynchronous kernels early. The wait is
    // for work the step queued anyway (the optimizer's kernels), read after the boundary.
    events_->optimizer.synchronize();
    fb_s = events_->start.elapsedTime(events_->compute) / 1e3;
    opt_s = events_->compute.elapsedTime(events_->optimizer) / 1e3;
  }
  records::RankPhases p;
  p.s[records::kDataWait] = data_wait_s_;
  p.s[records::kCommWait] = comm_total_s_;
  p.s[records::kCompute] = std::max(0.0, fb_s - data_wait_s_ - comm_fb_s_);
  p.s[records::kOptimizer] = std::max(0.0, opt_s - (comm_total_s_ - comm_fb_s_));
  p.s[records::kBoundaryWait] = boundary_wait_s;
  p.s[records::kCkptStall] = stall_s_;
  stall_s_ = 0;
  double accounted = 0;
  for (int i = 0; i < records::kOther; ++i) accounted += p.s[i];
  p.s[records::kOther] = std::max(0.0, Since(t0_, Clock::now()) - accounted);
  p.read_bytes = static_cast<double>(read_total_ - std::min(read_total_, read_reported_));
  read_reported_ = read_total_;
  return p;
}

StatusOr<std::vector<std::string>> GatherHosts(comm::Comm& control, const std::string& mine) {
  constexpr int64_t kLen = 64;  // characters kept of each name
  const int n = control.size();
  torch::Tensor in = torch::zeros({kLen}, torch::kFloat64);
  for (int64_t i = 0; i < kLen && i < static_cast<int64_t>(mine.size()); ++i) {
    in[i] = static_cast<double>(static_cast<unsigned char>(mine[static_cast<size_t>(i)]));
  }
  torch::Tensor out = torch::zeros({kLen * n}, torch::kFloat64);
  FT_RETURN_IF_ERROR(control.AllGather(out, in)->Wait().Annotate("gathering host names"));
  std::vector<std::string> hosts(static_cast<size_t>(n));
  const double* v = out.data_ptr<double>();
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < kLen; ++i) {
      const double c = v[r * kLen + i];
      if (c == 0) break;
      hosts[static_cast<size_t>(r)] += static_cast<char>(static_cast<int>(c));
    }
  }
  return hosts;
}

}  // namespace ftrain::train
