// A checkpoint root on S3 (s3://BUCKET/PREFIX, keys in s3_layout.h) with the file-system
// store's promises: a step is visible only once its manifest exists, and the manifest is
// written last, conditionally (If-None-Match: *), after every file's upload completed;
// a writer of an older job generation than PREFIX/FENCE is refused; rotation deletes only
// committed, superseded steps (manifest first); prune aborts orphaned multipart uploads.
// Used by the mirror (ckpt.mirror), ckptctl and the restore at a start. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/verify.h"
#include "core/env.h"
#include "core/status.h"
#include "data/source/s3.h"

namespace ftrain::ckpt {

bool IsS3Root(const std::string& root);

struct S3StoreOptions {
  data::UploadOptions upload;
  int get_threads = 8;                // parallel Range GETs of a download
  uint64_t range_bytes = 8ull << 20;  // bytes per Range GET
  data::HttpOptions http;
};

struct S3CheckpointInfo {
  int64_t step = -1;
  bool committed = false;  // its manifest exists
  uint64_t bytes = 0;      // of every object under the step
  int objects = 0;
};

enum class MirrorOutcome { kCommitted, kAlreadyCommitted };

class S3CheckpointStore {
 public:
  // Credentials, region and endpoint from the environment (S3Config::FromEnvironment).
  static StatusOr<std::unique_ptr<S3CheckpointStore>> Open(const std::string& root,
                                                           S3StoreOptions options = {});
  const std::string& root() const { return root_; }

  // The start-up check (FailedPrecondition with what to set): credentials were found, the
  // bucket exists and answers, and the store honours If-None-Match: * (a probe object put
  // twice conditionally must be refused the second time; it is deleted afterwards). Touches
  // no checkpoint.
  Status CheckUsable();
  // The readers' check (list, latest, verify, restore): credentials and the bucket, no probe
  // write, so read-only credentials do.
  Status CheckReadable();

  // Job start: records `generation` in PREFIX/FENCE unless a newer one is there
  // (FailedPrecondition: this job is older than the root's owner).
  Status ClaimFence(const std::string& generation);

  // Uploads the complete file-system checkpoint `dir`, read through `env` (its manifest's files
  // by multipart upload, in parallel parts), then commits it: re-reads FENCE (refused if newer than
  // `generation`) and puts the manifest with If-None-Match: *. A step older than the newest
  // committed one is refused (superseded), as on a file system.
  StatusOr<MirrorOutcome> Upload(const std::string& dir, const std::string& generation, Env* env);

  // Every step with objects, newest first; `committed` says whether its manifest exists.
  StatusOr<std::vector<S3CheckpointInfo>> List();
  StatusOr<std::optional<int64_t>> Latest();  // the newest committed step
  // `text`, when given, receives the manifest's bytes as stored.
  StatusOr<Manifest> ReadManifest(int64_t step, std::string* text = nullptr);

  // Downloads the files of committed step `step` whose rank is in `ranks` (every file when
  // empty) into dir/ (made if missing) by parallel Range GETs, each checked against the
  // manifest's size and XXH3 (Corruption on a mismatch; outages are retried by the client
  // and reported as Unavailable, never as damage), and, `with_manifest`, the manifest last.
  Status Download(int64_t step, const std::vector<int>& ranks, const std::string& dir, Env* env,
                  bool with_manifest = true);

  // Downloads step `step` into a private temp directory and runs the file-system deep
  // verify on it (every dataset's XXH3), then removes the copy.
  StatusOr<VerifyReport> Verify(int64_t step, const std::string& scratch_dir, int threads,
                                Env* env);

  // Keeps the newest `keep_last` (>= 1) committed steps; deletes older committed ones
  // (manifest first, then its objects), the loose objects of steps older than the newest
  // committed one and of other generations' data in committed steps. With `abandoned`
  // (no writer is alive: an operator's prune, a job start), also every uncommitted step's
  // objects and every unfinished multipart upload under the prefix. Returns what it deleted
  // ("s3://..." keys and "upload s3://... ID").
  StatusOr<std::vector<std::string>> Prune(int keep_last, bool abandoned, bool dry_run);

  data::S3Client* client() { return client_.get(); }

 private:
  S3CheckpointStore(std::string root, data::S3Url url, std::unique_ptr<data::S3Client> client,
                    S3StoreOptions options);
  data::S3Url Url(const std::string& key) const { return {url_.bucket, key}; }
  StatusOr<std::string> ReadFence();

  std::string root_;
  data::S3Url url_;  // key: the prefix without a trailing '/'
  std::unique_ptr<data::S3Client> client_;
  S3StoreOptions options_;
};

// The restore at a start, in three phases so that each rank fetches only its own objects:
//  1. (rank 0) PlanRestore: the mirror's newest committed step if it is newer than the newest
//     complete checkpoint in the file-system root `fs_root` (none: scratch purged), else
//     nullopt; clears a stale fs_root/step-N.restore.
//  2. (every rank) RestoreFiles: downloads the files of the ranks r with r % world == rank
//     (parallel Range GETs, each checked against the manifest's XXH3) into
//     fs_root/step-N.restore.
//  3. (rank 0, after every rank's phase 2) FinishRestore: writes the manifest, checks the
//     directory as a complete checkpoint, renames it to step-N (fsync of the root) and
//     updates LATEST, so the ordinary resume finds it.
// RestoreFromMirror runs all three in one process.
StatusOr<std::optional<int64_t>> PlanRestore(const std::string& mirror, const std::string& fs_root,
                                             Env* env);
Status RestoreFiles(const std::string& mirror, const std::string& fs_root, int64_t step, int rank,
                    int world, Env* env);
Status FinishRestore(const std::string& mirror, const std::string& fs_root, int64_t step, Env* env);
StatusOr<std::optional<int64_t>> RestoreFromMirror(const std::string& mirror,
                                                   const std::string& fs_root, Env* env);

}  // namespace ftrain::ckpt
