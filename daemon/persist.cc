// The persist worker.
#include "daemon/persist.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "core/log.h"

namespace ftrain::ckptd {

Persister::Persister(ckpt::CheckpointStore* store, PersistOptions options,
                     std::function<void(PersistResult)> on_done)
    : store_(store), options_(options), on_done_(std::move(on_done)) {
  worker_ = std::thread([this] { Run(); });
}

Persister::~Persister() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Persister::Enqueue(PersistJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

size_t Persister::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

bool Persister::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void Persister::Run() {
  // Linux nice values are per thread and inherited by threads created later (the
  // compression threads of WriteShardFile).
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), options_.nice) != 0) {
    FT_LOG(Warning) << "ckptd: could not set nice " << options_.nice << " on the persist thread";
  }
  for (;;) {
    PersistJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Drains the queue before stopping: a submitted snapshot is the daemon's promise.
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    PersistResult r = Persist(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    on_done_(std::move(r));
  }
}

PersistResult Persister::Persist(const PersistJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  PersistResult r;
  r.rank = job.rank;
  r.slot = job.slot;
  r.step = job.submit.step;
  const ckpt::ShardContents contents = ckpt::proto::ContentsOf(job.submit, job.base);
  ckpt::WriteOptions wo;
  wo.zstd_level = options_.zstd_level;
  wo.threads = options_.threads;
  wo.max_mb_per_s = options_.max_mb_per_s;
  auto receipt = store_->WriteShard(job.submit.meta, job.rank, contents, wo);
  if (!receipt.ok()) {
    r.status = receipt.status().Annotate("writing the shard of rank " + std::to_string(job.rank) +
                                         " for step " + std::to_string(r.step));
  } else {
    r.raw_bytes = receipt->info.raw_bytes;
    r.stored_bytes = receipt->info.stored_bytes;
    r.datasets = receipt->info.datasets;
    auto outcome = store_->TryCommit(job.submit.meta);
    if (!outcome.ok()) {
      r.status = outcome.status().Annotate("committing step " + std::to_string(r.step));
    } else if (*outcome == ckpt::CommitOutcome::kCommitted) {
      r.committed = r.seen_committed = true;
      ckpt::RotationPolicy policy;
      policy.keep_last = options_.keep;
      policy.keep_every = options_.keep_every;
      policy.verify_threads = options_.threads;  // the read-back runs at the worker's nice
      // Rotation failures are logged by Rotate and retried after the next commit.
      auto deleted = store_->Rotate(policy);
      if (!deleted.ok()) FT_LOG(Warning) << "ckptd: rotation: " << deleted.status().ToString();
    } else if (*outcome == ckpt::CommitOutcome::kAlreadyCommitted) {
      r.seen_committed = true;
    }
  }
  r.persist_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ftrain::ckptd
