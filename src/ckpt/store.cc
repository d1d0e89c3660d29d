// Checkpoint root operations: write shard, commit, list, latest, rotate, recover.
#include "ckpt/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "ckpt/filename.h"
#include "ckpt/verify.h"
#include "core/log.h"

namespace ftrain::ckpt {
namespace {

std::string WriterId() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

// Root entries of writers in progress: a claim being published, a retired partial being
// removed. Unique per writer; a crash can leave one behind, removed at the next job start.
constexpr char kClaimPrefix[] = ".claim-";
constexpr char kStalePrefix[] = ".stale-";
bool IsWriterLeftover(const std::string& name) {
  return name.rfind(kClaimPrefix, 0) == 0 || name.rfind(kStalePrefix, 0) == 0;
}

std::string UniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%d-%llu-%08x", static_cast<int>(getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)), rd());
  return buf;
}

uint64_t DirBytes(Env* env, const std::string& dir) {
  uint64_t total = 0;
  auto children = env->ListDir(dir);
  if (!children.ok()) return 0;
  for (const auto& c : *children) {
    auto size = env->FileSize(JoinPath(dir, c));
    if (size.ok()) total += *size;
  }
  return total;
}

// Removes (or with dry_run only lists) the claims and retired partials of writers that died
// mid-way, appending their paths to `removed`.
Status RemoveWriterLeftovers(Env* env, const std::string& root, bool dry_run,
                             std::vector<std::string>* removed) {
  FT_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(root));
  for (const auto& name : names) {
    const std::string path = JoinPath(root, name);
    if (!IsWriterLeftover(name) || env->IsSymlink(path) || !env->IsDirectory(path)) continue;
    if (!dry_run) {
      Status s = env->RemoveDirRecursive(path);
      if (!s.ok()) {
        FT_LOG(Warning) << "could not remove the leftover " << path << ": " << s.message();
        continue;
      }
    }
    removed->push_back(path);
  }
  return Status::Ok();
}

}  // namespace

const char* CheckpointStatusName(CheckpointStatus s) {
  switch (s) {
    case CheckpointStatus::kComplete:
      return "complete";
    case CheckpointStatus::kPartial:
      return "partial";
    case CheckpointStatus::kDeleting:
      return "deleting";
    case CheckpointStatus::kCorrupt:
      return "corrupt";
    case CheckpointStatus::kUnreadable:
      return "unreadable";
  }
  return "?";
}

CheckpointStore::CheckpointStore(std::string root, Env* env) : root_(std::move(root)), env_(env) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

