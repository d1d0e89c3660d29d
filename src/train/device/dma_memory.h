// The bookkeeping of a GPU rank's ckpt::DeviceMemory, apart from the CUDA runtime it drives:
// which host ranges are pinned, which copies go straight into a pinned destination (DMA) and
// which through the pinned bounce buffer, chunk by chunk, and when the copy and compute
// streams wait for each other. The CUDA calls are a DmaRuntime: train/device/device_memory.cc has
// the real one, tests a fake on host memory. No LibTorch or CUDA here.
#pragma once

#include <cstddef>
#include <memory>

#include "ckpt/ckptd_client.h"
#include "core/status.h"

namespace ftrain::train {

// What CudaDeviceMemory asks of the CUDA runtime. "Copy stream": a side stream of its own;
// "compute stream": LibTorch's current stream, where the training step runs.
class DmaRuntime {
 public:
  virtual ~DmaRuntime() = default;
  virtual Status PinHost(void* p, size_t n) = 0;       // cudaHostRegister
  virtual void UnpinHost(void* p) = 0;                 // cudaHostUnregister
  virtual Status AllocPinned(void** p, size_t n) = 0;  // cudaMallocHost
  virtual void FreePinned(void* p) = 0;                // cudaFreeHost
  // The copy stream waits for the work queued on the compute stream so far.
  virtual Status CopiesAfterCompute() = 0;
  // Queues a device -> host copy on the copy stream.
  virtual Status CopyAsync(void* dst, const void* src, size_t n) = 0;
  // The host waits for everything queued on the copy stream.
  virtual Status SyncCopies() = 0;
  // Marks the copy stream's position (the end of the started copies) ...
  virtual Status MarkCopies() = 0;
  // ... that the host waits for ...
  virtual Status WaitForMark() = 0;
  // ... or that the compute stream waits for, without blocking the host.
  virtual Status ComputeAfterMark() = 0;
};

// The ckpt::DeviceMemory over `runtime`: a pinned destination gets one asynchronous copy; any
// other goes through a pinned bounce buffer of `bounce_bytes`, synchronously.
std::unique_ptr<ckpt::DeviceMemory> MakeDmaDeviceMemory(std::unique_ptr<DmaRuntime> runtime,
                                                        size_t bounce_bytes = size_t{64} << 20);

}  // namespace ftrain::train
