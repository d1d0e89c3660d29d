// The staging root of ckpt.root = s3://...: its marker files, the commit on S3 after the
// file-system commit, and the reconciliation at a start (s3_staging.h).
#include "ckpt/s3_staging.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <vector>

#include "ckpt/filename.h"
#include "ckpt/manifest.h"
#include "ckpt/s3_layout.h"
#include "ckpt/s3_store.h"
#include "ckpt/store.h"
#include "core/log.h"

namespace ftrain::ckpt {
namespace {

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Rewrites LATEST after steps were removed: the newest complete one left, or none.
Status FixLatestHint(const std::string& fs_root, Env* env) {
  CheckpointStore fs(fs_root, env);
  FT_ASSIGN_OR_RETURN(std::optional<CheckpointInfo> newest, fs.Latest());
  const std::string latest = JoinPath(fs_root, kLatestName);
  if (newest) return WriteFileDurably(env, latest, StepDirName(newest->step) + "\n");
  if (!env->FileExists(latest)) return Status::Ok();
  FT_RETURN_IF_ERROR(env->RemoveFile(latest));
  return env->SyncDir(fs_root);
}

// S3_ROOT's lines: the root, then "key=value" upload settings (none before they existed).
StatusOr<std::vector<std::string>> ReadS3RootLines(const std::string& fs_root, Env* env) {
  const std::string path = JoinPath(fs_root, kS3RootName);
  if (!env->FileExists(path)) return std::vector<std::string>();
  std::string text;
  FT_RETURN_IF_ERROR(env->ReadFile(path, &text));
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = Trimmed(text.substr(at, nl - at));
    if (!line.empty()) lines.push_back(std::move(line));
    at = nl + 1;
  }
  if (lines.empty() || !IsS3Root(lines[0])) {
    return Status::Corruption(path + ": '" + Trimmed(text) + "' does not start with s3://B/P");
  }
  return lines;
}

}  // namespace

StatusOr<std::string> StagedS3Root(const std::string& fs_root, Env* env) {
  FT_ASSIGN_OR_RETURN(auto lines, ReadS3RootLines(fs_root, env));
  return lines.empty() ? std::string() : lines[0];
}

StatusOr<data::UploadOptions> StagedS3Upload(const std::string& fs_root, Env* env) {
  FT_ASSIGN_OR_RETURN(auto lines, ReadS3RootLines(fs_root, env));
  data::UploadOptions u;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t eq = lines[i].find('=');
    const std::string key = lines[i].substr(0, eq);
    char* end = nullptr;
    const std::string value = eq == std::string::npos ? "" : lines[i].substr(eq + 1);
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 0) {
      return Status::Corruption(JoinPath(fs_root, kS3RootName) + ": bad line '" + lines[i] + "'");
    }
    if (key == "part_bytes") u.part_bytes = static_cast<uint64_t>(v);
    if (key == "threads") u.threads = static_cast<int>(v);
    if (key == "max_bytes_per_s") u.max_bytes_per_s = v;
    // Another key: a newer writer's setting this build does not know; its default stands.
  }
  if (u.part_bytes < (5ull << 20) || u.threads < 1) {
    return Status::Corruption(JoinPath(fs_root, kS3RootName) +
                              ": part_bytes under 5 MiB or threads under 1");
  }
  return u;
}

Status MarkStagingRoot(const std::string& fs_root, const std::string& s3_root,
                       const data::UploadOptions& upload, Env* env) {
  FT_RETURN_IF_ERROR(CreateDirs(env, fs_root));
  const std::string text = s3_root + "\npart_bytes=" + std::to_string(upload.part_bytes) +
                           "\nthreads=" + std::to_string(upload.threads) +
                           "\nmax_bytes_per_s=" + std::to_string(upload.max_bytes_per_s) + "\n";
  return WriteFileDurably(env, JoinPath(fs_root, kS3RootName), text);
}

int64_t StagedS3Latest(const std::string& fs_root, Env* env) {
  std::string text;
  if (!env->ReadFile(JoinPath(fs_root, kS3LatestName), &text).ok()) return -1;  // none yet
  const RootEntry e = ParseRootEntry(Trimmed(text));
  return e.kind == EntryKind::kComplete ? e.step : -1;
}

