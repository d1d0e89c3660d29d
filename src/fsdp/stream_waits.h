// What the engine (and the trainer's phase clock) measures and bounds on a GPU's current
// stream, where the host runs ahead:
//   StreamEvents   events recorded on the device's current stream, by handle: timed,
//                  waited for, reused. CUDA through c10::Event (no CUDA headers); a fake in
//                  tests (the names say so), since the real one needs a GPU.
//   CommWaits      the time the compute stream stood still waiting for collectives (exposed
//                  communication), from events around each Work::Wait() (which on a GPU only
//                  makes the stream wait and returns at once: host time says nothing); on the
//                  CPU the host's own wait. Read after a host synchronisation: never waits.
//   GatherLimit    at most N gathered units freed by the host but maybe still in use by the
//                  stream (FSDP1's limit_all_gathers): before another all-gather the host
//                  waits for the oldest such release, so gathered buffers cannot pile up
//                  while the host runs ahead. A no-op on the CPU, where waits block anyway.
#pragma once

#include <c10/core/Device.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"

namespace ftrain::fsdp {

class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // An event recorded now on the current stream; its handle stays valid until Release.
  virtual int Record() = 0;
  // Seconds between two recorded events (both complete).
  virtual double Elapsed(int from, int to) = 0;
  // The host waits until the stream has passed the event.
  virtual void Synchronize(int event) = 0;
  virtual void Release(int event) = 0;
};
// On `device`'s current stream; null for a CPU device.
std::unique_ptr<StreamEvents> MakeStreamEvents(c10::Device device);

class CommWaits {
 public:
  explicit CommWaits(std::unique_ptr<StreamEvents> events = nullptr) : events_(std::move(events)) {}
  // Runs `wait` (a Work::Wait) and accounts for it in the current phase.
  Status Wait(const std::function<Status()>& wait);
  // The phase the next waits belong to: the micro-batches (true) or the optimizer step.
  void set_forward_backward(bool fb) { fb_ = fb; }
  // While false, waits are not accounted (a held-out evaluation between steps).
  void set_counting(bool on) { counting_ = on; }
  // Seconds waited since the last Take, in total and during the micro-batches. On a GPU the
  // events must be complete: call after the step's host synchronisation.
  struct Seconds {
    double total = 0, forward_backward = 0;
  };
  Seconds Take();

 private:
  struct Pair {
    int before, after;
    bool fb;
  };
  std::unique_ptr<StreamEvents> events_;  // null on the CPU: host time
  bool fb_ = true;
  bool counting_ = true;
  Seconds host_;
  std::vector<Pair> pairs_;
};

class GatherLimit {
 public:
  GatherLimit(std::unique_ptr<StreamEvents> events, size_t max_pending)
      : events_(std::move(events)), max_(max_pending) {}
  // The host let go of a gathered unit: mark the point on the stream where its use ends.
  void Released();
  // Before issuing an all-gather: wait until fewer than max_pending releases are pending.
  void BeforeGather();
  size_t pending() const { return pending_.size(); }

 private:
  std::unique_ptr<StreamEvents> events_;  // null on the CPU: nothing to bound
  size_t max_;
  std::deque<int> pending_;
};

}  // namespace ftrain::fsdp
