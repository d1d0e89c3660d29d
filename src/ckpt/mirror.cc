// CheckpointMirror: the interval thread and one pass (mirror.h).
#include "ckpt/mirror.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "ckpt/store.h"
#include "core/log.h"

namespace ftrain::ckpt {

CheckpointMirror::CheckpointMirror(MirrorOptions options, std::string fs_root,
                                   std::string generation, std::unique_ptr<S3CheckpointStore> store)
    : options_(std::move(options)),
      fs_root_(std::move(fs_root)),
      generation_(std::move(generation)),
      store_(std::move(store)) {}

StatusOr<std::unique_ptr<CheckpointMirror>> CheckpointMirror::Open(const MirrorOptions& options,
                                                                   const std::string& fs_root,
                                                                   const std::string& generation) {
  if (options.env == nullptr) return Status::InvalidArgument("MirrorOptions.env is not set");
  auto store = S3CheckpointStore::Open(options.url, options.store);
  if (!store.ok()) {
    return Status::InvalidArgument("ckpt.mirror = " + options.url + ": " +
                                   store.status().message());
  }
  Status s = (*store)->CheckUsable();
  if (s.ok()) s = (*store)->ClaimFence(generation);
  if (!s.ok()) return Status::FailedPrecondition("ckpt.mirror: " + s.message());
  return std::unique_ptr<CheckpointMirror>(
      new CheckpointMirror(options, fs_root, generation, std::move(*store)));
}

CheckpointMirror::~CheckpointMirror() {
  Status s = Stop(/*final_pass=*/false);
  (void)s;  // without a final pass Stop only joins
}

void CheckpointMirror::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

Status CheckpointMirror::Stop(bool final_pass) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!final_pass) return Status::Ok();
  return SyncOnce().status();
}

void CheckpointMirror::Loop() {
  // Below the training threads, as ckptd's persist thread (its upload threads inherit it).
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10) != 0) {
    FT_LOG(Warning) << "ckpt.mirror: could not lower the mirror thread's priority (nice 10)";
  }
  const auto every =
      std::chrono::milliseconds(static_cast<int64_t>(std::max(0.2, options_.every_s) * 1000));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, every, [this] { return stop_; })) return;
    }
    auto r = SyncOnce();
    if (!r.ok()) {
      FT_LOG(Warning) << "ckpt.mirror: " << r.status().ToString() << " (retried in "
                      << options_.every_s << " s; training goes on)";
    }
  }
}

StatusOr<int64_t> CheckpointMirror::SyncOnce() {
  std::lock_guard<std::mutex> lock(sync_mu_);
  CheckpointStore fs(fs_root_, options_.env);
  FT_ASSIGN_OR_RETURN(std::optional<CheckpointInfo> newest, fs.Latest());
  if (!newest || newest->step <= mirrored_step_) return int64_t{-1};
  // Rotation on the file system skips a checkpoint a reader holds.
  auto lease = ReadLease::Acquire(newest->path);
  if (!lease.ok()) return lease.status();
  const auto t0 = std::chrono::steady_clock::now();
  FT_ASSIGN_OR_RETURN(MirrorOutcome out, store_->Upload(newest->path, generation_, options_.env));
  mirrored_step_ = newest->step;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  FT_LOG(Info) << "ckpt.mirror: step " << newest->step
               << (out == MirrorOutcome::kCommitted ? " committed to " : " already in ")
               << store_->root() << " in " << s << " s";
  auto deleted = store_->Prune(options_.keep, /*abandoned=*/false, /*dry_run=*/false);
  if (!deleted.ok()) {
    FT_LOG(Warning) << "ckpt.mirror: rotation: " << deleted.status().ToString();
  }
  return newest->step;
}

}  // namespace ftrain::ckpt
