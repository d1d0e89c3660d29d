// The GPU rank's ckpt::DeviceMemory: snapshots go device -> host on a side stream, ordered
// after the training stream's work, straight into ckptd's shared-memory slots registered
// with cudaHostRegister (DMA at full link speed, no second host copy). Where registering
// fails (a low memlock limit), the copy goes through a pinned bounce buffer and the log says
// so once. No LibTorch or CUDA in this header.
#pragma once

#include <memory>

#include "ckpt/ckptd_client.h"

namespace ftrain::train {

// For CUDA device `device`; null when this ftrain was built without CUDA.
std::unique_ptr<ckpt::DeviceMemory> MakeCudaDeviceMemory(int device);

}  // namespace ftrain::train
