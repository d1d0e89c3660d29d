// A named range for profilers, around one unit's forward, a collective's wait, the optimizer
// or a checkpoint copy: a LibTorch RecordFunction (the Kineto profiler of train.profile_steps
// writes it into its Chrome trace; when no profiler is on it is one thread-local check) and,
// in a build with the CUDA toolkit, an NVTX range (what nsys and ncu show; nvtx3 is
// header-only and costs a few nanoseconds when no tool is attached). Header-only.
#pragma once

#include <ATen/record_function.h>

#include <string>
#include <utility>

#if defined(FTRAIN_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace ftrain {

class TraceRange {
 public:
  explicit TraceRange(std::string name)
      : name_(std::move(name)), guard_(at::RecordScope::USER_SCOPE) {
    // The record keeps a view of the name: name_ outlives guard_ (declared before it).
    if (guard_.isActive()) guard_.before(std::string_view(name_));
#if defined(FTRAIN_WITH_NVTX)
    nvtxRangePushA(name_.c_str());
#endif
  }
  ~TraceRange() {
#if defined(FTRAIN_WITH_NVTX)
    nvtxRangePop();
#endif
  }
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;

 private:
  std::string name_;
  at::RecordFunction guard_;
};

}  // namespace ftrain
