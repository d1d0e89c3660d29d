// What `ftrain plan` reads from disk, turned into plain values for the planner (plan/planner.h):
// a packed dataset's index (--data: rows, seq_len, token width, text bytes; no token is read)
// and a training run's records (--calibrate: metrics.jsonl, config.resolved.cfg, and the GPU
// count of its newest complete checkpoint). No LibTorch; the arithmetic stays in plan*.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "plan/planner.h"

namespace ftrain {

// `spec` is a packed directory or an http(s) URL, as for `ftrain data inspect`.
StatusOr<DataFacts> ReadDataFacts(const std::string& spec, Env* env);

// `gpus`: the run's GPU count when the caller knows it (--calibrate-gpus); otherwise it is read
// from the newest complete checkpoint, and left 0 when there is none.
StatusOr<CalibrationRun> ReadCalibrationRun(const std::string& run_dir, std::optional<int64_t> gpus,
                                            Env* env);

}  // namespace ftrain
