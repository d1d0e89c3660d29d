// The Kineto profiler around the steps of train.profile_steps.
#include "train/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>
#include <utility>

#include "core/env.h"
#include "core/log.h"
#include "trace/trace_range.h"

namespace ftrain::train {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

struct StepProfiler::StepRange {
  explicit StepRange(int64_t step) : range("ftrain/step " + std::to_string(step)) {}
  TraceRange range;
};

StepProfiler::StepProfiler(int64_t first, int64_t last, std::string path, bool cuda, Env* env)
    : first_(first), last_(last), path_(std::move(path)), cuda_(cuda), env_(env) {}

StepProfiler::~StepProfiler() {
  range_.reset();
  // A run that stops inside the window (a signal) still gets what was recorded.
  if (on_) EndStep(last_);
}

void StepProfiler::BeginStep(int64_t step) {
  if (step == first_ && !on_) {
    std::set<ActivityType> activities = {ActivityType::CPU};
    if (cuda_) activities.insert(ActivityType::CUDA);
    const ProfilerConfig config(ProfilerState::KINETO);
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
    on_ = true;
    FT_LOG(Info) << "profiler: recording steps " << first_ << " to " << last_ << " into " << path_;
  }
  if (on_) range_ = std::make_unique<StepRange>(step);
}

void StepProfiler::EndStep(int64_t step) {
  range_.reset();
  if (!on_ || step < last_) return;
  on_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  const size_t slash = path_.rfind('/');
  Status dir = slash == std::string::npos ? Status::Ok() : CreateDirs(env_, path_.substr(0, slash));
  if (!dir.ok() || result == nullptr) {
    // Not fatal: a profile is a diagnosis, training goes on without it.
    FT_LOG(Error) << "profiler: cannot write " << path_ << ": "
                  << (dir.ok() ? "no result" : dir.message());
    return;
  }
  try {
    result->save(path_);
    FT_LOG(Info) << "profiler: wrote " << path_ << " (steps " << first_ << " to " << last_ << ")";
  } catch (const std::exception& e) {
    FT_LOG(Error) << "profiler: cannot write " << path_ << ": " << e.what();
  }
}

}  // namespace ftrain::train