StatusOr<Receipt> CheckpointStore::WriteShard(const CheckpointMeta& meta, int rank,
                                              const ShardContents& contents,
                                              const WriteOptions& options) {
  if (meta.step < 0 || meta.step > kMaxStep) {
    return Status::InvalidArgument("step " + std::to_string(meta.step) + " is out of range");
  }
  if (meta.world_size < 1 || meta.world_size > kMaxWorldSize || rank < 0 ||
      rank >= meta.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of world size " +
                                   std::to_string(meta.world_size) + " is out of range");
  }
  for (const auto& t : contents.tensors) {
    if (t.on_device) {
      return Status::InvalidArgument("tensor " + t.kind + "/" + t.name +
                                     " is in device memory; copy it to the host first");
    }
  }
  const std::string final_dir = JoinPath(root_, StepDirName(meta.step));
  if (env_->IsDirectory(final_dir)) {
    return Status::FailedPrecondition("checkpoint '" + final_dir +
                                      "' is already committed; refusing to write it again");
  }
  const std::string partial = JoinPath(root_, PartialDirName(meta.step));
  FT_RETURN_IF_ERROR(CreateDirs(env_, root_));
  // Every file of this shard goes into the directory this writer claimed, through its
  // descriptor: if a newer generation takes the name over meanwhile, the writes land in the
  // retired directory, never in the newer one.
  FT_ASSIGN_OR_RETURN(std::unique_ptr<PartialDir> dir, ClaimPartial(partial, meta.generation));
  const std::string tmp = dir->Path(ShardTempName(rank));
  const std::string shard = dir->Path(ShardFileName(rank));
  FT_ASSIGN_OR_RETURN(ShardFileInfo info,
                      WriteShardFile(tmp, meta.step, rank, meta.world_size, contents, options));
  FT_RETURN_IF_ERROR(env_->SyncFile(tmp));
  // Before the rename: a writer whose partial was taken over stops here, loudly.
  FT_RETURN_IF_ERROR(CheckOwnership(partial, *dir, meta.generation));
  FT_RETURN_IF_ERROR(env_->Rename(tmp, shard));
  Receipt r;
  r.meta = meta;
  r.step = meta.step;
  r.rank = rank;
  r.world_size = meta.world_size;
  r.file = ShardFileName(rank);
  r.info = std::move(info);
  r.writer = WriterId();
  r.generation = meta.generation;
  FT_RETURN_IF_ERROR(HashFile(shard, &r.size, &r.xxh3));
  // Again before the receipt: a newer generation may have taken the partial over meanwhile.
  FT_RETURN_IF_ERROR(CheckOwnership(partial, *dir, meta.generation));
  // The receipt's durable write also fsyncs the directory, which makes the rename durable.
  FT_RETURN_IF_ERROR(WriteFileDurably(env_, dir->Path(ReceiptFileName(rank)), r.ToJson()));
  return r;
}

namespace {
// Generations order by their text: "e<epoch>-<random>" (the run lease's epoch, zero-padded) after
// every "<unix ms>-<random>" ('e' sorts after the digits), each kind by its number.
bool Older(const std::string& a, const std::string& b) { return a < b; }
}  // namespace

std::string NewGeneration(int64_t fence_epoch) {
  std::random_device rd;
  char buf[64];
  // Under `ftrain job` the fence is the run lease's epoch for this launch (orch/lease.h): no
  // node's clock decides which writer is stale.
  if (fence_epoch > 0) {
    std::snprintf(buf, sizeof(buf), "e%015lld-%08x", static_cast<long long>(fence_epoch), rd());
    return buf;
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::snprintf(buf, sizeof(buf), "%015lld-%08x", static_cast<long long>(ms), rd());
  return buf;
}

StatusOr<std::unique_ptr<PartialDir>> PartialDir::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string what = "cannot open the directory '" + path + "': " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(what) : Status::IOError(what);
  }
  return std::unique_ptr<PartialDir>(new PartialDir(fd));
}

PartialDir::~PartialDir() { ::close(fd_); }  // read-only descriptor: nothing to report

std::string PartialDir::Path(const std::string& name) const {
  return "/proc/self/fd/" + std::to_string(fd_) + "/" + name;
}

bool PartialDir::Is(const std::string& path) const {
  struct stat mine, there;
  if (::fstat(fd_, &mine) != 0 || ::stat(path.c_str(), &there) != 0) return false;
  return mine.st_dev == there.st_dev && mine.st_ino == there.st_ino;
}

std::string PartialDir::Generation(Env* env) const {
  std::string owner;
  if (!env->ReadFile(Path(kGenerationName), &owner).ok()) owner.clear();
  while (!owner.empty() && owner.back() == '\n') owner.pop_back();
  return owner;
}

Status CheckpointStore::CheckOwnership(const std::string& partial, const PartialDir& dir,
                                       const std::string& mine) {
  if (mine.empty()) return Status::Ok();
  if (!dir.Is(partial)) {
    return Status::FailedPrecondition("'" + partial + "' was taken over by a newer start of " +
                                      "the job (generation '" + ReadGeneration(partial) +
                                      "'); this writer of generation '" + mine +
                                      "' is fenced off (its shard stays out of the commit)");
  }
  const std::string owner = dir.Generation(env_);
  if (owner != mine) {
    return Status::FailedPrecondition("'" + partial + "' belongs to generation '" + owner +
                                      "', this writer is of generation '" + mine +
                                      "': a stale writer is fenced off (not writing its shard)");
  }
  return Status::Ok();
}

