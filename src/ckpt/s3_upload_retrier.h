// ckpt.root = s3://...: a background thread that keeps uploading staged steps whose commit
// on S3 failed with an outage (CommitStagedRetrying, s3_staging.h), newest first, until S3
// holds them or a newer step is committed there, so that an outage while training goes on
// costs no checkpoint. Used by ckptd's persist worker; the trainer's durable saves wait on
// S3_LATEST as before. No LibTorch, no sockets.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/env.h"

namespace ftrain::ckpt {

class StagedUploadRetrier {
 public:
  StagedUploadRetrier(std::string fs_root, int keep, Env* env);
  // Stops the thread; a try in flight finishes first. Steps still pending stay staged and
  // uncommitted: the next start's reconciliation drops them (s3_staging.h).
  ~StagedUploadRetrier();
  StagedUploadRetrier(const StagedUploadRetrier&) = delete;
  StagedUploadRetrier& operator=(const StagedUploadRetrier&) = delete;

  // Step `step` is committed in the staging root but its upload failed with an outage.
  void Add(int64_t step);
  // Steps not yet committed on S3 nor superseded (the one being tried included).
  size_t pending() const;

 private:
  void Loop();

  const std::string fs_root_;
  const int keep_;
  Env* const env_;  // the staging root's files
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<int64_t> pending_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::thread thread_;         // last: started once the fields above exist
};

}  // namespace ftrain::ckpt
