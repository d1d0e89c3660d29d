// A stand-in libnvidia-ml for the metrics tests (dlopened by train/telemetry/gpu_health.cc in place
// of the driver's): one "NVIDIA H100 80GB HBM3" at 37 % utilisation with 12.5 GiB in use. Same C
// ABI as nvml.h for the functions ftrain calls; nothing else.
#include <cstring>

namespace {
int g_device;  // the one device's handle points here
}

extern "C" {

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) { return rc == 0 ? "Success" : "Not Found"; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0) return 6;  // NVML_ERROR_NOT_FOUND
  *device = &g_device;
  return 0;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char*, void**) { return 6; }
int nvmlDeviceGetHandleByUUID(const char*, void**) { return 6; }
int nvmlDeviceGetName(void*, char* name, unsigned int length) {
  std::strncpy(name, "NVIDIA H100 80GB HBM3", length);
  return 0;
}
int nvmlDeviceGetUtilizationRates(void*, unsigned int* rates) {  // {gpu, memory}
  rates[0] = 37;
  rates[1] = 20;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void*, unsigned long long* mem) {  // {total, free, used}
  mem[0] = 80ull << 30;
  mem[2] = (25ull << 30) / 2;
  mem[1] = mem[0] - mem[2];
  return 0;
}

}  // extern "C"
