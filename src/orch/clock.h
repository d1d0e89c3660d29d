// orch/clock.h - time for the job controller and the node agent, behind one interface: the
// monotonic clock (steady_clock) measures every silence, deadline and back-off, so that a step
// of the wall clock (NTP, an operator's `date -s`) is never taken for a silent node; the wall
// clock only stamps records for people. FakeClock drives the unit tests and `--dry-run`.
#pragma once

#include "core/clock.h"

namespace ftrain::orch {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Monotonic() const = 0;  // seconds on steady_clock (any origin)
  virtual double Wall() const = 0;       // unix seconds (system_clock): records only
};

class SystemClock : public Clock {
 public:
  double Monotonic() const override { return MonotonicSeconds(); }
  double Wall() const override { return UnixSeconds(); }
};

// Time that moves only when told: Advance moves both clocks, StepWall only the wall clock (a
// clock step on the host).
class FakeClock : public Clock {
 public:
  explicit FakeClock(double monotonic = 1000, double wall = 1.7e9)
      : monotonic_(monotonic), wall_(wall) {}
  double Monotonic() const override { return monotonic_; }
  double Wall() const override { return wall_; }
  void Advance(double s) {
    monotonic_ += s;
    wall_ += s;
  }
  void StepWall(double s) { wall_ += s; }

 private:
  double monotonic_, wall_;
};

}  // namespace ftrain::orch
