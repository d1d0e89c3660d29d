// The persist worker.
#include "daemon/persist.h"

#include <chrono>

#include "ckpt/s3_staging.h"
#include "core/log.h"

namespace ftrain::ckptd {

Persister::Persister(ckpt::CheckpointStore* store, PersistOptions options,
                     std::function<void(PersistResult)> on_done)
    : store_(store),
      options_(options),
      retrier_(store->root(), options.keep, store->env()),
      // Two workers, one callback (thread-safe: the server's takes a lock); declaration
      // order copies it first, then moves it.
      queue_([this](const PersistJob& job) { return Persist(job); }, on_done, options.nice,
             "persist thread"),
      memory_queue_([](const PersistJob& job) { return HashOnly(job); }, std::move(on_done),
                    options.nice, "memory-tier thread") {}

// A memory-tier snapshot: each piece's XXH3 (what a shard file would record, and what the
// buddy checks), nothing written.
PersistResult Persister::HashOnly(const PersistJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  PersistResult r;
  r.rank = job.rank;
  r.slot = job.slot;
  r.step = job.submit.step;
  r.memory_only = true;
  const std::vector<uint64_t> hashes = ckpt::proto::PieceHashes(job.submit, job.base);
  for (size_t i = 0; i < hashes.size(); ++i) {
    const auto& p = job.submit.pieces[i];
    ckpt::DatasetRecord d;
    d.is_blob = p.is_blob;
    d.kind = p.kind;
    d.name = p.name;
    d.offset = p.offset;
    d.length = p.length;
    d.xxh3 = hashes[i];
    r.raw_bytes += static_cast<uint64_t>(p.length) * (p.is_blob ? 1 : ckpt::DTypeSize(p.dtype));
    r.datasets.push_back(std::move(d));
  }
  r.digest = ckpt::proto::SnapshotDigest(hashes);
  r.persist_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
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
      // ckpt.root = s3://...: committed only once S3 holds it (ckpt/s3_staging.h).
      if (auto s3 = ckpt::StagedS3Root(store_->root(), store_->env()); !s3.ok() || !s3->empty()) {
        Status up = s3.ok()
                        ? ckpt::CommitStaged(store_->root(), r.step, options_.keep, store_->env())
                        : s3.status();
        if (!up.ok()) {
          // An outage: tried again in the background while training goes on.
          const bool retried = ckpt::IsS3Outage(up);
          if (retried) retrier_.Add(r.step);
          r.status = up.Annotate("step " + std::to_string(r.step) + " is staged, not committed" +
                                 (retried ? " (the upload is retried)" : ""));
          r.committed = r.seen_committed = false;
        }
      }
      ckpt::RotationPolicy policy;
      policy.keep_last = options_.keep;
      policy.keep_every = options_.keep_every;
      policy.verify_threads = options_.threads;  // the read-back runs at the worker's nice
      // Rotation failures are logged by Rotate and retried after the next commit.
      auto deleted = store_->Rotate(policy);
      if (!deleted.ok()) FT_LOG(Warning) << "ckptd: rotation: " << deleted.status().ToString();
    } else if (*outcome == ckpt::CommitOutcome::kAlreadyCommitted) {
      // On a staging root the winner may still be uploading: S3_LATEST says when it is done.
      auto s3 = ckpt::StagedS3Root(store_->root(), store_->env());
      r.seen_committed =
          s3.ok() && (s3->empty() || ckpt::StagedS3Latest(store_->root(), store_->env()) >= r.step);
    }
  }
  r.persist_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ftrain::ckptd
