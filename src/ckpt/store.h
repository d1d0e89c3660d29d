// A checkpoint root: saving (each rank writes its shard into step-N.partial/, then exactly
// one committer makes it step-N/), listing, choosing the latest, rotation and recovery.
// Every file-system step goes through Env so tests can inject ENOSPC/EIO or kill the process
// at any of them. The promise: a checkpoint listed as complete is complete and correct,
// whatever crashed when. Reading lives in reader.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"
#include "core/env.h"
#include "core/status.h"

namespace ftrain::ckpt {

enum class CheckpointStatus { kComplete, kPartial, kDeleting, kCorrupt, kUnreadable };
const char* CheckpointStatusName(CheckpointStatus s);

struct CheckpointInfo {
  int64_t step = -1;
  std::string path;
  CheckpointStatus status = CheckpointStatus::kUnreadable;
  std::string problem;  // why unreadable
  // kUnreadable because reading failed (an I/O error, a file not found), not because what was
  // read is wrong: whether it is complete is unknown, so it is never set aside or skipped.
  bool unavailable = false;
  int world_size = 0;
  double created_unix = 0;
  uint64_t bytes_on_disk = 0;
  uint64_t raw_bytes = 0;
  bool is_latest = false;
  // The entry is a symbolic link (an operator's link to an archive): listed, readable, but
  // never counted, renamed or deleted by rotation and prune.
  bool is_symlink = false;
};

struct RotationPolicy {
  int keep_last = 3;       // newest complete checkpoints kept (at least 1 is always kept)
  int64_t keep_every = 0;  // also keep steps divisible by this (milestones); 0 = none
  // Delete an older complete checkpoint only after the newest one has been read back and
  // verified in full (VerifyCheckpoint): with keep_last = 1 the old one goes only once the
  // new one is known good. Off only for tests of rotation arithmetic.
  bool verify_newest = true;
  int verify_threads = 1;  // decompression threads of that read-back (0 = one per core)
};

// A directory opened once (O_DIRECTORY): its files are named through the descriptor
// (/proc/self/fd/N/NAME, so that they still pass through Env and its fault injection) and
// stay in this directory whatever is renamed to or from its name meanwhile.
class PartialDir {
 public:
  static StatusOr<std::unique_ptr<PartialDir>> Open(const std::string& path);
  ~PartialDir();
  PartialDir(const PartialDir&) = delete;
  PartialDir& operator=(const PartialDir&) = delete;
  std::string Path(const std::string& name) const;
  bool Is(const std::string& path) const;  // `path` names this very directory (device, inode)
  std::string Generation(Env* env) const;  // its GENERATION, "" if none

