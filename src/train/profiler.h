// train.profile_steps=A:B: LibTorch's Kineto profiler (its C++ API) records steps A..B of
// this rank, CPU activities and, on a GPU, CUDA activities, and writes a Chrome/Perfetto trace
// to RUN/profile/trace-rank<R>.json (`ftrain paths RUN --get profile`) when step B ends. The
// named ranges in it come from trace/trace_range.h (units, collectives, the optimizer,
// checkpoint copies) and a "ftrain/step N" range per step. Outside those steps nothing is
// enabled. Header without LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::train {

class StepProfiler {
 public:
  // first > last: off. `path`: where the trace goes.
  StepProfiler(int64_t first, int64_t last, std::string path, bool cuda, Env* env);
  ~StepProfiler();
  // Around step `step` (1-based: the number metrics.jsonl gives it).
  void BeginStep(int64_t step);
  // Writes the trace after the last step; a failure to write is logged, never fatal.
  void EndStep(int64_t step);

 private:
  struct StepRange;
  int64_t first_, last_;
  std::string path_;
  bool cuda_;
  Env* env_;  // makes the trace's directory
  bool on_ = false;
  std::unique_ptr<StepRange> range_;  // the open "ftrain/step N" range
};

}  // namespace ftrain::train
