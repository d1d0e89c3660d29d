// train.device: choice and checks (see device.h).
#include "train/device.h"

#include <ATen/Context.h>

#include <cstdlib>

namespace ftrain::train {
namespace {

int LocalRankFromEnv() {
  for (const char* var : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

}  // namespace

StatusOr<DeviceChoice> ChooseDevice(Device wanted, int local_world_size) {
  DeviceChoice c;
  if (wanted == Device::kCpu) {
    c.description = "cpu";
    return c;
  }
  if (!at::globalContext().hasCUDART()) {  // build time: a CUDA LibTorch links cudart
    return Status::FailedPrecondition(
        "train.device = cuda, but this ftrain is linked with a LibTorch built without CUDA; "
        "rebuild against a CUDA LibTorch (docs/building.md) or use train.device = cpu");
  }
  const int visible = at::hasCUDA() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (visible == 0) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    return Status::FailedPrecondition(
        std::string("train.device = cuda, but no usable GPU is visible (CUDA_VISIBLE_DEVICES=") +
        (cvd ? cvd : "<unset>") +
        "; no driver, or the job asked Slurm for no GPUs: add --gpus-per-node); use "
        "train.device = cpu to train on CPUs");
  }
  const int local = LocalRankFromEnv();
  if (visible > 1 && (local >= visible || local_world_size > visible)) {
    return Status::FailedPrecondition(
        "train.device = cuda: " + std::to_string(std::max(local + 1, local_world_size)) +
        " ranks on this node but only " + std::to_string(visible) +
        " GPUs are visible; run one rank per GPU (srun --ntasks-per-node = GPUs per node)");
  }
  c.cuda_index = visible == 1 ? 0 : local;
  c.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(c.cuda_index));
  c.description = "cuda:" + std::to_string(c.cuda_index) + " of " + std::to_string(visible) +
                  " visible (local rank " + std::to_string(local) + ")";
  return c;
}

std::string PinDeterministicMathModes() {
  // cuBLAS reads it when its first handle is created: before any CUDA math runs.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  ctx.setAllowTF32CuBLAS(false);
  ctx.setAllowTF32CuDNN(false);
  return std::string(
             "deterministic algorithms on, TF32 off (cuBLAS and cuDNN), cuDNN "
             "benchmarking off, CUBLAS_WORKSPACE_CONFIG=") +
         std::getenv("CUBLAS_WORKSPACE_CONFIG");
}

}  // namespace ftrain::train
