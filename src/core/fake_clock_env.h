// FakeClockEnv: an Env whose monotonic clock moves only when a test advances it or when the
// code under test sleeps on it (a sleep returns at once, the clock jumps by its length); the
// file system is `base`'s (the real one in the tests). For tests of timing rules written against
// Env::NowMicros.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/env.h"

namespace ftrain::testing {

class FakeClockEnv : public EnvWrapper {
 public:
  explicit FakeClockEnv(Env* base) : EnvWrapper(base) {}
  uint64_t NowMicros() override { return now_micros_.load(); }
  void SleepForMicroseconds(int64_t micros) override {
    if (micros > 0) now_micros_ += static_cast<uint64_t>(micros);
  }
  void AdvanceSeconds(double s) { now_micros_ += static_cast<uint64_t>(s * 1e6); }

 private:
  std::atomic<uint64_t> now_micros_{1000000000};  // any epoch: only differences count
};

}  // namespace ftrain::testing
