// ckpt.root = s3://BUCKET/PREFIX: checkpoints are written as on a file system into a staging
// root (ckpt.staging) whose S3_ROOT file names the S3 root, by the same writers (ckptd from
// its shared-memory snapshot, or the synchronous path), so the training stall is unchanged.
// The writer that wins the file-system commit then uploads the step and commits it on S3
// (S3CheckpointStore::Upload: multipart, manifest last with If-None-Match: *, fenced by the
// manifest's generation); only then does the step count as committed (S3_LATEST). No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "data/source/s3.h"

namespace ftrain::ckpt {

// The S3 root `fs_root` stages for ("" when it is an ordinary checkpoint root).
StatusOr<std::string> StagedS3Root(const std::string& fs_root, Env* env);
// How CommitStaged uploads from `fs_root`: the part size, parts in flight and bandwidth cap
// recorded by MarkStagingRoot (the defaults when S3_ROOT names only the root).
StatusOr<data::UploadOptions> StagedS3Upload(const std::string& fs_root, Env* env);
// Marks `fs_root` as the staging root of `s3_root` and records `upload` (ckpt.s3_part_mb,
// ckpt.s3_threads, ckpt.s3_max_mb_s) for every writer: the trainer's rank 0, before step 1.
Status MarkStagingRoot(const std::string& fs_root, const std::string& s3_root,
                       const data::UploadOptions& upload, Env* env);
// The newest step committed on S3 from this staging root (S3_LATEST; -1: none yet).
int64_t StagedS3Latest(const std::string& fs_root, Env* env);

// Uploads the complete checkpoint fs_root/step-N to the staging root's S3 root and commits it
// there (a step S3 already holds counts as done), records it in S3_LATEST, then rotates S3:
// the newest `keep` committed steps stay, superseded ones and their loose objects go.
// A rotation failure is logged, not returned: the step is committed.
Status CommitStaged(const std::string& fs_root, int64_t step, int keep, Env* env);

// An error of CommitStaged that may pass (the store unreachable, 5xx or throttling after the
// client's own retries, a timeout); anything else (fenced, superseded, damage, a staged file
// missing) is final.
bool IsS3Outage(const Status& s);
// Waits `ms` milliseconds between two tries; false: give up now (a deadline, a stop).
using RetryWait = std::function<bool(std::chrono::milliseconds)>;
// CommitStaged until it succeeds, S3 holds this step or a newer one from this staging root
// (S3_LATEST >= step: committed by another writer, or superseded), the error is not an
// outage, or `wait` gives up; waits 0.5 s, doubling to 30 s, between tries. Returns the last
// error when it gave up.
Status CommitStagedRetrying(const std::string& fs_root, int64_t step, int keep,
                            const RetryWait& wait, Env* env);

// The start of a run with an S3 root (rank 0, no writer of this job alive): removes from the
// staging root every step S3 has not committed with the same manifest (a killed upload's step
// must not be resumed), then aborts the multipart uploads and deletes the objects of
// uncommitted steps on S3 (Prune with `abandoned`). Returns S3's newest committed step.
StatusOr<std::optional<int64_t>> ReconcileStaging(const std::string& fs_root,
                                                  const std::string& s3_root, int keep, Env* env);

// A committed step a resume found damaged (an object's XXH3 differs from its manifest's):
// its manifest is copied to PREFIX/CORRUPT-step-N.json and deleted, so no later resume
// chooses it and the step can be committed again; its objects go with the next rotation.
Status SetAsideDamaged(const std::string& s3_root, int64_t step);

}  // namespace ftrain::ckpt
