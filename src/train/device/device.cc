// train.device: choice and checks (see device.h).
#include "train/device/device.h"

#include <ATen/Context.h>
#include <dlfcn.h>

#include <cstdlib>

#ifdef FTRAIN_WITH_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>
#endif

namespace ftrain::train {
namespace {

int LocalRankFromEnv() {
  for (const char* var : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

// Why CUDA sees no device, in the driver's words ("; CUDA: cudaErrorInsufficientDriver: ...":
// a driver older than the runtime, a driver that did not load); "" when it says nothing.
std::string CudaInitError() {
#ifdef FTRAIN_WITH_NCCL
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return std::string("; CUDA: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  }
#endif
  return "";
}

}  // namespace

StatusOr<DeviceChoice> ChooseDevice(Device wanted, int local_world_size) {
  DeviceChoice c;
  if (wanted == Device::kCpu) {
    c.description = "cpu";
    return c;
  }
  // Expandable segments: the caching allocator grows one mapping instead of holding blocks
  // of every size it ever cut, so the gathered units and gradient buffers of changing sizes
  // do not fragment it into allocation retries near the memory limit. Read by the allocator
  // when it first allocates, which comes later; a value the user set is kept.
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
  if (!at::globalContext().hasCUDART()) {  // build time: a CUDA LibTorch links cudart
    return Status::FailedPrecondition(
        "train.device = cuda, but this ftrain is linked with a LibTorch built without CUDA; "
        "rebuild against a CUDA LibTorch (docs/building.md) or use train.device = cpu");
  }
  // From here on a refusal is THIS node's (NodeFault, exit 76): its GPUs, its driver. The job
  // controller tells a node's fault from the configuration's by how many nodes report it.
  const int visible = at::hasCUDA() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (visible == 0) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    return Status::NodeFault(
        std::string("train.device = cuda, but no usable GPU is visible (CUDA_VISIBLE_DEVICES=") +
        (cvd ? cvd : "<unset>") + CudaInitError() +
        "; no driver, or the job asked Slurm for no GPUs: add --gpus-per-node); use "
        "train.device = cpu to train on CPUs");
  }
  const int local = LocalRankFromEnv();
  if (visible > 1 && (local >= visible || local_world_size > visible)) {
    return Status::NodeFault(
        "train.device = cuda: " + std::to_string(std::max(local + 1, local_world_size)) +
        " ranks on this node but only " + std::to_string(visible) +
        " GPUs are visible; run one rank per GPU (srun --ntasks-per-node = GPUs per node)");
  }
  c.cuda_index = visible == 1 ? 0 : local;
  c.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(c.cuda_index));
  c.description = "cuda:" + std::to_string(c.cuda_index) + " of " + std::to_string(visible) +
                  " visible (local rank " + std::to_string(local) + ")";
#ifdef FTRAIN_WITH_NCCL
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, c.cuda_index);
  if (e != cudaSuccess) {  // the GPU or its driver failed here (a GPU fallen off the bus)
    return Status::NodeFault("train.device = cuda: CUDA cannot query " + c.description + ": " +
                             cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
  c.memory_bytes = prop.totalGlobalMem;
#endif
  return c;
}

namespace {
std::string MajorMinor(int v) {  // CUDA encodes 13.0 as 13000
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
}  // namespace

DeviceFingerprint FingerprintDevice(const DeviceChoice& dev) {
  DeviceFingerprint f;
  f.torch = TORCH_VERSION;
#ifdef FTRAIN_WITH_NCCL
  if (!dev.device.is_cuda()) return f;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, dev.cuda_index) == cudaSuccess) {
    f.gpu = prop.name;
    f.sm_count = prop.multiProcessorCount;
    f.capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) f.driver = MajorMinor(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) f.cuda = MajorMinor(v);
  // cuBLAS and cuDNN are LibTorch's (loaded with libtorch_cuda), not linked by ftrain: ask
  // the loaded libraries, so the versions are the ones that actually compute.
  using GetProperty = int (*)(int, int*);  // cublasGetProperty(libraryPropertyType, int*)
  if (auto get = reinterpret_cast<GetProperty>(dlsym(RTLD_DEFAULT, "cublasGetProperty"))) {
    int major = 0, minor = 0, patch = 0;
    if (get(0, &major) == 0 && get(1, &minor) == 0 && get(2, &patch) == 0) {
      f.cublas = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    }
  }
  using GetVersion = size_t (*)();
  if (auto get = reinterpret_cast<GetVersion>(dlsym(RTLD_DEFAULT, "cudnnGetVersion"))) {
    f.cudnn = std::to_string(get());
  }
#else
  (void)dev;  // built without CUDA: nothing but the LibTorch version to record
#endif
  return f;
}

std::vector<std::pair<std::string, std::string>> FingerprintFields(const DeviceFingerprint& f) {
  return {{"gpu", f.gpu},
          {"sm_count", f.sm_count > 0 ? std::to_string(f.sm_count) : ""},
          {"capability", f.capability},
          {"driver", f.driver},
          {"cuda", f.cuda},
          {"cublas", f.cublas},
          {"cudnn", f.cudnn},
          {"torch", f.torch}};
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
  // Attention: cuDNN's SDPA is not deterministic (LibTorch filters it out in strict mode) and
  // the memory-efficient backward raises in strict mode; flash attention's backward has a
  // deterministic path. Where flash does not apply (float32, a sliding-window mask) the math
  // backend runs. docs/fsdp.md.
  ctx.setSDPUseCuDNN(false);
  ctx.setSDPUseMemEfficient(false);
  const char* alloc = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  return std::string(
             "deterministic algorithms on, TF32 off (cuBLAS and cuDNN), cuDNN "
             "benchmarking off, SDPA flash or math (cuDNN and memory-efficient off), "
             "CUBLAS_WORKSPACE_CONFIG=") +
         std::getenv("CUBLAS_WORKSPACE_CONFIG") +
         ", PYTORCH_CUDA_ALLOC_CONF=" + (alloc != nullptr ? alloc : "");
}

std::optional<AllocatorStats> TakeAllocatorStats(int cuda_index) {
#ifdef FTRAIN_WITH_NCCL
  if (cuda_index < 0) return std::nullopt;
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto device = static_cast<c10::DeviceIndex>(cuda_index);
  const c10::CachingDeviceAllocator::DeviceStats s = alloc::getDeviceStats(device);
  constexpr auto kAll = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  AllocatorStats out;
  out.allocated_peak_gib = static_cast<double>(s.allocated_bytes[kAll].peak) / kGiB;
  out.reserved_peak_gib = static_cast<double>(s.reserved_bytes[kAll].peak) / kGiB;
  out.alloc_retries = s.num_alloc_retries;
  out.ooms = s.num_ooms;
  alloc::resetPeakStats(device);
  return out;
#else
  (void)cuda_index;
  return std::nullopt;
#endif
}

}  // namespace ftrain::train
