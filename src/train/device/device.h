// train.device: which device this rank trains on, chosen and checked before anything is
// allocated. cuda: one rank per GPU, the GPU Slurm (or the launcher) bound to the task, with
// the math modes that keep runs bit-exact pinned and recorded. Every refusal is one line: exit
// 2 (FailedPrecondition) for what no node can fix (a LibTorch without CUDA), exit 76
// (NodeFault) for what this node lacks (no usable GPU, fewer GPUs than its ranks, a CUDA
// driver that fails on the chosen GPU); the job controller decides whether a NodeFault on
// every node is the configuration's.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "train/config/train_config.h"

namespace ftrain::train {

struct DeviceChoice {
  torch::Device device = torch::kCPU;
  int cuda_index = -1;        // the CUDA device ordinal this process uses
  std::string description;    // "cpu" or "cuda:0 (NVIDIA H200, 132 SMs, ...)" for logs/manifests
  uint64_t memory_bytes = 0;  // the GPU's memory (cudaDeviceProp); 0 on CPU or unknown
};

// Picks the device before the rendezvous (NCCL communicators are bound to it). The local
// rank comes from the environment the launcher or Slurm set (LOCAL_RANK, SLURM_LOCALID); with
// one visible GPU (Slurm's --gpus-per-task / CUDA_VISIBLE_DEVICES binding) it is that GPU.
// `local_world_size` (0 = unknown yet) is checked against the visible GPUs.
StatusOr<DeviceChoice> ChooseDevice(Device wanted, int local_world_size);

// What the bits of a GPU run depend on beyond the code and the data: recorded in every
// checkpoint's layout; a resume where any of it differs warns that bit-exactness with an
// uninterrupted run is not promised. Empty fields: unknown (CPU runs leave all but torch).
struct DeviceFingerprint {
  std::string gpu;         // "NVIDIA H200"
  int sm_count = 0;        // streaming multiprocessors
  std::string capability;  // "9.0"
  std::string driver;      // CUDA driver API version, "13.0"
  std::string cuda;        // CUDA runtime, "13.0"
  std::string cublas;      // "13.1.0"
  std::string cudnn;       // "91400" as cuDNN reports it
  std::string torch;       // LibTorch, "2.11.0"
};
DeviceFingerprint FingerprintDevice(const DeviceChoice& dev);
// "gpu", "sm_count", ... as (name, value) pairs in a fixed order, for the layout JSON and the
// resume comparison.
std::vector<std::pair<std::string, std::string>> FingerprintFields(const DeviceFingerprint& f);

// Sets the deterministic math modes for CUDA (CUBLAS_WORKSPACE_CONFIG before the first cuBLAS
// handle, deterministic algorithms, no TF32, no cuDNN autotuning) and returns them as text.
std::string PinDeterministicMathModes();

// The CUDA caching allocator's view of this process on `cuda_index` since the last call (the
// peaks are reset after each read): what the tensors held at most, what the allocator reserved
// from the driver at most, and how often it had to free its cache and retry (the slowdown near
// the memory limit that no OOM explains). nullopt on CPU or a build without CUDA.
struct AllocatorStats {
  double allocated_peak_gib = 0;
  double reserved_peak_gib = 0;
  int64_t alloc_retries = 0;  // cumulative
  int64_t ooms = 0;           // cumulative
};
std::optional<AllocatorStats> TakeAllocatorStats(int cuda_index);

}  // namespace ftrain::train
