// What the engine and the phase clock measure and bound on a GPU's stream, through a fake
// GPU's events (the names say FakeGpu: no GPU here) whose device clock the test advances:
// exposed communication summed from events around each wait and split by phase; the gathered
// units the host may run ahead by; the phase clock's device spans read one step late, with
// every event handle reused. And the CPU side: host times, nothing bounded.
#include "fsdp/stream_waits.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <vector>

#include "train/phase_clock.h"

namespace ftrain::testing {
namespace {

class FakeGpuEvents : public fsdp::StreamEvents {
 public:
  int Record() override {
    int id = next_;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      ++next_;
    }
    at_[id] = now;
    ++live;
    return id;
  }
  double Elapsed(int from, int to) override { return at_.at(to) - at_.at(from); }
  void Synchronize(int event) override { synced.push_back(at_.at(event)); }
  void Release(int event) override {
    free_.push_back(event);
    --live;
  }
  int created() const { return next_; }

  double now = 0;              // the device's clock at the next Record
  int live = 0;                // recorded, not yet released
  std::vector<double> synced;  // the host waited for the events recorded at these times

 private:
  std::map<int, double> at_;
  std::vector<int> free_;
  int next_ = 0;
};

TEST(FakeGpuStreamWaits, CommWaitsAreTheStreamsStallsSplitByPhase) {
  auto owned = std::make_unique<FakeGpuEvents>();
  FakeGpuEvents* gpu = owned.get();
  fsdp::CommWaits waits(std::move(owned));
  auto stall = [&](double s) {
    return waits.Wait([&] {
      gpu->now += s;  // the stream stands still until the collective is done
      return Status::Ok();
    });
  };
  for (int step = 0; step < 3; ++step) {
    waits.set_forward_backward(true);
    ASSERT_TRUE(stall(0.010).ok());
    gpu->now += 1.0;  // compute between waits is not communication
    ASSERT_TRUE(stall(0.020).ok());
    waits.set_counting(false);  // a held-out evaluation
    ASSERT_TRUE(stall(5.0).ok());
    waits.set_counting(true);
    waits.set_forward_backward(false);
    ASSERT_TRUE(stall(0.004).ok());
    const fsdp::CommWaits::Seconds s = waits.Take();
    EXPECT_NEAR(s.total, 0.034, 1e-12) << step;
    EXPECT_NEAR(s.forward_backward, 0.030, 1e-12) << step;
    EXPECT_EQ(gpu->live, 0) << "every event handed back";
  }
  EXPECT_EQ(gpu->created(), 6) << "the pool is reused across steps";
  Status failed = waits.Wait([] { return Status::Unavailable("aborted"); });
  EXPECT_FALSE(failed.ok()) << "a wait's status comes through";
}

TEST(FakeGpuStreamWaits, TheHostWaitsForTheOldestReleaseOnceTwoArePending) {
  auto owned = std::make_unique<FakeGpuEvents>();
  FakeGpuEvents* gpu = owned.get();
  fsdp::GatherLimit limit(std::move(owned), 2);
  limit.BeforeGather();  // nothing released yet
  gpu->now = 1;
  limit.Released();
  limit.BeforeGather();  // one pending: the host may run ahead
  EXPECT_TRUE(gpu->synced.empty());
  gpu->now = 2;
  limit.Released();
  limit.BeforeGather();  // two pending: wait for the first unit's last use
  ASSERT_EQ(gpu->synced, std::vector<double>{1});
  EXPECT_EQ(limit.pending(), 1u);
  gpu->now = 3;
  limit.Released();
  limit.BeforeGather();
  EXPECT_EQ(gpu->synced, (std::vector<double>{1, 2}));
  EXPECT_EQ(gpu->live, 1);
}

TEST(StreamWaits, OnTheCpuWaitsAreHostTimeAndNothingIsBounded) {
  fsdp::CommWaits waits(fsdp::MakeStreamEvents(c10::Device(c10::kCPU)));
  ASSERT_TRUE(waits
                  .Wait([] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                    return Status::Ok();
                  })
                  .ok());
  const fsdp::CommWaits::Seconds s = waits.Take();
  EXPECT_GE(s.total, 0.019);
  EXPECT_EQ(s.total, s.forward_backward);
  fsdp::GatherLimit limit(nullptr, 1);
  for (int i = 0; i < 5; ++i) limit.Released();
  limit.BeforeGather();
  EXPECT_EQ(limit.pending(), 0u);
}

TEST(FakeGpuPhaseClock, DeviceSpansAreReadOneStepLateAndNeverWait) {
  auto owned = std::make_unique<FakeGpuEvents>();
  FakeGpuEvents* gpu = owned.get();
  train::PhaseClock clock(std::move(owned));
  // Step 1: the host records and moves on; the device spans are not known yet.
  clock.StepStart();
  gpu->now = 2.0;  // micro-batches on the device: 2 s
  clock.ComputeEnd(0.25);
  gpu->now = 2.5;  // optimizer: 0.5 s
  clock.OptimizerEnd(0.125, 0.0625);
  records::RankPhases first = clock.Take(0);
  EXPECT_LT(first.s[records::kCompute], 0.5) << "step 1 reports its (short) host times";
  // Step 2 reports step 1's device spans and its waits, not step 2's.
  clock.StepStart();
  gpu->now = 12.5;
  clock.ComputeEnd(7.0);
  gpu->now = 13.0;
  clock.OptimizerEnd(3.0, 1.0);
  const int live_before = gpu->live;
  records::RankPhases second = clock.Take(0.001);
  EXPECT_DOUBLE_EQ(second.s[records::kDataWait], 0.25);
  EXPECT_DOUBLE_EQ(second.s[records::kCommWait], 0.125);
  EXPECT_DOUBLE_EQ(second.s[records::kCompute], 2.0 - 0.25 - 0.0625);
  EXPECT_DOUBLE_EQ(second.s[records::kOptimizer], 0.5 - (0.125 - 0.0625));
  EXPECT_DOUBLE_EQ(second.s[records::kBoundaryWait], 0.001);
  ASSERT_EQ(gpu->synced.size(), 1u);
  EXPECT_EQ(gpu->synced[0], 2.5) << "only step 1's optimizer end, long passed";
  // Ten more steps: the six handles of the two samples are reused.
  for (int i = 0; i < 10; ++i) {
    clock.StepStart();
    clock.ComputeEnd(0);
    clock.OptimizerEnd(0, 0);
    clock.Take(0);
  }
  EXPECT_EQ(gpu->live, live_before);
  EXPECT_LE(gpu->created(), 8);
}

}  // namespace
}  // namespace ftrain::testing
