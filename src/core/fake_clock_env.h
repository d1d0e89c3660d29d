// FakeClockEnv: an Env whose clocks move only when a test moves them or when the code under
// test sleeps on it (a sleep returns at once and both clocks jump by its length), so a rule
// written as "after N seconds" is tested in microseconds of real time; the file system is
// `base`'s (the real one in the tests). Advance moves both clocks, as time passing does;
// StepWall moves only the wall clock, as NTP or an operator's `date -s` does, which no rule may
// take for time passed. Atomic, so that code under test may read it from threads of its own
// (a watchdog, a probe thread) while the test moves it; on x86 an atomic load is a plain load,
// so reading it stays cheap.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "core/env.h"

namespace ftrain {

class FakeClockEnv : public EnvWrapper {
 public:
  // Both origins are arbitrary but fixed (only differences count; the wall clock's is a
  // plausible recent unix time for records).
  explicit FakeClockEnv(Env* base, double monotonic_s = 1000, double unix_s = 1.7e9)
      : EnvWrapper(base), now_micros_(Micros(monotonic_s)), unix_micros_(Micros(unix_s)) {}

  uint64_t NowMicros() override { return now_micros_.load(); }
  uint64_t UnixMicros() override { return unix_micros_.load(); }
  void SleepForMicroseconds(int64_t micros) override {
    if (micros > 0) Move(static_cast<uint64_t>(micros), true);
  }

  void Advance(double s) { Move(Micros(s), true); }
  void StepWall(double s) { Move(Micros(s), false); }  // s < 0: a step back

 private:
  // Rounded, not truncated: 1.001 s is 1001000 us, not one less. A negative amount wraps, which
  // unsigned addition undoes.
  static uint64_t Micros(double s) { return static_cast<uint64_t>(std::llround(s * 1e6)); }
  void Move(uint64_t micros, bool monotonic_too) {
    if (monotonic_too) now_micros_ += micros;
    unix_micros_ += micros;
  }

  std::atomic<uint64_t> now_micros_, unix_micros_;
};

}  // namespace ftrain
