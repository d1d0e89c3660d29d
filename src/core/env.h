// Env: the small interface to the operating system that every crash-sensitive write and every
// timing rule goes through (leveldb style): the file system, so tests can fail the Nth
// operation (ENOSPC, EIO) or kill the process at it, and a monotonic clock with sleep, so tests
// of "due after N seconds" rules move a fake clock instead of waiting, and a wall clock that
// stamps records. PosixEnv is the real one; EnvWrapper forwards to another (FaultInjectionEnv,
// FakeClockEnv in core/fake_clock_env.h). Bulk data that HDF5 writes itself does not pass here;
// the sync/rename/marker steps around it do.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  static Env* Default();  // PosixEnv; never deleted

  // Creates or truncates.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Creates `path` with `contents` only if it does not exist (O_EXCL); AlreadyExists ->
  // FailedPrecondition. Synced before returning.
  virtual Status CreateExclusive(const std::string& path, const std::string& contents) = 0;
  virtual Status ReadFile(const std::string& path, std::string* contents) = 0;
  // fsync of a file written by someone else (HDF5), opened read-only.
  virtual Status SyncFile(const std::string& path) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Never follows a symbolic link: a link inside is unlinked, its target left alone; a link
  // as `path` itself is refused (FailedPrecondition).
  virtual Status RemoveDirRecursive(const std::string& path) = 0;
  virtual Status CreateDir(const std::string& path) = 0;  // OK if it already exists
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual StatusOr<uint64_t> FileSize(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;    // follows links
  virtual bool IsRegularFile(const std::string& path) = 0;  // follows links
  virtual bool IsSymlink(const std::string& path) = 0;      // lstat: the entry itself

  // Time. Every rule (a silence, a deadline, a back-off, "due after N s") reads the monotonic
  // clock (steady_clock; its epoch is arbitrary, so only differences mean anything), in
  // microseconds, and sleeps on it. The wall clock (system_clock, unix microseconds) only
  // stamps records people read: NTP or an operator's `date -s` steps it, so no rule reads it.
  virtual uint64_t NowMicros() = 0;
  virtual uint64_t UnixMicros() = 0;
  virtual void SleepForMicroseconds(int64_t micros) = 0;
};

// Seconds on env's monotonic clock (NowMicros / 1e6), for rules written in seconds.
double NowSeconds(Env* env);
// Unix seconds on env's wall clock (UnixMicros / 1e6): for records only.
double UnixSeconds(Env* env);

// Forwards every call to another Env; a subclass overrides what it changes (leveldb's
// EnvWrapper).
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  Status CreateExclusive(const std::string& path, const std::string& contents) override {
    return target_->CreateExclusive(path, contents);
  }
  Status ReadFile(const std::string& path, std::string* contents) override {
    return target_->ReadFile(path, contents);
  }
  Status SyncFile(const std::string& path) override { return target_->SyncFile(path); }
  Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  Status Rename(const std::string& from, const std::string& to) override {
    return target_->Rename(from, to);
  }
  Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  Status RemoveDirRecursive(const std::string& path) override {
    return target_->RemoveDirRecursive(path);
  }
  Status CreateDir(const std::string& path) override { return target_->CreateDir(path); }
  StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  StatusOr<uint64_t> FileSize(const std::string& path) override { return target_->FileSize(path); }
  bool FileExists(const std::string& path) override { return target_->FileExists(path); }
  bool IsDirectory(const std::string& path) override { return target_->IsDirectory(path); }
  bool IsRegularFile(const std::string& path) override { return target_->IsRegularFile(path); }
  bool IsSymlink(const std::string& path) override { return target_->IsSymlink(path); }
  uint64_t NowMicros() override { return target_->NowMicros(); }
  uint64_t UnixMicros() override { return target_->UnixMicros(); }
  void SleepForMicroseconds(int64_t micros) override { target_->SleepForMicroseconds(micros); }

 private:
  Env* target_;
};

// Writes `contents` to `path` so that after return either the old or the new contents are
// there, whatever crashes: temp file, fsync, rename, fsync of the parent directory.
Status WriteFileDurably(Env* env, const std::string& path, const std::string& contents);

// Creates `dir` and its missing parents (mkdir -p); OK if it exists.
Status CreateDirs(Env* env, const std::string& dir);

std::string Dirname(const std::string& path);
std::string Basename(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);

// Wraps an Env and injects faults at the mutating operations (create, append, sync, rename,
// remove, mkdir): counting from 1, operation number `fail_at` fails with `error` (an errno
// value such as ENOSPC or EIO), or with `crash_at` the process SIGKILLs itself right before
// that operation. Reads are never counted.
class FaultInjectionEnv : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* base) : EnvWrapper(base), base_(base) {}

  void FailAt(int64_t op, int error) {
    fail_at_ = op;
    error_ = error;
  }
  void FailAllFrom(int64_t op, int error) {  // every op from `op` on fails (a full disk)
    fail_at_ = op;
    error_ = error;
    sticky_ = true;
  }
  void CrashAt(int64_t op) { crash_at_ = op; }
  void Reset() {
    fail_at_ = -1;
    crash_at_ = -1;
    sticky_ = false;
    count_ = 0;
  }
  int64_t op_count() const { return count_; }
  // "rename /a -> /b" style descriptions of every counted op so far (for test messages).
  std::vector<std::string> op_log() const;

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Status CreateExclusive(const std::string& path, const std::string& contents) override;
  Status SyncFile(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDirRecursive(const std::string& path) override;
  Status CreateDir(const std::string& path) override;
  // Reads, queries and time are not counted: EnvWrapper forwards them.

  // Counts one op; returns the injected failure, if any. Used by the wrapped file too.
  Status Tick(const std::string& what);

 private:
  Env* base_;
  std::atomic<int64_t> count_{0};
  int64_t fail_at_ = -1;
  int64_t crash_at_ = -1;
  int error_ = 0;
  bool sticky_ = false;
  mutable std::mutex log_mu_;
  std::vector<std::string> log_;  // guarded by log_mu_
};

// The crash point hook used by crash tests: when the environment variable
// FTRAIN_CRASH_AT=N is set, Env::Default() is a FaultInjectionEnv that SIGKILLs the process
// before its Nth mutating operation (only the rank named by FTRAIN_CRASH_RANK, when set),
// and FTRAIN_CRASH_TRACE=1 logs every op to stderr. It ships in the production binaries on
// purpose (the crash tests must kill the binaries that run on the cluster) and warns when set;
// docs/operations.md ("Crash injection") says why and what it costs. Job scripts never set it.

}  // namespace ftrain