Status CommitStaged(const std::string& fs_root, int64_t step, int keep, Env* env) {
  FT_ASSIGN_OR_RETURN(std::string url, StagedS3Root(fs_root, env));
  if (url.empty()) {
    return Status::FailedPrecondition(fs_root + " is not a staging root (no " +
                                      std::string(kS3RootName) + ")");
  }
  const std::string dir = JoinPath(fs_root, StepDirName(step));
  std::string text;
  FT_RETURN_IF_ERROR(env->ReadFile(JoinPath(dir, kManifestName), &text));
  FT_ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(text, JoinPath(dir, kManifestName)));
  S3StoreOptions options;
  FT_ASSIGN_OR_RETURN(options.upload, StagedS3Upload(fs_root, env));
  FT_ASSIGN_OR_RETURN(auto s3, S3CheckpointStore::Open(url, options));
  // Fenced by the generation that wrote the step: a late writer of an older start is refused.
  auto out = s3->Upload(dir, m.meta.generation, env);
  if (!out.ok())
    return out.status().Annotate("committing step " + std::to_string(step) + " to " + url);
  if (step > StagedS3Latest(fs_root, env)) {
    FT_RETURN_IF_ERROR(
        WriteFileDurably(env, JoinPath(fs_root, kS3LatestName), StepDirName(step) + "\n"));
  }
  auto deleted = s3->Prune(keep, /*abandoned=*/false, /*dry_run=*/false);
  // Rotation keeps going at the next commit; this step is committed either way.
  if (!deleted.ok()) FT_LOG(Warning) << "s3 rotation: " << deleted.status().ToString();
  return Status::Ok();
}

bool IsS3Outage(const Status& s) {
  return s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kDeadlineExceeded ||
         s.code() == Status::Code::kStorageUnavailable;
}

Status CommitStagedRetrying(const std::string& fs_root, int64_t step, int keep,
                            const RetryWait& wait, Env* env) {
  for (int attempt = 0;; ++attempt) {
    if (StagedS3Latest(fs_root, env) >= step) return Status::Ok();
    Status s = CommitStaged(fs_root, step, keep, env);
    if (s.ok()) {
      if (attempt > 0)
        FT_LOG(Info) << "s3 checkpoints: step " << step << " committed on try " << attempt + 1;
      return s;
    }
    if (!IsS3Outage(s)) return s;
    const auto ms = std::chrono::milliseconds(std::min(30000, 500 << std::min(attempt, 6)));
    FT_LOG(Warning) << "s3 checkpoints: step " << step
                    << " is staged, not committed: " << s.ToString() << "; trying again in "
                    << ms.count() << " ms";
    if (!wait(ms)) return s;
  }
}

StatusOr<std::optional<int64_t>> ReconcileStaging(const std::string& fs_root,
                                                  const std::string& s3_root, int keep, Env* env) {
  FT_ASSIGN_OR_RETURN(auto s3, S3CheckpointStore::Open(s3_root));
  FT_ASSIGN_OR_RETURN(auto remote, s3->List());
  std::set<int64_t> committed;
  for (const auto& i : remote) {
    if (i.committed) committed.insert(i.step);
  }
  CheckpointStore fs(fs_root, env);
  FT_ASSIGN_OR_RETURN(auto local, fs.List());
  bool removed = false;
  for (const auto& i : local) {
    if (i.status != CheckpointStatus::kComplete) continue;
    std::string mine, theirs;
    bool same = committed.count(i.step) > 0;
    if (same) {
      FT_RETURN_IF_ERROR(env->ReadFile(JoinPath(i.path, kManifestName), &mine));
      FT_RETURN_IF_ERROR(s3->ReadManifest(i.step, &theirs).status());
      same = mine == theirs;
    }
    if (same) continue;
    FT_LOG(Warning) << "checkpoint: " << i.path << " is not committed in " << s3_root
                    << " (an upload that never finished); removing the staged copy";
    FT_RETURN_IF_ERROR(env->RemoveDirRecursive(i.path));
    removed = true;
  }
  if (removed) FT_RETURN_IF_ERROR(FixLatestHint(fs_root, env));
  const std::string s3_latest = JoinPath(fs_root, kS3LatestName);
  if (!committed.empty()) {
    FT_RETURN_IF_ERROR(WriteFileDurably(env, s3_latest, StepDirName(*committed.rbegin()) + "\n"));
  } else if (env->FileExists(s3_latest)) {
    FT_RETURN_IF_ERROR(env->RemoveFile(s3_latest));
  }
  // No writer of this job is alive yet and older jobs are fenced: what is uncommitted on S3
  // is abandoned (its multipart uploads would be billed for ever).
  FT_ASSIGN_OR_RETURN(auto deleted, s3->Prune(keep, /*abandoned=*/true, /*dry_run=*/false));
  for (const auto& d : deleted) FT_LOG(Info) << "s3 checkpoints: cleaned up " << d;
  if (committed.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(*committed.rbegin());
}

Status SetAsideDamaged(const std::string& s3_root, int64_t step) {
  FT_ASSIGN_OR_RETURN(auto s3, S3CheckpointStore::Open(s3_root));
  FT_ASSIGN_OR_RETURN(data::S3Url root, data::S3Url::Parse(s3->root()));
  std::string text;
  FT_RETURN_IF_ERROR(s3->ReadManifest(step, &text).status());
  FT_ASSIGN_OR_RETURN(bool put,
                      s3->client()->Put({root.bucket, S3CorruptKey(root.key, step)}, text));
  (void)put;  // unconditional: always true
  return s3->client()->Delete({root.bucket, S3ManifestKey(root.key, step)});
}

}  // namespace ftrain::ckpt
