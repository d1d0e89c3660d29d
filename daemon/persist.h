// ckptd's persist pipeline: a queue of submitted snapshots and one worker thread (at the
// configured nice level) that turns each slot into the rank's shard file through the ckpt
// library (parallel zstd, HDF5 direct chunk writes, fsync, receipt), then tries the cross-node
// commit (TryCommit: exactly one daemon wins the O_EXCL marker once every rank's receipt is
// there) and rotates. It never touches sockets; results go back through a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/s3_upload_retrier.h"
#include "ckpt/store.h"
#include "daemon/work_queue.h"

namespace ftrain::ckptd {

struct PersistJob {
  int rank = 0;
  uint32_t slot = 0;
  const uint8_t* base = nullptr;  // the slot's mapping; stays valid until the result is back
  ckpt::proto::Submit submit;
};

struct PersistResult {
  int rank = 0;
  uint32_t slot = 0;
  int64_t step = 0;
  Status status;
  bool committed = false;       // this daemon won the commit
  bool seen_committed = false;  // the step is committed (by anyone) as far as we know
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  double persist_s = 0;
  std::vector<ckpt::DatasetRecord> datasets;  // what was written, with each piece's XXH3
  bool memory_only = false;                   // memory tier: hashed, not written
  uint64_t digest = 0;                        // memory tier: proto::SnapshotDigest
};

struct PersistOptions {
  int threads = 1;  // compression threads per shard
  int nice = 10;    // of the worker (and so of its compression threads)
  int zstd_level = 1;
  int keep = 3;
  double max_mb_per_s = 0;  // pace each shard write (0 = unlimited)
  int64_t keep_every = 0;   // rotation also keeps steps divisible by this (milestones)
};

class Persister {
 public:
  Persister(ckpt::CheckpointStore* store, PersistOptions options,
            std::function<void(PersistResult)> on_done);
  // The queue drains, then the worker joins (queue_'s destructor, before the members it uses).

  void Enqueue(PersistJob job) {
    if (job.submit.memory_only) {
      memory_queue_.Enqueue(std::move(job));
    } else {
      queue_.Enqueue(std::move(job));
    }
  }
  // Waiting, not yet started.
  size_t queued() const { return queue_.queued() + memory_queue_.queued(); }
  // A job is being written (or hashed).
  bool busy() const { return queue_.busy() || memory_queue_.busy(); }

 private:
  PersistResult Persist(const PersistJob& job);
  static PersistResult HashOnly(const PersistJob& job);

  ckpt::CheckpointStore* store_;
  PersistOptions options_;
  // ckpt.root = s3://...: uploads that met an outage, retried until S3 holds them or a newer
  // step (destroyed after queue_: the worker adds to it).
  ckpt::StagedUploadRetrier retrier_;
  WorkQueue<PersistJob, PersistResult> queue_;  // after the members its worker uses
  WorkQueue<PersistJob, PersistResult> memory_queue_;
};

}  // namespace ftrain::ckptd