std::string CheckpointStore::ReadGeneration(const std::string& partial) {
  std::string owner;
  if (!env_->ReadFile(JoinPath(partial, kGenerationName), &owner).ok()) return "";
  while (!owner.empty() && owner.back() == '\n') owner.pop_back();
  return owner;
}

StatusOr<std::unique_ptr<PartialDir>> CheckpointStore::PublishPartial(const std::string& partial,
                                                                      const std::string& mine) {
  // GENERATION is written into a fresh directory of this writer's own, which is then renamed
  // into place: step-N.partial never exists without its generation, and a rename cannot
  // replace a directory that has files in it, so of two writers exactly one publishes.
  const std::string claim =
      JoinPath(root_, kClaimPrefix + Basename(partial) + "-" + UniqueSuffix());
  FT_RETURN_IF_ERROR(env_->CreateDir(claim));
  std::unique_ptr<PartialDir> dir;
  Status s = env_->CreateExclusive(JoinPath(claim, kGenerationName), mine + "\n");
  if (s.ok()) {
    auto opened = PartialDir::Open(claim);
    s = opened.status();
    if (s.ok()) dir = std::move(opened).value();
  }
  if (s.ok()) s = env_->Rename(claim, partial);
  if (s.ok()) return dir;
  Status rm = env_->RemoveDirRecursive(claim);
  // A leftover claim is garbage that the next job start removes; the outcome is the rename's.
  if (!rm.ok()) FT_LOG(Warning) << "checkpoint: cannot remove " << claim << ": " << rm.message();
  if (env_->IsDirectory(partial)) return std::unique_ptr<PartialDir>();  // another won: look again
  return s;
}

Status CheckpointStore::RetirePartial(const std::string& partial, const PartialDir& dir,
                                      const std::string& owner, const std::string& mine) {
  // Renamed aside first, then removed: the removal can only ever touch the directory this
  // writer judged, even if another writer of `mine` replaces the name meanwhile.
  const std::string trash =
      JoinPath(root_, kStalePrefix + Basename(partial) + "-" + UniqueSuffix());
  Status s = env_->Rename(partial, trash);
  if (!s.ok()) return env_->IsDirectory(partial) ? s : Status::Ok();  // gone: look again
  if (!dir.Is(trash)) {
    // Another writer retired the old partial and published its own claim between our look
    // and our rename: that is what we moved. Give it back.
    Status back = env_->Rename(trash, partial);
    if (!back.ok()) {
      return Status::Aborted("moved a live claim of '" + partial + "' aside to '" + trash +
                             "' and cannot put it back: " + back.message() +
                             " (writers of several generations are racing)");
    }
    return Status::Ok();
  }
  FT_LOG(Warning) << "checkpoint: removing " << partial << " of the older generation '" << owner
                  << "' (this is generation '" << mine << "')";
  Status rm = env_->RemoveDirRecursive(trash);
  // A stale writer may still be adding files to it: garbage, removed at the next job start.
  if (!rm.ok()) FT_LOG(Warning) << "checkpoint: cannot remove " << trash << ": " << rm.message();
  return Status::Ok();
}

StatusOr<std::unique_ptr<PartialDir>> CheckpointStore::ClaimPartial(const std::string& partial,
                                                                    const std::string& mine) {
  if (mine.empty()) {  // no fencing (tools, tests): share whatever directory is there
    FT_RETURN_IF_ERROR(env_->CreateDir(partial));
    return PartialDir::Open(partial);
  }
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto dir = PartialDir::Open(partial);
    if (!dir.ok()) {
      if (dir.status().code() != Status::Code::kNotFound) return dir.status();
      FT_ASSIGN_OR_RETURN(std::unique_ptr<PartialDir> published, PublishPartial(partial, mine));
      if (published != nullptr) return published;
      continue;
    }
    const std::string owner = (*dir)->Generation(env_);
    if (owner == mine) return std::move(dir).value();
    if (!owner.empty() && Older(mine, owner)) {
      return Status::FailedPrecondition("'" + partial + "' belongs to the newer generation '" +
                                        owner + "'; this writer (generation '" + mine +
                                        "') is stale and is fenced off");
    }
    // An older generation's leftover (or an unfenced writer's): never committable by us, and
    // its writers are fenced by the new claim. Retire it and publish afresh.
    FT_RETURN_IF_ERROR(RetirePartial(partial, **dir, owner, mine));
  }
  return Status::Aborted("could not claim '" + partial + "' for generation '" + mine +
                         "' (writers of several generations are racing)");
}

