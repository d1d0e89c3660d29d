// Env helpers (durable writes, path pieces) and the fault-injecting Env.
#include "core/env.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace ftrain {

Status CreateDirs(Env* env, const std::string& dir) {
  for (size_t slash = dir.find('/', 1); slash != std::string::npos;
       slash = dir.find('/', slash + 1)) {
    if (env->IsDirectory(dir.substr(0, slash))) continue;
    FT_RETURN_IF_ERROR(env->CreateDir(dir.substr(0, slash)));
  }
  return env->CreateDir(dir);
}

double NowSeconds(Env* env) { return static_cast<double>(env->NowMicros()) / 1e6; }
double UnixSeconds(Env* env) { return static_cast<double>(env->UnixMicros()) / 1e6; }

std::string Dirname(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Basename(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

Status WriteFileDurably(Env* env, const std::string& path, const std::string& contents) {
  // Unique per writer: two processes writing the same file (two committers racing for LATEST,
  // a late writer of an old job) never truncate each other's temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  auto file = env->NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  Status s = (*file)->Append(contents.data(), contents.size());
  if (s.ok()) s = (*file)->Sync();
  if (s.ok()) s = (*file)->Close();
  if (s.ok()) s = env->Rename(tmp, path);
  if (s.ok()) s = env->SyncDir(Dirname(path));
  if (!s.ok()) {
    // Best effort: the temp file is garbage either way; the target is untouched.
    (void)env->RemoveFile(tmp);
  }
  return s;
}

namespace {

class FaultyWritableFile : public WritableFile {
 public:
  FaultyWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  Status Append(const void* data, size_t n) override {
    Status s = env_->Tick("append " + path_);
    if (!s.ok()) return s;
    return base_->Append(data, n);
  }
  Status Sync() override {
    Status s = env_->Tick("fsync " + path_);
    if (!s.ok()) return s;
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

}  // namespace

std::vector<std::string> FaultInjectionEnv::op_log() const {
  std::lock_guard<std::mutex> lock(log_mu_);
  return log_;
}

Status FaultInjectionEnv::Tick(const std::string& what) {
  const int64_t n = ++count_;
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    log_.push_back(what);
  }
  static const bool trace = [] {
    const char* t = std::getenv("FTRAIN_CRASH_TRACE");
    return t != nullptr && std::strcmp(t, "1") == 0;
  }();
  if (trace) std::cerr << "env-op " << n << ": " << what << std::endl;
  if (crash_at_ > 0 && n == crash_at_) {
    std::cerr << "FTRAIN_CRASH_AT: SIGKILL before op " << n << ": " << what << std::endl;
    ::kill(::getpid(), SIGKILL);
  }
  if (fail_at_ > 0 && (n == fail_at_ || (sticky_ && n > fail_at_))) {
    std::string msg =
        "injected fault at op " + std::to_string(n) + " (" + what + "): " + std::strerror(error_);
    return Status::IOError(msg);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  Status s = Tick("create " + path);
  if (!s.ok()) return s;
  auto base = base_->NewWritableFile(path);
  if (!base.ok()) return base.status();
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(this, path, std::move(*base)));
}

Status FaultInjectionEnv::CreateExclusive(const std::string& path, const std::string& contents) {
  Status s = Tick("create-exclusive " + path);
  return s.ok() ? base_->CreateExclusive(path, contents) : s;
}
Status FaultInjectionEnv::SyncFile(const std::string& path) {
  Status s = Tick("fsync " + path);
  return s.ok() ? base_->SyncFile(path) : s;
}
Status FaultInjectionEnv::SyncDir(const std::string& path) {
  Status s = Tick("fsync-dir " + path);
  return s.ok() ? base_->SyncDir(path) : s;
}
Status FaultInjectionEnv::Rename(const std::string& from, const std::string& to) {
  Status s = Tick("rename " + from + " -> " + to);
  return s.ok() ? base_->Rename(from, to) : s;
}
Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  Status s = Tick("remove " + path);
  return s.ok() ? base_->RemoveFile(path) : s;
}
Status FaultInjectionEnv::RemoveDirRecursive(const std::string& path) {
  Status s = Tick("remove-dir " + path);
  return s.ok() ? base_->RemoveDirRecursive(path) : s;
}
Status FaultInjectionEnv::CreateDir(const std::string& path) {
  Status s = Tick("mkdir " + path);
  return s.ok() ? base_->CreateDir(path) : s;
}

}  // namespace ftrain
