// DmaDeviceMemory (see dma_memory.h).
#include "train/device/dma_memory.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/log.h"

namespace ftrain::train {
namespace {

class DmaDeviceMemory : public ckpt::DeviceMemory {
 public:
  DmaDeviceMemory(std::unique_ptr<DmaRuntime> rt, size_t bounce_bytes)
      : rt_(std::move(rt)), bounce_bytes_(bounce_bytes) {}

  ~DmaDeviceMemory() override {
    if (bounce_ != nullptr) rt_->FreePinned(bounce_);
    for (const auto& r : registered_) rt_->UnpinHost(r.first);  // teardown: nothing to say
  }

  void RegisterHost(void* p, size_t n) override {
    Status s = rt_->PinHost(p, n);
    if (s.ok()) {
      registered_.push_back({p, n});
      return;
    }
    if (!warned_) {
      warned_ = true;
      FT_LOG(Warning) << "checkpoint: cannot pin " << n << " bytes of snapshot memory for DMA ("
                      << s.message()
                      << "; is the memlock limit low? see `ulimit -l`): device -> host copies go "
                         "through a pinned bounce buffer, which is slower";
    }
  }

  void UnregisterHost(void* p) override {
    for (size_t i = 0; i < registered_.size(); ++i) {
      if (registered_[i].first != p) continue;
      rt_->UnpinHost(p);  // the range is about to be unmapped; an error changes nothing
      registered_.erase(registered_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }

  Status StartCopyToHost(const std::vector<ckpt::DeviceCopy>& copies) override {
    started_ = std::chrono::steady_clock::now();
    started_bytes_ = 0;
    // The copy stream starts where the compute stream is now: after the optimizer step that
    // produced the state (LibTorch's kernels run on its current stream).
    FT_RETURN_IF_ERROR(rt_->CopiesAfterCompute().Annotate("ordering the snapshot copy"));
    marked_ = false;
    Status s = QueueCopies(copies);
    if (s.ok()) s = rt_->MarkCopies().Annotate("recording the snapshot copy");
    if (!s.ok()) {
      // The copies queued before the failure still write into their slots: wait for them
      // here, as nothing marks their end. Their own error is the one already returned.
      (void)rt_->SyncCopies();
      return s;
    }
    marked_ = true;
    return Status::Ok();
  }

  Status WaitForCopies() override {
    if (!marked_) return Status::Ok();
    FT_RETURN_IF_ERROR(rt_->WaitForMark().Annotate("device to host snapshot copy"));
    if (started_bytes_ > 0) {
      // Since the copies were started: with the overlap this includes compute that ran
      // meanwhile, so it bounds the copy time from above.
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      FT_LOG(Info) << "checkpoint: " << started_bytes_ << " bytes device -> host in " << s << " s ("
                   << (s > 0 ? started_bytes_ / s / 1e9 : 0) << " GB/s)";
      started_bytes_ = 0;
    }
    return Status::Ok();
  }

  Status OrderBeforeStateChanges() override {
    if (!marked_) return Status::Ok();
    return rt_->ComputeAfterMark().Annotate("ordering after the snapshot copy");
  }

 private:
  bool Registered(const void* p, uint64_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    for (const auto& r : registered_) {
      const auto* lo = static_cast<const uint8_t*>(r.first);
      if (b >= lo && b + n <= lo + r.second) return true;
    }
    return false;
  }

  Status QueueCopies(const std::vector<ckpt::DeviceCopy>& copies) {
    for (const auto& c : copies) {
      started_bytes_ += c.n;
      if (Registered(c.dst, c.n)) {
        FT_RETURN_IF_ERROR(rt_->CopyAsync(c.dst, c.src, static_cast<size_t>(c.n)));
        continue;
      }
      FT_RETURN_IF_ERROR(Bounce(c));  // synchronous: unregistered memory is no DMA target
    }
    return Status::Ok();
  }

  // Through the pinned bounce buffer, chunk by chunk (unregistered destinations only).
  Status Bounce(const ckpt::DeviceCopy& c) {
    if (bounce_ == nullptr) {
      void* p = nullptr;
      FT_RETURN_IF_ERROR(
          rt_->AllocPinned(&p, bounce_bytes_).Annotate("allocating the snapshot bounce buffer"));
      bounce_ = p;
    }
    for (uint64_t done = 0; done < c.n;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bounce_bytes_, c.n - done));
      Status s = rt_->CopyAsync(bounce_, static_cast<const uint8_t*>(c.src) + done, n);
      if (s.ok()) s = rt_->SyncCopies();
      if (!s.ok()) return s.Annotate("device to host copy (bounce buffer)");
      std::memcpy(static_cast<uint8_t*>(c.dst) + done, bounce_, n);
      done += n;
    }
    return Status::Ok();
  }

  std::unique_ptr<DmaRuntime> rt_;
  const size_t bounce_bytes_;
  bool marked_ = false;  // copies were started (the mark is where they end)
  std::chrono::steady_clock::time_point started_;
  uint64_t started_bytes_ = 0;
  void* bounce_ = nullptr;
  bool warned_ = false;
  std::vector<std::pair<void*, size_t>> registered_;
};

}  // namespace

std::unique_ptr<ckpt::DeviceMemory> MakeDmaDeviceMemory(std::unique_ptr<DmaRuntime> runtime,
                                                        size_t bounce_bytes) {
  return std::make_unique<DmaDeviceMemory>(std::move(runtime), bounce_bytes);
}

}  // namespace ftrain::train
