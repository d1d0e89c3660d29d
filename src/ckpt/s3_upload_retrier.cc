// StagedUploadRetrier: the retry thread (s3_upload_retrier.h).
#include "ckpt/s3_upload_retrier.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ckpt/s3_staging.h"
#include "core/log.h"

namespace ftrain::ckpt {

StagedUploadRetrier::StagedUploadRetrier(std::string fs_root, int keep, Env* env)
    : fs_root_(std::move(fs_root)), keep_(keep), env_(env), thread_([this] { Loop(); }) {}

StagedUploadRetrier::~StagedUploadRetrier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StagedUploadRetrier::Add(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.insert(step);
  }
  cv_.notify_all();
}

size_t StagedUploadRetrier::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

void StagedUploadRetrier::Loop() {
  // Below the training threads, as ckptd's persist thread (its upload threads inherit it).
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10) != 0) {
    FT_LOG(Warning) << "s3 checkpoints: could not lower the retry thread's priority (nice 10)";
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
    if (stop_) return;
    const int64_t step = *pending_.rbegin();  // the newest: it supersedes the others
    lock.unlock();
    // Between tries: stop, or move on to a newer step that failed meanwhile.
    auto wait = [this, step](std::chrono::milliseconds ms) {
      std::unique_lock<std::mutex> l(mu_);
      return !cv_.wait_for(l, ms, [&] { return stop_ || *pending_.rbegin() > step; });
    };
    Status s = CommitStagedRetrying(fs_root_, step, keep_, wait, env_);
    lock.lock();
    if (s.ok()) {
      FT_LOG(Info) << "s3 checkpoints: step " << step << " is committed on S3 (or superseded)";
    } else if (!stop_ && *pending_.rbegin() == step) {
      FT_LOG(Warning) << "s3 checkpoints: no more tries for step " << step << ": " << s.ToString();
    }
    // This step and older ones are done: committed, superseded, or left to a newer step.
    pending_.erase(pending_.begin(), pending_.upper_bound(step));
  }
}

}  // namespace ftrain::ckpt
