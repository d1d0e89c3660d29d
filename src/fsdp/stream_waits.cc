// StreamEvents on a GPU, CommWaits and GatherLimit (see stream_waits.h).
#include "fsdp/stream_waits.h"

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>

namespace ftrain::fsdp {
namespace {

// A pool of timed c10::Events on the device's current stream.
class DeviceStreamEvents : public StreamEvents {
 public:
  explicit DeviceStreamEvents(c10::Device device) : device_(device) {}
  int Record() override {
    int id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<int>(events_.size());
      events_.push_back(
          std::make_unique<c10::Event>(device_.type(), c10::EventFlag::BACKEND_DEFAULT));
    }
    events_[static_cast<size_t>(id)]->record(
        c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
    return id;
  }
  double Elapsed(int from, int to) override {
    return events_[static_cast<size_t>(from)]->elapsedTime(*events_[static_cast<size_t>(to)]) / 1e3;
  }
  void Synchronize(int event) override { events_[static_cast<size_t>(event)]->synchronize(); }
  void Release(int event) override { free_.push_back(event); }

 private:
  c10::Device device_;
  std::vector<std::unique_ptr<c10::Event>> events_;
  std::vector<int> free_;
};

}  // namespace

std::unique_ptr<StreamEvents> MakeStreamEvents(c10::Device device) {
  if (device.is_cpu()) return nullptr;
  return std::make_unique<DeviceStreamEvents>(device);
}

Status CommWaits::Wait(const std::function<Status()>& wait) {
  if (!counting_) return wait();
  if (!events_) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = wait();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    host_.total += dt;
    if (fb_) host_.forward_backward += dt;
    return s;
  }
  Pair p{events_->Record(), -1, fb_};
  Status s = wait();  // the stream now waits for the collective's completion
  p.after = events_->Record();
  pairs_.push_back(p);
  return s;
}

CommWaits::Seconds CommWaits::Take() {
  Seconds out = host_;
  host_ = Seconds();
  for (const Pair& p : pairs_) {
    const double s = events_->Elapsed(p.before, p.after);
    out.total += s;
    if (p.fb) out.forward_backward += s;
    events_->Release(p.before);
    events_->Release(p.after);
  }
  pairs_.clear();
  return out;
}

void GatherLimit::Released() {
  if (events_) pending_.push_back(events_->Record());
}

void GatherLimit::BeforeGather() {
  while (!pending_.empty() && pending_.size() >= max_) {
    events_->Synchronize(pending_.front());
    events_->Release(pending_.front());
    pending_.pop_front();
  }
}

}  // namespace ftrain::fsdp