StatusOr<CommitOutcome> CheckpointStore::TryCommit(const CheckpointMeta& meta) {
  const std::string partial = JoinPath(root_, PartialDirName(meta.step));
  const std::string final_dir = JoinPath(root_, StepDirName(meta.step));
  if (!env_->IsDirectory(partial)) {
    if (env_->IsDirectory(final_dir)) return CommitOutcome::kAlreadyCommitted;
    return Status::NotFound("no partial checkpoint '" + partial + "' to commit");
  }
  for (int r = 0; r < meta.world_size; ++r) {
    if (!env_->FileExists(JoinPath(partial, ReceiptFileName(r)))) return CommitOutcome::kNotReady;
  }
  Status s = env_->CreateExclusive(JoinPath(partial, kCommitMarkerName), WriterId() + "\n");
  if (!s.ok()) {
    if (s.code() == Status::Code::kFailedPrecondition) return CommitOutcome::kBeingCommitted;
    return s;
  }
  Status committed = Commit(meta, partial);
  if (!committed.ok()) {
    // Release the marker so that a later attempt (a retry, recovery at the next start) can
    // commit the step; the partial directory is still intact (the rename comes last).
    if (env_->IsDirectory(partial)) {
      Status rm = env_->RemoveFile(JoinPath(partial, kCommitMarkerName));
      if (!rm.ok()) FT_LOG(Warning) << "commit: cannot release the marker: " << rm.message();
    }
    return committed;
  }
  return CommitOutcome::kCommitted;
}

