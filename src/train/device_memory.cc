// CudaDeviceMemory (see device_memory.h). Built with CUDA only (FTRAIN_WITH_NCCL); CI
// compiles and links it, scripts/gpu-check.sh measures it (stall vs one D2H copy).
#include "train/device_memory.h"

#ifdef FTRAIN_WITH_NCCL
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/log.h"
#endif

namespace ftrain::train {

#ifdef FTRAIN_WITH_NCCL
namespace {

Status CudaError(const std::string& what, cudaError_t e) {
  return Status::IOError(what + " failed: " + cudaGetErrorString(e));
}

class CudaDeviceMemory : public ckpt::DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device)
      : device_(static_cast<c10::DeviceIndex>(device)),
        side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_)) {}

  ~CudaDeviceMemory() override {
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (bounce_ != nullptr) cudaFreeHost(bounce_);
    for (const auto& r : registered_) cudaHostUnregister(r.first);  // teardown: nothing to say
  }

  void RegisterHost(void* p, size_t n) override {
    c10::cuda::CUDAGuard guard(device_);
    cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterDefault);
    if (e == cudaSuccess) {
      registered_.push_back({p, n});
      return;
    }
    cudaGetLastError();  // not sticky, but cleared so that no later check reports it
    if (!warned_) {
      warned_ = true;
      FT_LOG(Warning) << "checkpoint: cannot pin " << n << " bytes of snapshot memory for DMA ("
                      << cudaGetErrorString(e)
                      << "; is the memlock limit low? see `ulimit -l`): device -> host copies go "
                         "through a pinned bounce buffer, which is slower";
    }
  }

  void UnregisterHost(void* p) override {
    for (size_t i = 0; i < registered_.size(); ++i) {
      if (registered_[i].first != p) continue;
      c10::cuda::CUDAGuard guard(device_);
      cudaHostUnregister(p);  // the range is about to be unmapped; an error changes nothing
      registered_.erase(registered_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }

  Status StartCopyToHost(const std::vector<ckpt::DeviceCopy>& copies) override {
    c10::cuda::CUDAGuard guard(device_);
    started_ = std::chrono::steady_clock::now();
    started_bytes_ = 0;
    // The side stream starts where the training stream is now: after the optimizer step
    // that produced the state (LibTorch's kernels run on its current stream).
    FT_RETURN_IF_ERROR(EnsureEvent(&ready_));
    FT_RETURN_IF_ERROR(EnsureEvent(&done_));
    cudaStream_t cur = c10::cuda::getCurrentCUDAStream(device_);
    cudaError_t e = cudaEventRecord(ready_, cur);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(side_, ready_, 0);
    if (e != cudaSuccess) return CudaError("ordering the snapshot copy", e);
    for (const auto& c : copies) {
      started_bytes_ += c.n;
      if (Registered(c.dst, c.n)) {
        e = cudaMemcpyAsync(c.dst, c.src, c.n, cudaMemcpyDeviceToHost, side_);
        if (e != cudaSuccess) return CudaError("cudaMemcpyAsync (device to host)", e);
        continue;
      }
      FT_RETURN_IF_ERROR(Bounce(c));  // synchronous: unregistered memory is no DMA target
    }
    e = cudaEventRecord(done_, side_);
    if (e != cudaSuccess) return CudaError("recording the snapshot copy", e);
    return Status::Ok();
  }

  Status WaitForCopies() override {
    if (done_ == nullptr) return Status::Ok();
    c10::cuda::CUDAGuard guard(device_);
    cudaError_t e = cudaEventSynchronize(done_);
    if (e != cudaSuccess) return CudaError("device to host snapshot copy", e);
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
    if (done_ == nullptr) return Status::Ok();
    c10::cuda::CUDAGuard guard(device_);
    cudaError_t e = cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_), done_, 0);
    return e == cudaSuccess ? Status::Ok() : CudaError("ordering after the snapshot copy", e);
  }

 private:
  static Status EnsureEvent(cudaEvent_t* ev) {
    if (*ev != nullptr) return Status::Ok();
    cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      *ev = nullptr;
      return CudaError("cudaEventCreate", e);
    }
    return Status::Ok();
  }

  bool Registered(const void* p, uint64_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    for (const auto& r : registered_) {
      const auto* lo = static_cast<const uint8_t*>(r.first);
      if (b >= lo && b + n <= lo + r.second) return true;
    }
    return false;
  }

  // Through the pinned bounce buffer, chunk by chunk (unregistered destinations only).
  Status Bounce(const ckpt::DeviceCopy& c) {
    constexpr size_t kBounce = 64u << 20;
    if (bounce_ == nullptr) {
      cudaError_t e = cudaMallocHost(&bounce_, kBounce);
      if (e != cudaSuccess) {
        bounce_ = nullptr;
        return CudaError("cudaMallocHost of the snapshot bounce buffer", e);
      }
    }
    for (uint64_t done = 0; done < c.n;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kBounce, c.n - done));
      cudaError_t e = cudaMemcpyAsync(bounce_, static_cast<const uint8_t*>(c.src) + done, n,
                                      cudaMemcpyDeviceToHost, side_);
      if (e == cudaSuccess) e = cudaStreamSynchronize(side_);
      if (e != cudaSuccess) return CudaError("device to host copy (bounce buffer)", e);
      std::memcpy(static_cast<uint8_t*>(c.dst) + done, bounce_, n);
      done += n;
    }
    return Status::Ok();
  }

  const c10::DeviceIndex device_;
  c10::cuda::CUDAStream side_;
  cudaEvent_t ready_ = nullptr;  // the training stream's position when a copy started
  cudaEvent_t done_ = nullptr;   // the side stream's position after the last started copy
  std::chrono::steady_clock::time_point started_;
  uint64_t started_bytes_ = 0;
  void* bounce_ = nullptr;
  bool warned_ = false;
  std::vector<std::pair<void*, size_t>> registered_;
};

}  // namespace

std::unique_ptr<ckpt::DeviceMemory> MakeCudaDeviceMemory(int device) {
  return std::make_unique<CudaDeviceMemory>(device);
}
#else
std::unique_ptr<ckpt::DeviceMemory> MakeCudaDeviceMemory(int /*device*/) { return nullptr; }
#endif

}  // namespace ftrain::train
