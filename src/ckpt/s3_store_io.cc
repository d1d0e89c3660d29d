// S3CheckpointStore's bulk work: download (parallel Range GETs, every file checked against
// the manifest), verify (download, then the file-system deep verify), prune (rotation,
// loose objects, orphaned multipart uploads) and the restore into a file-system root.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "ckpt/filename.h"
#include "ckpt/s3_layout.h"
#include "ckpt/s3_store.h"
#include "ckpt/shard_file.h"
#include "ckpt/store.h"
#include "core/log.h"
#include "core/thread_pool.h"

namespace ftrain::ckpt {

Status S3CheckpointStore::Download(int64_t step, const std::vector<int>& ranks,
                                   const std::string& dir, Env* env, bool with_manifest) {
  std::string text;
  const data::S3Url mu = Url(S3ManifestKey(url_.key, step));
  FT_RETURN_IF_ERROR(client_->Get(mu, &text));
  FT_ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(text, mu.ToString()));
  if (m.meta.step != step) {
    return Status::Corruption(mu.ToString() + ": records step " + std::to_string(m.meta.step));
  }
  FT_RETURN_IF_ERROR(CreateDirs(env, dir));
  for (const ManifestFile& f : m.files) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), f.rank) == ranks.end()) continue;
    if (!IsSafeRelativeName(f.path)) {
      return Status::Corruption(mu.ToString() + ": unsafe file name '" + f.path + "'");
    }
    const data::S3Url obj = Url(S3FileKey(url_.key, step, m.meta.generation, f.path));
    std::string buf(f.size, '\0');
    const uint64_t rb = std::max<uint64_t>(1, options_.range_bytes);
    const size_t pieces = static_cast<size_t>((f.size + rb - 1) / rb);
    FT_RETURN_IF_ERROR(ParallelFor(pieces, options_.get_threads, [&](size_t i) {
      const uint64_t off = i * rb;
      return client_->GetRange(obj, off, std::min<uint64_t>(rb, f.size - off),
                               reinterpret_cast<uint8_t*>(&buf[off]));
    }));
    if (Xxh3(buf.data(), buf.size()) != f.xxh3) {
      return Status::Corruption(obj.ToString() + ": XXH3 differs from the one " + mu.ToString() +
                                " records (the object is damaged)");
    }
    const std::string tmp = JoinPath(dir, f.path + ".tmp");
    FT_ASSIGN_OR_RETURN(auto out, env->NewWritableFile(tmp));
    FT_RETURN_IF_ERROR(out->Append(buf.data(), buf.size()));
    FT_RETURN_IF_ERROR(out->Sync());
    FT_RETURN_IF_ERROR(out->Close());
    FT_RETURN_IF_ERROR(env->Rename(tmp, JoinPath(dir, f.path)));
  }
  if (with_manifest) {
    FT_RETURN_IF_ERROR(WriteFileDurably(env, JoinPath(dir, kManifestName), text));
  }
  return env->SyncDir(dir);
}

StatusOr<VerifyReport> S3CheckpointStore::Verify(int64_t step, const std::string& scratch_dir,
                                                 int threads, Env* env) {
  const std::string tmp = JoinPath(scratch_dir, "ckpt-s3-verify." + std::to_string(::getpid()));
  const std::string dir = JoinPath(tmp, StepDirName(step));
  Status s = Download(step, {}, dir, env);
  VerifyReport report;
  if (s.ok()) {
    report = VerifyCheckpoint(dir, threads, env);
    report.dir = root_ + "/" + StepDirName(step);
  } else if (s.IsCorruption() || s.IsNotFound()) {
    report.dir = root_ + "/" + StepDirName(step);
    report.step = step;
    report.problems.push_back({"", "", s.message()});
  }
  Status r = env->RemoveDirRecursive(tmp);
  if (!r.ok()) FT_LOG(Warning) << "s3 verify: could not remove " << tmp << ": " << r.ToString();
  if (!s.ok() && !s.IsCorruption() && !s.IsNotFound()) return s;  // an outage, not damage
  return report;
}