Status CheckpointStore::Commit(const CheckpointMeta& meta, const std::string& partial) {
  const std::string final_dir = JoinPath(root_, StepDirName(meta.step));
  FT_ASSIGN_OR_RETURN(std::optional<CheckpointInfo> newest, Latest());
  if (newest && newest->step > meta.step) {
    return Status::FailedPrecondition("step " + std::to_string(meta.step) +
                                      " is superseded by the complete step " +
                                      std::to_string(newest->step) + "; not committing it");
  }
  // The generation that owns the partial (empty: written without fencing).
  std::string owner;
  {
    Status g = env_->ReadFile(JoinPath(partial, kGenerationName), &owner);
    if (!g.ok()) owner.clear();
    while (!owner.empty() && owner.back() == '\n') owner.pop_back();
  }
  std::vector<Receipt> receipts;
  for (int r = 0; r < meta.world_size; ++r) {
    const std::string path = JoinPath(partial, ReceiptFileName(r));
    std::string text;
    FT_RETURN_IF_ERROR(env_->ReadFile(path, &text));
    FT_ASSIGN_OR_RETURN(Receipt rec, Receipt::FromJson(text, path));
    if (rec.rank != r)
      return Status::Corruption(path + ": receipt is for rank " + std::to_string(rec.rank));
    if (rec.generation != owner) {
      return Status::FailedPrecondition(path + ": receipt of generation '" + rec.generation +
                                        "' in a partial checkpoint of "
                                        "generation '" +
                                        owner + "' (a stale writer); not committing it");
    }
    auto size = env_->FileSize(JoinPath(partial, rec.file));
    if (!size.ok())
      return size.status().Annotate("shard of rank " + std::to_string(r) + " is missing");
    if (*size != rec.size) {
      return Status::Corruption("shard '" + JoinPath(partial, rec.file) + "' has " +
                                std::to_string(*size) + " bytes, its receipt says " +
                                std::to_string(rec.size));
    }
    receipts.push_back(std::move(rec));
  }
  CheckpointMeta m = meta;
  if (m.config_hash.empty() && !receipts.empty()) m = receipts.front().meta;
  FT_ASSIGN_OR_RETURN(Manifest manifest, BuildManifest(m, receipts));
  // Temp files of a committer that died mid-write (names are unique per writer, so they are
  // never reused): garbage, and the caller holds the COMMIT marker, so nobody else writes here.
  FT_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(partial));
  for (const auto& n : names) {
    if (n.rfind(std::string(kManifestName) + ".tmp", 0) == 0 ||
        (n.rfind("shard-", 0) == 0 && n.find(".h5.tmp") != std::string::npos)) {
      FT_RETURN_IF_ERROR(env_->RemoveFile(JoinPath(partial, n)));
    }
  }
  FT_RETURN_IF_ERROR(WriteFileDurably(env_, JoinPath(partial, kManifestName), manifest.ToJson()));
  FT_RETURN_IF_ERROR(env_->SyncDir(partial));
  FT_RETURN_IF_ERROR(env_->Rename(partial, final_dir));
  FT_RETURN_IF_ERROR(env_->SyncDir(root_));
  // LATEST is a hint for humans and tools; the truth is the newest complete directory.
  FT_RETURN_IF_ERROR(
      WriteFileDurably(env_, JoinPath(root_, kLatestName), StepDirName(meta.step) + "\n"));
  FT_LOG(Info) << "checkpoint: committed " << final_dir << " (" << manifest.files.size()
               << " shards, " << manifest.stored_bytes << " bytes)";
  return Status::Ok();
}

namespace {

// Whether `dir` lists in full and `name` is not in it: a file that is verifiably not there,
// unlike one whose open failed (an outage, an NFS negative entry cached for a file that is).
bool VerifiablyAbsent(Env* env, const std::string& dir, const std::string& name) {
  auto names = env->ListDir(dir);
  return names.ok() && std::find(names->begin(), names->end(), name) == names->end();
}

}  // namespace

Status CheckpointStore::CheckComplete(const std::string& dir, Manifest* manifest) {
  const std::string path = JoinPath(dir, kManifestName);
  std::string text;
  // A manifest or shard that cannot be read or found keeps its I/O kind (IOError, NotFound):
  // an outage is not damage. Only what was read and is wrong is Corruption, and a file the
  // directory's own listing (read in full) does not hold: it is verifiably not there.
  Status s = env_->ReadFile(path, &text);
  if (!s.ok() && VerifiablyAbsent(env_, dir, kManifestName)) {
    return Status::Corruption("'" + dir + "' has no " + kManifestName +
                              ": not a complete checkpoint");
  }
  if (!s.ok()) return s.Annotate("manifest '" + path + "' cannot be read");
  FT_ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(text, path));
  RootEntry e = ParseRootEntry(Basename(dir));
  if (e.kind == EntryKind::kComplete && e.step != m.meta.step) {
    return Status::Corruption(path + ": manifest is for step " + std::to_string(m.meta.step) +
                              " but the directory is named for step " + std::to_string(e.step));
  }
  for (const auto& f : m.files) {
    const std::string fp = JoinPath(dir, f.path);
    auto size = env_->FileSize(fp);
    if (!size.ok() && VerifiablyAbsent(env_, Dirname(fp), Basename(fp))) {
      return Status::Corruption("shard '" + fp + "' of rank " + std::to_string(f.rank) +
                                " is missing");
    }
    if (!size.ok()) {
      return size.status().Annotate("shard '" + fp + "' of rank " + std::to_string(f.rank) +
                                    " cannot be found or read");
    }
    if (*size != f.size) {
      return Status::Corruption("shard '" + fp + "' has " + std::to_string(*size) +
                                " bytes, the manifest says " + std::to_string(f.size) +
                                " (truncated or replaced)");
    }
  }
  if (manifest) *manifest = std::move(m);
  return Status::Ok();
}

