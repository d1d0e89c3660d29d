// The resume's rules for a failed load (resume_verdict.h).
#include "train/verdicts/resume_verdict.h"

#include <algorithm>
#include <cstdio>

namespace ftrain::train {

LoadOutcome ClassifyLoad(const Status& load, bool rereads) {
  if (load.ok()) return LoadOutcome::kLoaded;
  switch (load.code()) {
    case Status::Code::kCorruption:
      return rereads ? LoadOutcome::kDamaged : LoadOutcome::kUnreadable;
    case Status::Code::kIOError:
    case Status::Code::kNotFound:
    case Status::Code::kStorageUnavailable:
      return LoadOutcome::kUnreadable;
    default:
      return LoadOutcome::kRefused;
  }
}

ResumeStep DecideResume(bool any_damaged, bool any_unreadable, bool any_refused, bool expired,
                        bool explicit_path) {
  if (any_refused) return ResumeStep::kFail;
  if (any_unreadable) return expired ? ResumeStep::kGiveUp : ResumeStep::kRetry;
  if (any_damaged) return explicit_path ? ResumeStep::kFail : ResumeStep::kFallBack;
  return ResumeStep::kResume;
}

double RetryWaitSeconds(int tries, double left_s) {
  double wait = 1;
  for (int i = 1; i < tries && wait < 15; ++i) wait *= 2;
  return std::max(0.0, std::min({wait, 15.0, left_s}));
}

std::string GiveUpMessage(const std::string& what, double waited_s, double retry_s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), " for %.0f s (ckpt.resume_retry_s = %.0f)", waited_s, retry_s);
  return "the checkpoint storage could not be read" + std::string(buf) + ": " + what +
         "; nothing was moved aside. This start exits 74 and `ftrain job` retries it as a "
         "storage outage; once the file system answers, the run resumes from its newest "
         "checkpoint. If that checkpoint is truly gone, move it aside yourself (`ckptctl list`) "
         "or set train.resume to an older one";
}

}  // namespace ftrain::train
