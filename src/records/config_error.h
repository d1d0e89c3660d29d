// RUN_DIR/.config_error (RunLayout::config_error()): the message of a configuration or input
// error that made `ftrain train` exit 2, written durably for slurm/train.sh to fail the job
// with instead of restarting it.
#pragma once

#include <string>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::records {

// Does nothing when `run_dir` is empty or does not exist (nothing started: nothing to tell).
Status RecordConfigError(const std::string& run_dir, const std::string& message, Env* env);

}  // namespace ftrain::records