StatusOr<std::vector<CheckpointInfo>> CheckpointStore::List() {
  if (!env_->IsDirectory(root_)) {
    return Status::NotFound("checkpoint root '" + root_ + "' does not exist or is not a directory");
  }
  FT_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(root_));
  std::vector<CheckpointInfo> out;
  for (const auto& name : names) {
    RootEntry e = ParseRootEntry(name);
    if (e.kind == EntryKind::kOther) continue;
    const std::string dir = JoinPath(root_, name);
    if (!env_->IsDirectory(dir)) continue;
    CheckpointInfo info;
    info.step = e.step;
    info.path = dir;
    info.is_symlink = env_->IsSymlink(dir);
    info.bytes_on_disk = info.is_symlink ? 0 : DirBytes(env_, dir);
    if (e.kind == EntryKind::kPartial) {
      info.status = CheckpointStatus::kPartial;
    } else if (e.kind == EntryKind::kDeleting) {
      info.status = CheckpointStatus::kDeleting;
    } else if (e.kind == EntryKind::kCorrupt) {
      info.status = CheckpointStatus::kCorrupt;
    } else {
      Manifest m;
      Status s = CheckComplete(dir, &m);
      if (s.ok()) {
        info.status = CheckpointStatus::kComplete;
        info.world_size = m.meta.world_size;
        info.created_unix = m.created_unix;
        info.raw_bytes = m.raw_bytes;
      } else {
        info.status = CheckpointStatus::kUnreadable;
        info.problem = s.message();
        info.unavailable = !s.IsCorruption();
      }
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.step != b.step ? a.step > b.step : a.path < b.path;
  });
  for (auto& i : out) {
    if (i.status == CheckpointStatus::kComplete) {
      i.is_latest = true;
      break;
    }
  }
  return out;
}

