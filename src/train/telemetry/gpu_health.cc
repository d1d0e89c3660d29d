// NVML through dlopen, the peak table, MFU and step-time percentiles.
#include "train/telemetry/gpu_health.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace ftrain::train {

// The few NVML entry points used, with nvml.h's C ABI (nvmlReturn_t is an int enum, 0 =
// NVML_SUCCESS; nvmlDevice_t an opaque pointer). Declared here so that building needs no
// NVML header and running needs no NVML at all.
struct NvmlGpu::Api {
  struct Utilization {  // nvmlUtilization_t
    unsigned int gpu;
    unsigned int memory;
  };
  struct Memory {  // nvmlMemory_t
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
  };
  int (*init)() = nullptr;      // nvmlInit_v2
  int (*shutdown)() = nullptr;  // nvmlShutdown
  int (*by_index)(unsigned int, void**) = nullptr;
  int (*by_pci)(const char*, void**) = nullptr;
  int (*by_uuid)(const char*, void**) = nullptr;
  int (*name)(void*, char*, unsigned int) = nullptr;
  int (*utilization)(void*, Utilization*) = nullptr;
  int (*memory)(void*, Memory*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  bool initialized = false;
};

namespace {

template <typename F>
bool Bind(void* lib, const char* symbol, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(::dlsym(lib, symbol));
  if (*out == nullptr) *missing = symbol;
  return *out != nullptr;
}

// The PCI bus id of CUDA ordinal `cuda_index` from the CUDA runtime that LibTorch loaded into
// this process (looked up, not linked: this file stays CUDA-free). "" when there is none.
std::string CudaPciBusId(int cuda_index) {
  using Fn = int (*)(char*, int, int);  // cudaDeviceGetPCIBusId
  auto fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "cudaDeviceGetPCIBusId"));
  char buf[64] = {0};
  if (fn == nullptr || fn(buf, sizeof(buf), cuda_index) != 0) return "";
  return buf;
}

// Entry `cuda_index` of CUDA_VISIBLE_DEVICES ("" when unset or too short).
std::string VisibleDeviceEntry(int cuda_index) {
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr) return "";
  std::stringstream in(cvd);
  std::string item;
  for (int i = 0; std::getline(in, item, ','); ++i) {
    if (i == cuda_index) return item;
  }
  return "";
}

}  // namespace

NvmlGpu::~NvmlGpu() {
  if (api_ && api_->initialized) api_->shutdown();  // ignored: the process is done with NVML
  if (lib_ != nullptr) ::dlclose(lib_);
}

std::unique_ptr<NvmlGpu> NvmlGpu::Open(int cuda_index, const std::string& library,
                                       std::string* why) {
  std::unique_ptr<NvmlGpu> g(new NvmlGpu());
  g->lib_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (g->lib_ == nullptr) {
    const char* err = ::dlerror();
    *why = "cannot load " + library + " (" + (err ? err : "?") + ")";
    return nullptr;
  }
  g->api_ = std::make_unique<Api>();
  Api& a = *g->api_;
  std::string missing;
  if (!Bind(g->lib_, "nvmlInit_v2", &a.init, &missing) ||
      !Bind(g->lib_, "nvmlShutdown", &a.shutdown, &missing) ||
      !Bind(g->lib_, "nvmlDeviceGetHandleByIndex_v2", &a.by_index, &missing) ||
      !Bind(g->lib_, "nvmlDeviceGetHandleByPciBusId_v2", &a.by_pci, &missing) ||
      !Bind(g->lib_, "nvmlDeviceGetHandleByUUID", &a.by_uuid, &missing) ||
      !Bind(g->lib_, "nvmlDeviceGetName", &a.name, &missing) ||
      !Bind(g->lib_, "nvmlDeviceGetUtilizationRates", &a.utilization, &missing) ||
      !Bind(g->lib_, "nvmlDeviceGetMemoryInfo", &a.memory, &missing) ||
      !Bind(g->lib_, "nvmlErrorString", &a.error_string, &missing)) {
    *why = library + " has no " + missing + " (driver too old?)";
    return nullptr;
  }
  int rc = a.init();
  if (rc != 0) {
    *why = std::string("nvmlInit failed: ") + a.error_string(rc);
    return nullptr;
  }
  a.initialized = true;
  // NVML numbers GPUs by PCI order over the whole node; CUDA by CUDA_VISIBLE_DEVICES (and
  // its own order). The PCI bus id names the same GPU in both.
  const std::string pci = CudaPciBusId(cuda_index);
  const std::string visible = VisibleDeviceEntry(cuda_index);
  if (!pci.empty()) {
    rc = a.by_pci(pci.c_str(), &g->device_);
  } else if (visible.rfind("GPU-", 0) == 0) {
    rc = a.by_uuid(visible.c_str(), &g->device_);
  } else {
    const int index = visible.empty() ? cuda_index : std::atoi(visible.c_str());
    rc = a.by_index(static_cast<unsigned int>(index), &g->device_);
  }
  if (rc != 0) {
    *why = "NVML cannot find CUDA device " + std::to_string(cuda_index) +
           (pci.empty() ? "" : " (PCI " + pci + ")") + ": " + a.error_string(rc);
    return nullptr;
  }
  char name[96] = {0};
  if (a.name(g->device_, name, sizeof(name)) == 0) g->name_ = name;
  return g;
}

std::optional<GpuSample> NvmlGpu::Sample() {
  Api::Utilization u{};
  Api::Memory m{};
  if (api_->utilization(device_, &u) != 0 || api_->memory(device_, &m) != 0) return std::nullopt;
  GpuSample s;
  s.util_percent = u.gpu;
  s.mem_used_gib = static_cast<double>(m.used) / (1024.0 * 1024.0 * 1024.0);
  return s;
}

double PeakBf16Tflops(const std::string& gpu_name) {
  // First match wins, so the more specific names come first ("GB200" before "B200", "H100
  // PCIe" before "H100", "A100" before "A10"). Dense bf16 tensor TFLOP/s, data-sheet values.
  static const std::vector<std::pair<const char*, double>> kTable = {
      {"GB200", 2500},    {"B200", 2250},    {"GH200", 989}, {"H200 NVL", 836},  {"H200", 989},
      {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989},  {"H800 PCIe", 756}, {"H800", 989},
      {"H20", 148},       {"A100", 312},     {"A800", 312},  {"L40S", 362},      {"L40", 181},
      {"L4", 121},        {"A10G", 70},      {"A10", 125},
  };
  for (const auto& [key, tflops] : kTable) {
    if (gpu_name.find(key) != std::string::npos) return tflops;
  }
  return 0;
}

double Mfu(double params, double tokens_per_s, int devices, double peak_tflops) {
  if (params <= 0 || tokens_per_s <= 0 || devices <= 0 || peak_tflops <= 0) return 0;
  return 6.0 * params * tokens_per_s / (static_cast<double>(devices) * peak_tflops * 1e12);
}

void StepTimeWindow::Add(double seconds) {
  times_.push_back(seconds);
  while (times_.size() > capacity_) times_.pop_front();
}

double StepTimeWindow::Percentile(double q) const {
  if (times_.empty()) return 0;
  std::vector<double> sorted(times_.begin(), times_.end());
  std::sort(sorted.begin(), sorted.end());
  // The epsilon keeps 0.95 * 20 (not exactly 19 in binary) from rounding up to rank 20.
  const double rank =
      std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size()) - 1e-9);
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

}  // namespace ftrain::train
