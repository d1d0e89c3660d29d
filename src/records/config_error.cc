// Writing RUN_DIR/.config_error (config_error.h).
#include "records/config_error.h"

#include "core/env.h"
#include "core/run_layout.h"

namespace ftrain::records {

Status RecordConfigError(const std::string& run_dir, const std::string& message, Env* env) {
  if (run_dir.empty()) return Status::Ok();
  if (!env->IsDirectory(run_dir)) return Status::Ok();  // nothing started: nothing to tell
  return WriteFileDurably(env, RunLayout(run_dir).config_error(), message + "\n");
}

}  // namespace ftrain::records