StatusOr<std::vector<std::string>> CheckpointStore::ListForeign() {
  FT_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(root_));
  std::vector<std::string> out;
  for (const auto& name : names) {
    if (ParseRootEntry(name).kind != EntryKind::kOther) continue;
    if (name == kLatestName || name.rfind(std::string(kLatestName) + ".tmp", 0) == 0) continue;
    if (IsWriterLeftover(name)) continue;
    out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<std::optional<CheckpointInfo>> CheckpointStore::Latest() {
  if (!env_->IsDirectory(root_)) {
    // Not there (ENOENT: a fresh root) or not readable (EIO, ESTALE): only the first means
    // "no checkpoint"; an outage must never read as a fresh start.
    auto names = env_->ListDir(root_);
    if (!names.ok() && !names.status().IsNotFound()) {
      return Status::StorageUnavailable("checkpoint root '" + root_ +
                                        "' cannot be read: " + names.status().message());
    }
    return std::optional<CheckpointInfo>();
  }
  FT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (auto& i : all) {
    // A newer entry that could not be read may be complete: the newest is unknown until it
    // reads (skipping it would resume an older step and retrain what it holds).
    if (i.unavailable && !i.is_symlink) {
      return Status::StorageUnavailable(i.path + " cannot be read (" + i.problem +
                                        "): whether it is the newest complete checkpoint is "
                                        "unknown");
    }
    if (i.status == CheckpointStatus::kComplete) return std::optional<CheckpointInfo>(i);
  }
  return std::optional<CheckpointInfo>();
}

StatusOr<std::vector<std::string>> CheckpointStore::Rotate(const RotationPolicy& policy,
                                                           bool dry_run) {
  FT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  std::vector<std::string> deleted;
  int64_t newest_complete = -1;
  int kept = 0;
  const int keep_last = std::max(1, policy.keep_last);
  auto remove = [&](const CheckpointInfo& info, bool via_rename) {
    if (info.is_symlink) return;  // an operator's link: never renamed, followed or deleted
    if (dry_run) {
      deleted.push_back(info.path);
      return;
    }
    std::string target = info.path;
    Status s;
    if (via_rename) {
      // Rename first: the directory stops being a complete checkpoint atomically, so a crash
      // mid-delete never leaves a half-deleted "complete" one.
      target = JoinPath(root_, DeletingDirName(info.step));
      s = env_->Rename(info.path, target);
      if (s.ok()) s = env_->SyncDir(root_);
    }
    if (s.ok()) s = env_->RemoveDirRecursive(target);
    if (!s.ok()) {
      FT_LOG(Warning) << "rotation: could not delete " << info.path << ": " << s.message()
                      << " (will retry at the next rotation)";
      return;
    }
    deleted.push_back(info.path);
  };
  for (const auto& info : all) {
    if (info.status != CheckpointStatus::kComplete || info.is_symlink) continue;
    if (newest_complete < 0) newest_complete = info.step;
    const bool milestone = policy.keep_every > 0 && info.step % policy.keep_every == 0;
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    if (milestone) continue;
    if (policy.verify_newest && !dry_run && verified_step_ != newest_complete) {
      const std::string newest = JoinPath(root_, StepDirName(newest_complete));
      VerifyReport report = VerifyCheckpoint(newest, policy.verify_threads, env_);
      if (!report.ok()) {
        FT_LOG(Error) << "rotation: the newest checkpoint " << newest << " fails verification ("
                      << report.problems.front().file << ": " << report.problems.front().problem
                      << "); deleting nothing older";
        break;
      }
      verified_step_ = newest_complete;
    }
    if (!ReadLease::IsFree(info.path)) {
      FT_LOG(Info) << "rotation: " << info.path << " is being read; keeping it for now";
      continue;
    }
    remove(info, true);
  }
  for (const auto& info : all) {
    if (info.status == CheckpointStatus::kDeleting) remove(info, false);
    // A partial older than the newest complete step can never commit (commits never go
    // backwards), so it is provably abandoned. Newer partials may belong to a live writer.
    if (info.status == CheckpointStatus::kPartial && newest_complete >= 0 &&
        info.step < newest_complete) {
      remove(info, false);
    }
  }
  return deleted;
}

Status CheckpointStore::Recover() {
  if (!env_->IsDirectory(root_)) return Status::Ok();
  FT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (const auto& info : all) {
    if (info.status != CheckpointStatus::kPartial) continue;
    std::string text;
    if (!env_->ReadFile(JoinPath(info.path, ReceiptFileName(0)), &text).ok()) continue;
    auto r0 = Receipt::FromJson(text, info.path);
    if (!r0.ok()) continue;
    bool all_there = true;
    for (int r = 0; r < r0->world_size; ++r) {
      all_there = all_there && env_->FileExists(JoinPath(info.path, ReceiptFileName(r)));
    }
    if (!all_there) {
      FT_LOG(Info) << "recovery: " << info.path << " is incomplete (missing receipts); "
                   << "it will never be used and rotation removes it once superseded";
      continue;
    }
    // A marker here was left by a committer that died: no writer is alive at a job start.
    const std::string marker = JoinPath(info.path, kCommitMarkerName);
    if (env_->FileExists(marker)) {
      Status rm = env_->RemoveFile(marker);
      if (!rm.ok()) {
        FT_LOG(Warning) << "recovery: cannot clear the stale commit marker " << marker << ": "
                        << rm.message();
        continue;
      }
    }
    auto s = TryCommit(r0->meta);
    if (s.ok() && *s == CommitOutcome::kCommitted) {
      FT_LOG(Warning) << "recovery: finished the interrupted commit of " << info.path;
    } else if (!s.ok()) {
      FT_LOG(Warning) << "recovery: cannot finish " << info.path << ": " << s.status().message();
    }
  }
  return Status::Ok();
}

StatusOr<std::string> CheckpointStore::MarkCorrupt(int64_t step) {
  const std::string dir = JoinPath(root_, StepDirName(step));
  if (!env_->IsDirectory(dir)) {
    return Status::NotFound("checkpoint '" + dir + "' is not there to set aside");
  }
  std::string target;
  for (int n = 1; n < 1000; ++n) {
    target = JoinPath(root_, CorruptDirName(step, n));
    if (!env_->FileExists(target) && !env_->IsSymlink(target)) break;
  }
  FT_RETURN_IF_ERROR(env_->Rename(dir, target).Annotate("setting aside a corrupt checkpoint"));
  FT_RETURN_IF_ERROR(env_->SyncDir(root_));
  auto latest = Latest();
  if (latest.ok() && latest->has_value()) {
    Status s =
        WriteFileDurably(env_, JoinPath(root_, kLatestName), Basename((*latest)->path) + "\n");
    if (!s.ok()) FT_LOG(Warning) << "could not refresh LATEST: " << s.message();
  } else if (latest.ok()) {
    // Nothing complete is left: LATEST must not point at the set-aside directory.
    Status s = env_->RemoveFile(JoinPath(root_, kLatestName));
    (void)s;  // absent already is fine; LATEST is only a hint
  }
  return target;
}

StatusOr<std::vector<std::string>> CheckpointStore::RemoveCorrupt(bool dry_run) {
  std::vector<std::string> removed;
  FT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (const auto& info : all) {
    if (info.status != CheckpointStatus::kCorrupt || info.is_symlink) continue;
    if (!dry_run) {
      Status s = env_->RemoveDirRecursive(info.path);
      if (!s.ok()) {
        FT_LOG(Warning) << "could not remove " << info.path << ": " << s.message();
        continue;
      }
    }
    removed.push_back(info.path);
  }
  FT_RETURN_IF_ERROR(RemoveWriterLeftovers(env_, root_, dry_run, &removed));
  return removed;
}

StatusOr<std::vector<std::string>> CheckpointStore::RemoveAbandonedPartials() {
  std::vector<std::string> removed;
  if (!env_->IsDirectory(root_)) return removed;
  FT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (const auto& info : all) {
    if (info.status != CheckpointStatus::kPartial || info.is_symlink) continue;
    Status s = env_->RemoveDirRecursive(info.path);
    if (!s.ok()) {
      FT_LOG(Warning) << "could not remove abandoned " << info.path << ": " << s.message();
      continue;
    }
    removed.push_back(info.path);
  }
  FT_RETURN_IF_ERROR(RemoveWriterLeftovers(env_, root_, /*dry_run=*/false, &removed));
  return removed;
}

namespace {
// flock errors that mean "this file system has no (usable) flock", not "locked": NFS refuses
// some lock modes on read-only descriptors, Lustre mounted without -o flock says ENOSYS.
bool FlockUnsupported(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL || err == EBADF;
}
}  // namespace

StatusOr<std::unique_ptr<ReadLease>> ReadLease::Acquire(const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("cannot open '" + path + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_SH) != 0) {
    int err = errno;
    if (!FlockUnsupported(err)) {
      ::close(fd);
      return Status::IOError("flock '" + path + "': " + std::strerror(err));
    }
    // Degrade, never block a resume: read without a lease. Rotation cannot see this reader;
    // it only deletes checkpoints older than the newest keep_last, which resume never reads.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      FT_LOG(Warning) << "checkpoint read leases are unavailable on this file system (flock '"
                      << path << "': " << std::strerror(err)
                      << "); reading without them (see docs/operations.md, shared file systems)";
    }
  }
  std::unique_ptr<ReadLease> lease(new ReadLease());
  lease->fd_ = fd;
  return lease;
}

ReadLease::~ReadLease() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

bool ReadLease::IsFree(const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  const int err = errno;
  ::close(fd);
  // No usable flock here: nobody can hold a lease, so treat the checkpoint as free rather
  // than keeping every checkpoint forever.
  return locked || FlockUnsupported(err);
}

}  // namespace ftrain::ckpt
