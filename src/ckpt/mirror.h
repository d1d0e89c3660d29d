// The mirror: a background thread (rank 0 of the trainer) that copies the newest committed
// file-system checkpoint to an S3 root (s3_store.h) every `every_s` seconds, commits it there
// (manifest last, conditional, fenced by the job generation) and rotates the mirror. It reads
// under a ReadLease, so file-system rotation never deletes what it is copying, and it never
// blocks the training loop: failures are logged and retried at the next interval.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ckpt/s3_store.h"
#include "core/status.h"

namespace ftrain::ckpt {

struct MirrorOptions {
  std::string url;  // s3://BUCKET/PREFIX
  int keep = 3;
  double every_s = 300;
  S3StoreOptions store;
  Env* env = nullptr;  // the local side (the file-system root); required, set by the caller
};

class CheckpointMirror {
 public:
  // The start-up checks (credentials, bucket, If-None-Match; FailedPrecondition with what to
  // set) and the fence claim for `generation`, before step 1. Starts no thread.
  static StatusOr<std::unique_ptr<CheckpointMirror>> Open(const MirrorOptions& options,
                                                          const std::string& fs_root,
                                                          const std::string& generation);
  ~CheckpointMirror();  // stops without a final pass

  void Start();
  // Stops the thread; with `final_pass`, first copies the newest checkpoint if the mirror
  // lacks it (the end of a run), and returns that pass's status.
  Status Stop(bool final_pass);
  // One pass now, on the calling thread: upload the newest complete checkpoint if newer than
  // the newest the mirror holds, then rotate. Returns the step copied (-1 if none).
  StatusOr<int64_t> SyncOnce();

 private:
  CheckpointMirror(MirrorOptions options, std::string fs_root, std::string generation,
                   std::unique_ptr<S3CheckpointStore> store);
  void Loop();

  MirrorOptions options_;
  std::string fs_root_;
  std::string generation_;
  std::unique_ptr<S3CheckpointStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;           // guarded by mu_
  std::mutex sync_mu_;          // one pass at a time (the thread's and Stop's final one)
  int64_t mirrored_step_ = -1;  // guarded by sync_mu_
  std::thread thread_;
};

}  // namespace ftrain::ckpt
