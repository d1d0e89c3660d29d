// Per-rank phase timing, and the host names rank 0 labels the phases with.
#include "train/phase_clock.h"

#include <torch/torch.h>

#include <algorithm>

#include "comm/collectives.h"
#include "fsdp/stream_waits.h"

namespace ftrain::train {
namespace {
double Since(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

// One step's timing: three events on the current stream (step start, compute end, optimizer
// end; handles of events_, -1 on the CPU) and what the host knew of the step. Two alternate on
// a GPU.
struct PhaseClock::Sample {
  int start = -1, compute = -1, optimizer = -1;
  Clock::time_point t0, t1, t2;
  double data_wait_s = 0, comm_fb_s = 0, comm_total_s = 0;
  bool complete = false;  // OptimizerEnd was called for it
};

PhaseClock::PhaseClock(int cuda_index)
    : PhaseClock(cuda_index >= 0
                     ? fsdp::MakeStreamEvents(c10::Device(
                           c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(cuda_index)))
                     : nullptr) {}

PhaseClock::PhaseClock(std::unique_ptr<fsdp::StreamEvents> events) : events_(std::move(events)) {
  samples_[0] = std::make_unique<Sample>();
  samples_[1] = std::make_unique<Sample>();
}
PhaseClock::~PhaseClock() = default;

void PhaseClock::Record(int* event) {
  if (!events_) return;
  if (*event >= 0) events_->Release(*event);
  *event = events_->Record();
}

void PhaseClock::StepStart() {
  Sample& s = *samples_[current_];
  s.complete = false;
  s.t0 = Clock::now();
  Record(&s.start);
}

void PhaseClock::ComputeEnd(double data_wait_s) {
  Sample& s = *samples_[current_];
  s.t1 = Clock::now();
  s.data_wait_s = data_wait_s;
  Record(&s.compute);
}

void PhaseClock::OptimizerEnd(double comm_wait_total_s, double comm_wait_fb_s) {
  Sample& s = *samples_[current_];
  s.t2 = Clock::now();
  s.comm_total_s = comm_wait_total_s;
  s.comm_fb_s = comm_wait_fb_s;
  Record(&s.optimizer);
  s.complete = true;
}

records::RankPhases PhaseClock::Take(double boundary_wait_s) {
  // On a GPU the compute and optimizer spans are the device's own, from the previous step,
  // whose events its successor's host synchronisation has long passed: reading them never
  // waits (the host returns from asynchronous kernels early, so host times say nothing).
  // The first step reports its host times. On the CPU: this step's host times.
  const Sample& now = *samples_[current_];
  const Sample* src = &now;
  double fb_s = Since(now.t0, now.t1), opt_s = Since(now.t1, now.t2);
  if (events_) {
    const Sample& prev = *samples_[1 - current_];
    if (prev.complete) {
      src = &prev;
      events_->Synchronize(prev.optimizer);  // complete already; a guard, not a wait
      fb_s = events_->Elapsed(prev.start, prev.compute);
      opt_s = events_->Elapsed(prev.compute, prev.optimizer);
    }
    current_ = 1 - current_;
  }
  records::RankPhases p;
  p.s[records::kDataWait] = src->data_wait_s;
  p.s[records::kCommWait] = src->comm_total_s;
  p.s[records::kCompute] = std::max(0.0, fb_s - src->data_wait_s - src->comm_fb_s);
  p.s[records::kOptimizer] = std::max(0.0, opt_s - (src->comm_total_s - src->comm_fb_s));
  p.s[records::kBoundaryWait] = boundary_wait_s;
  p.s[records::kCkptStall] = stall_s_;
  stall_s_ = 0;
  double accounted = 0;
  for (int i = 0; i < records::kOther; ++i) accounted += p.s[i];
  p.s[records::kOther] = std::max(0.0, Since(now.t0, Clock::now()) - accounted);
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