StatusOr<std::vector<std::string>> S3CheckpointStore::Prune(int keep_last, bool abandoned,
                                                            bool dry_run) {
  FT_ASSIGN_OR_RETURN(auto objects, client_->List(Url(S3Key(url_.key, ""))));
  std::map<int64_t, std::vector<std::string>, std::greater<int64_t>> keys;  // step -> keys
  std::set<int64_t> committed;
  for (const auto& o : objects) {
    const S3KeyInfo k = ParseS3Key(url_.key, o.key);
    if (k.step < 0) continue;
    keys[k.step].push_back(o.key);
    if (k.is_manifest) committed.insert(k.step);
  }
  const int64_t newest = committed.empty() ? -1 : *committed.rbegin();
  std::vector<std::string> deleted;
  auto remove = [&](const std::string& key) {
    deleted.push_back("s3://" + url_.bucket + "/" + key);
    if (dry_run) return;
    Status s = client_->Delete(Url(key));
    // Rotation keeps going past a failed deletion (logged); the next prune retries it.
    if (!s.ok()) FT_LOG(Warning) << "s3 prune: " << s.ToString();
  };
  int kept = 0;
  for (auto& [step, ks] : keys) {
    const bool is_committed = committed.count(step) > 0;
    if (is_committed && kept < std::max(1, keep_last)) {
      ++kept;
      // Objects of other generations' data directories: a superseded attempt at this step.
      FT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(step));
      const std::string mine = S3DataDir(m.meta.generation);
      for (const auto& k : ks) {
        const S3KeyInfo info = ParseS3Key(url_.key, k);
        if (!info.is_manifest && info.data_dir != mine) remove(k);
      }
      continue;
    }
    if (!is_committed && step > newest && !abandoned) continue;  // may still be uploading
    if (is_committed) remove(S3ManifestKey(url_.key, step));     // invisible first
    for (const auto& k : ks) {
      if (k != S3ManifestKey(url_.key, step)) remove(k);
    }
  }
  FT_ASSIGN_OR_RETURN(auto uploads, client_->ListUploads(Url(S3Key(url_.key, ""))));
  for (const auto& u : uploads) {
    const S3KeyInfo k = ParseS3Key(url_.key, u.key);
    // Superseded steps never commit; newer ones may still be uploading unless abandoned.
    if (!abandoned && (k.step < 0 || k.step >= newest)) continue;
    deleted.push_back("upload s3://" + url_.bucket + "/" + u.key + " " + u.upload_id);
    if (dry_run) continue;
    Status s = client_->AbortUpload(Url(u.key), u.upload_id);
    if (!s.ok()) FT_LOG(Warning) << "s3 prune: " << s.ToString();
  }
  return deleted;
}

StatusOr<std::optional<int64_t>> PlanRestore(const std::string& mirror, const std::string& fs_root,
                                             Env* env) {
  FT_ASSIGN_OR_RETURN(auto s3, S3CheckpointStore::Open(mirror));
  FT_ASSIGN_OR_RETURN(std::optional<int64_t> remote, s3->Latest());
  if (!remote) return std::optional<int64_t>();
  FT_RETURN_IF_ERROR(CreateDirs(env, fs_root));
  CheckpointStore fs(fs_root, env);
  FT_ASSIGN_OR_RETURN(std::optional<CheckpointInfo> local, fs.Latest());
  if (local && local->step >= *remote) return std::optional<int64_t>();
  const std::string final_dir = JoinPath(fs_root, StepDirName(*remote));
  if (env->FileExists(final_dir)) {
    return Status::FailedPrecondition(final_dir +
                                      " exists but is not a complete checkpoint; "
                                      "move it aside to restore step " +
                                      std::to_string(*remote) + " from " + mirror);
  }
  const std::string tmp = JoinPath(fs_root, RestoreDirName(*remote));
  if (env->FileExists(tmp)) FT_RETURN_IF_ERROR(env->RemoveDirRecursive(tmp));
  FT_RETURN_IF_ERROR(CreateDirs(env, tmp));
  FT_LOG(Info) << "checkpoint: restoring step " << *remote << " from " << mirror << " into "
               << fs_root
               << (local ? " (newest there: step " + std::to_string(local->step) + ")"
                         : " (no complete checkpoint there)");
  return remote;
}

Status RestoreFiles(const std::string& mirror, const std::string& fs_root, int64_t step, int rank,
                    int world, Env* env) {
  FT_ASSIGN_OR_RETURN(auto s3, S3CheckpointStore::Open(mirror));
  FT_ASSIGN_OR_RETURN(Manifest m, s3->ReadManifest(step));
  std::vector<int> mine;
  for (int r = 0; r < m.meta.world_size; ++r) {
    if (r % std::max(1, world) == rank) mine.push_back(r);
  }
  if (mine.empty()) return Status::Ok();  // more ranks now than shards then
  return s3->Download(step, mine, JoinPath(fs_root, RestoreDirName(step)), env,
                      /*with_manifest=*/false);
}

Status FinishRestore(const std::string& mirror, const std::string& fs_root, int64_t step,
                     Env* env) {
  FT_ASSIGN_OR_RETURN(auto s3, S3CheckpointStore::Open(mirror));
  std::string text;
  FT_ASSIGN_OR_RETURN(Manifest m, s3->ReadManifest(step, &text));
  (void)m;  // parsed and checked; the bytes go down verbatim
  const std::string tmp = JoinPath(fs_root, RestoreDirName(step));
  const std::string final_dir = JoinPath(fs_root, StepDirName(step));
  FT_RETURN_IF_ERROR(WriteFileDurably(env, JoinPath(tmp, kManifestName), text));
  FT_RETURN_IF_ERROR(env->SyncDir(tmp));
  CheckpointStore fs(fs_root, env);
  Manifest check;
  FT_RETURN_IF_ERROR(fs.CheckComplete(tmp, &check));
  FT_RETURN_IF_ERROR(env->Rename(tmp, final_dir));
  FT_RETURN_IF_ERROR(env->SyncDir(fs_root));
  return WriteFileDurably(env, JoinPath(fs_root, kLatestName), StepDirName(step) + "\n");
}

StatusOr<std::optional<int64_t>> RestoreFromMirror(const std::string& mirror,
                                                   const std::string& fs_root, Env* env) {
  FT_ASSIGN_OR_RETURN(std::optional<int64_t> step, PlanRestore(mirror, fs_root, env));
  if (!step) return step;
  FT_RETURN_IF_ERROR(RestoreFiles(mirror, fs_root, *step, 0, 1, env));
  FT_RETURN_IF_ERROR(FinishRestore(mirror, fs_root, *step, env));
  return step;
}

}  // namespace ftrain::ckpt
