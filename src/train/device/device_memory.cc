// The CUDA runtime under DmaDeviceMemory (train/device/dma_memory.h), which keeps the bookkeeping.
// Built with CUDA only (FTRAIN_WITH_NCCL); CI compiles and links it and tests the bookkeeping
// with a fake runtime (tests/device_memory_test.cc); scripts/gpu-check.sh measures it (stall
// vs one D2H copy) and tests/gpu_test.cc checks it on a GPU.
#include "train/device/device_memory.h"

#include "train/device/dma_memory.h"

#ifdef FTRAIN_WITH_NCCL
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <string>
#endif

namespace ftrain::train {

#ifdef FTRAIN_WITH_NCCL
namespace {

Status CudaStatus(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // not sticky, but cleared so that no later check reports it
  return Status::IOError(std::string(what) + " failed: " + cudaGetErrorString(e));
}

class CudaRuntime : public DmaRuntime {
 public:
  explicit CudaRuntime(int device)
      : device_(static_cast<c10::DeviceIndex>(device)),
        side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_)) {}

  ~CudaRuntime() override {
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
  }

  Status PinHost(void* p, size_t n) override {
    c10::cuda::CUDAGuard guard(device_);
    return CudaStatus("cudaHostRegister", cudaHostRegister(p, n, cudaHostRegisterDefault));
  }
  void UnpinHost(void* p) override {
    c10::cuda::CUDAGuard guard(device_);
    cudaHostUnregister(p);  // the range is about to be unmapped; an error changes nothing
  }
  Status AllocPinned(void** p, size_t n) override {
    c10::cuda::CUDAGuard guard(device_);
    return CudaStatus("cudaMallocHost", cudaMallocHost(p, n));
  }
  void FreePinned(void* p) override { cudaFreeHost(p); }  // teardown: nothing to say

  Status CopiesAfterCompute() override {
    c10::cuda::CUDAGuard guard(device_);
    FT_RETURN_IF_ERROR(EnsureEvent(&ready_));
    cudaError_t e = cudaEventRecord(ready_, c10::cuda::getCurrentCUDAStream(device_));
    if (e == cudaSuccess) e = cudaStreamWaitEvent(side_, ready_, 0);
    return CudaStatus("cudaStreamWaitEvent (copy after compute)", e);
  }
  Status CopyAsync(void* dst, const void* src, size_t n) override {
    c10::cuda::CUDAGuard guard(device_);
    return CudaStatus("cudaMemcpyAsync (device to host)",
                      cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, side_));
  }
  Status SyncCopies() override {
    c10::cuda::CUDAGuard guard(device_);
    return CudaStatus("cudaStreamSynchronize", cudaStreamSynchronize(side_));
  }
  Status MarkCopies() override {
    c10::cuda::CUDAGuard guard(device_);
    FT_RETURN_IF_ERROR(EnsureEvent(&done_));
    return CudaStatus("cudaEventRecord", cudaEventRecord(done_, side_));
  }
  Status WaitForMark() override {
    c10::cuda::CUDAGuard guard(device_);
    return CudaStatus("cudaEventSynchronize", cudaEventSynchronize(done_));
  }
  Status ComputeAfterMark() override {
    c10::cuda::CUDAGuard guard(device_);
    return CudaStatus("cudaStreamWaitEvent (compute after copy)",
                      cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_), done_, 0));
  }

 private:
  static Status EnsureEvent(cudaEvent_t* ev) {
    if (*ev != nullptr) return Status::Ok();
    cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (e != cudaSuccess) *ev = nullptr;
    return CudaStatus("cudaEventCreate", e);
  }

  const c10::DeviceIndex device_;
  c10::cuda::CUDAStream side_;   // the copy stream
  cudaEvent_t ready_ = nullptr;  // the compute stream's position when copies started
  cudaEvent_t done_ = nullptr;   // the copy stream's position after the last started copy
};

}  // namespace

std::unique_ptr<ckpt::DeviceMemory> MakeCudaDeviceMemory(int device) {
  return MakeDmaDeviceMemory(std::make_unique<CudaRuntime>(device));
}
#else
std::unique_ptr<ckpt::DeviceMemory> MakeCudaDeviceMemory(int /*device*/) { return nullptr; }
#endif

}  // namespace ftrain::train
