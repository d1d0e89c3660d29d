// GPU health numbers for the metrics: utilisation and memory of this rank's GPU through NVML,
// loaded at run time (dlopen of libnvidia-ml.so.1, never linked, so ftrain starts where no
// driver is; without it the GPU fields are left out, never faked), the dense bf16 peak of
// known GPU models, model FLOPs utilisation, and step-time percentiles over a window.
// No LibTorch and no CUDA headers here.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

namespace ftrain::train {

struct GpuSample {
  double util_percent = 0;  // NVML's "GPU busy" share of the last sample period, 0-100
  double mem_used_gib = 0;  // device memory in use (all processes), GiB (2^30 bytes)
};

class NvmlGpu {
 public:
  static constexpr const char* kLibrary = "libnvidia-ml.so.1";
  ~NvmlGpu();
  // The GPU of CUDA ordinal `cuda_index` in this process (found by PCI bus id through the
  // CUDA runtime the process already loaded, else through CUDA_VISIBLE_DEVICES). nullptr,
  // with `why` set, when the library, a symbol, NVML's init or the device is missing.
  // `library` is for tests (a stand-in NVML); production passes kLibrary.
  static std::unique_ptr<NvmlGpu> Open(int cuda_index, const std::string& library,
                                       std::string* why);
  // nullopt when NVML fails this time (the fields are then left out of that step).
  std::optional<GpuSample> Sample();
  const std::string& name() const { return name_; }  // "NVIDIA H100 80GB HBM3"

 private:
  struct Api;
  NvmlGpu() = default;
  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string name_;
};

// Dense (no sparsity) bf16 tensor-core peak in TFLOP/s of the GPU model NVML names, from
// NVIDIA's data sheets; 0 when the model is not in the table (then set metrics.peak_tflops).
double PeakBf16Tflops(const std::string& gpu_name);

// Model FLOPs utilisation: 6 * params * tokens_per_s / (devices * peak), the usual 6P FLOPs
// per token for forward + backward (attention's extra FLOPs not counted). 0 if unknown.
double Mfu(double params, double tokens_per_s, int devices, double peak_tflops);

// The last `capacity` step times; nearest-rank percentiles.
class StepTimeWindow {
 public:
  explicit StepTimeWindow(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  void Add(double seconds);
  // q in (0, 1]; 0 when empty. The smallest value with at least q of the window <= it.
  double Percentile(double q) const;
  size_t size() const { return times_.size(); }

 private:
  size_t capacity_;
  std::deque<double> times_;
};

}  // namespace ftrain::train