 private:
  explicit PartialDir(int fd) : fd_(fd) {}
  int fd_;
};

enum class CommitOutcome { kCommitted, kNotReady, kAlreadyCommitted, kBeingCommitted };

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string root, Env* env);

  const std::string& root() const { return root_; }
  Env* env() const { return env_; }

  // Writes rank `rank`'s shard of step meta.step into step-N.partial/ (creating it), makes it
  // durable (file fsync, rename from .tmp, directory fsync) and leaves its receipt.
  //
  // Fencing: with meta.generation set (the job start, "<unix ms>-<random>", made by rank 0),
  // the partial directory belongs to one generation: it is published with its GENERATION
  // file already inside (made as a private directory, then renamed into place), so nobody
  // ever sees it without one. A writer opens the partial once and writes, renames and leaves
  // its receipt through that descriptor, so its files land in the directory it claimed even
  // if the name changes hands. A writer of a newer generation that finds an older one's
  // partial renames it aside (checking that it moved the directory it judged) and publishes
  // its own; a writer of an older generation (a daemon or rank that woke up late) is refused
  // with FailedPrecondition before it writes, before its rename and before its receipt, and
  // the committer accepts only receipts of the partial's generation. So a stale writer can
  // never put its shard into a newer generation's commit, and two writers of one generation
  // never remove each other's claim.
  StatusOr<Receipt> WriteShard(const CheckpointMeta& meta, int rank, const ShardContents& contents,
                               const WriteOptions& options);

  // Commits step meta.step if every rank's receipt is there. Any number of callers may try;
  // one wins the COMMIT marker (O_EXCL) and does: validate receipts and shard sizes, write
  // manifest.json durably, fsync, rename step-N.partial -> step-N, fsync the root, update
  // LATEST. Refuses to commit a step older than the newest complete one (superseded).
  StatusOr<CommitOutcome> TryCommit(const CheckpointMeta& meta);

  // Every step-like entry in the root, newest first. Entries that are not checkpoints are
  // ignored (and reported by ListForeign()).
  StatusOr<std::vector<CheckpointInfo>> List();
  StatusOr<std::vector<std::string>> ListForeign();
  // The newest complete checkpoint, if any (validated manifest and shard sizes).
  StatusOr<std::optional<CheckpointInfo>> Latest();

  // Deletes complete checkpoints beyond the policy (never the newest, never one that a reader
  // holds open), leftover *.deleting directories, and partial directories that are provably
  // abandoned: older than the newest complete step (commits never go backwards, so they can
  // never complete). Deletion failures are logged and skipped. Returns the deleted paths.
  StatusOr<std::vector<std::string>> Rotate(const RotationPolicy& policy, bool dry_run = false);

  // At job start, before any writer runs: finishes commits that a dead committer left
  // half-done (all receipts present), and reports the rest. Abandoned partials are left for
  // Rotate(). A finished commit goes through the same COMMIT marker as any other (a marker a
  // dead committer left behind is cleared first: no writer is alive at a job start).
  Status Recover();

  // Moves a complete checkpoint that failed verification aside as step-N.corrupt (or
  // .corrupt-2, ...), never deleting anything, and refreshes LATEST. Returns the new path.
  StatusOr<std::string> MarkCorrupt(int64_t step);
  // Deletes the step-N.corrupt directories (only when an operator asks: ckptctl prune
  // --corrupt). Symbolic links are left alone. Returns the paths.
  StatusOr<std::vector<std::string>> RemoveCorrupt(bool dry_run);

  // Removes every step-N.partial directory. Only for a job start, after Recover(), when the
  // caller knows that no writer of this root is alive (one job per checkpoint root: Slurm
  // has killed the previous allocation's processes before requeueing). Returns the paths.
  StatusOr<std::vector<std::string>> RemoveAbandonedPartials();

  // Validates a checkpoint directory cheaply (manifest parses, every shard present with its
  // size); the deep check is Verify in verify.h.
  Status CheckComplete(const std::string& dir, Manifest* manifest);

 private:
  Status Commit(const CheckpointMeta& meta, const std::string& partial);
  StatusOr<std::unique_ptr<PartialDir>> ClaimPartial(const std::string& partial,
                                                     const std::string& generation);
  // Null when another writer published first (look again).
  StatusOr<std::unique_ptr<PartialDir>> PublishPartial(const std::string& partial,
                                                       const std::string& generation);
  Status RetirePartial(const std::string& partial, const PartialDir& dir, const std::string& owner,
                       const std::string& generation);
  // `dir` is still step-N.partial and of `generation`.
  Status CheckOwnership(const std::string& partial, const PartialDir& dir,
                        const std::string& generation);
  std::string ReadGeneration(const std::string& partial);

  std::string root_;
  Env* env_;
  int64_t verified_step_ = -1;  // newest step this store read back and verified
};

// A fresh generation id for a job start (rank 0 makes it and hands it to every rank): under
// `ftrain job`, "e<the run lease's epoch, 15 digits>-<8 hex random>" (`fence_epoch` > 0: the
// epoch the controller took for this launch, records::LaunchContext::fence_epoch; no clock
// involved), else "<unix ms, 15 digits>-<8 hex random>". Text order is age: every epoch one
// is newer than every clock one.
std::string NewGeneration(int64_t fence_epoch);

// Shared lock held by readers on a checkpoint directory (flock on its manifest), so rotation
// never deletes a checkpoint being read. Released by the destructor or at process death.
class ReadLease {
 public:
  static StatusOr<std::unique_ptr<ReadLease>> Acquire(const std::string& dir);
  ~ReadLease();
  // True when nobody holds a lease (used by rotation; non-blocking).
  static bool IsFree(const std::string& dir);

 private:
  int fd_ = -1;
};

}  // namespace ftrain::ckpt
