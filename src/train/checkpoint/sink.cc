// Daemon or synchronous checkpoint path, with a collective outcome.
#include "train/checkpoint/sink.h"

#include <sys/mman.h>
#include <torch/torch.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/filename.h"
#include "ckpt/s3_staging.h"
#include "comm/collectives.h"
#include "core/env.h"
#include "core/log.h"

namespace ftrain::train {
namespace {

// realpath() of `path`, or of its parent plus its last component when it does not exist yet;
// the path itself when neither resolves. Not std::filesystem::weakly_canonical: LibTorch 2.11
// exports its own copies of std::filesystem symbols that calls may bind to (its remove_all
// crashes), so code linked with LibTorch stays with POSIX here.
std::string CanonicalPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return buf;
  if (::realpath(Dirname(path).c_str(), buf) != nullptr) {
    return JoinPath(buf, Basename(path));
  }
  return path;
}

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Sleeps between the tries of an upload until `deadline`, then gives up.
ckpt::RetryWait UntilDeadline(Clock::time_point deadline) {
  return [deadline](std::chrono::milliseconds ms) {
    if (Clock::now() + ms > deadline) return false;
    std::this_thread::sleep_for(ms);
    return true;
  };
}

// ckpt.root = s3://...: a durable save whose upload met an outage (`s`) tries it again until
// `deadline`, so it reports success only once S3 holds the step (ckpt/s3_staging.h).
Status RetryS3Outage(Status s, const std::string& root, int64_t step, int keep,
                     Clock::time_point deadline, Env* env) {
  if (!ckpt::IsS3Outage(s)) return s;
  auto url = ckpt::StagedS3Root(root, env);
  if (!url.ok() || url->empty()) return s;  // a file-system root: no upload to retry
  return ckpt::CommitStagedRetrying(root, step, keep, UntilDeadline(deadline), env);
}

}  // namespace

CheckpointSink::CheckpointSink(CheckpointSinkOptions options, comm::Comm* world)
    : options_(std::move(options)), world_(world), store_(options_.root, options_.env) {}

void CheckpointSink::WaitForDeviceCopies() {
  if (!pending_ || options_.device == nullptr) return;
  Status s = options_.device->WaitForCopies();
  if (!s.ok()) FT_LOG(Error) << "checkpoint: " << s.message();
}

CheckpointSink::~CheckpointSink() {
  FinishPending();        // a snapshot begun at the last step boundary still reaches ckptd
  WaitForDeviceCopies();  // (if finishing failed) before the slots are unmapped
  client_.reset();        // unregisters its slots with the device first
  ReleaseSyncStaging();
}

void CheckpointSink::ReleaseSyncStaging() {
  if (sync_staging_ == nullptr) return;
  options_.device->UnregisterHost(sync_staging_);
  ::munmap(sync_staging_, sync_staging_bytes_);
  sync_staging_ = nullptr;
  sync_staging_bytes_ = 0;
}

Status CheckpointSink::ReduceSum(double* v, int n) {
  torch::Tensor t = torch::from_blob(v, {n}, torch::kFloat64).clone();
  FT_RETURN_IF_ERROR(world_->AllReduce(t, comm::ReduceOp::kSum)->Wait());
  for (int i = 0; i < n; ++i) v[i] = t[i].item<double>();
  return Status::Ok();
}

Status CheckpointSink::ReduceMax(double* v, int n) {
  torch::Tensor t = torch::from_blob(v, {n}, torch::kFloat64).clone();
  FT_RETURN_IF_ERROR(world_->AllReduce(t, comm::ReduceOp::kMax)->Wait());
  for (int i = 0; i < n; ++i) v[i] = t[i].item<double>();
  return Status::Ok();
}

bool CheckpointSink::TryConnect(bool quiet) {
  const std::string sock = ckpt::proto::SocketPath(options_.run_dir, options_.node);
  // A trainer that was just killed may still be registered for this rank for a moment.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto c = ckpt::CkptdClient::Connect(options_.run_dir, options_.node, options_.rank,
                                        options_.world, slot_bytes_, options_.device);
    if (c.ok()) {
      client_ = std::move(c).value();
      if (had_daemon_) {
        FT_LOG(Warning) << "ckptd: reconnected to the daemon of node '" << options_.node
                        << "'; checkpoints are asynchronous again";
      } else {
        FT_LOG(Info) << "ckptd: rank " << options_.rank << " hands its checkpoints to " << sock
                     << " (" << client_->slot_bytes() << "-byte slots)";
      }
      had_daemon_ = true;
      return true;
    }
    const bool busy = c.status().message().find("already connected") != std::string::npos;
    if (!busy || Clock::now() > deadline) {
      if (!quiet || had_daemon_) {
        FT_LOG(Error) << "ckptd: CANNOT USE the checkpoint daemon of node '" << options_.node
                      << "': " << c.status().message()
                      << "; this rank saves SYNCHRONOUSLY (training slows at each checkpoint)";
      }
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void CheckpointSink::DropDaemon(const std::string& why) {
  WaitForDeviceCopies();  // never unmap a slot that a device copy still writes into
  pending_.reset();
  FT_LOG(Error) << "ckptd: the checkpoint daemon of node '" << options_.node << "' FAILED: " << why
                << "; rank " << options_.rank
                << " falls back to SYNCHRONOUS checkpoints (none is skipped)";
  client_.reset();
}

std::optional<CheckpointSink::DaemonState> CheckpointSink::QueryDaemon() {
  if (client_ == nullptr) return std::nullopt;
  auto text = client_->StatusJson();
  if (!text.ok()) {
    DropDaemon("status query: " + text.status().message());
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  DaemonState st;
  if (j.is_discarded()) {
    DropDaemon("unreadable status");
    return std::nullopt;
  }
  st.last_committed_step = j.value("last_committed_step", int64_t{-1});
  st.last_error = j.value("last_error", std::string());
  for (const auto& r : j.value("ranks", nlohmann::json::array())) {
    if (r.value("rank", -1) != options_.rank) continue;
    st.in_flight = r.value("in_flight", int64_t{0});
    st.last_failed_step = r.value("last_failed_step", int64_t{-1});
    st.last_persisted_step = r.value("last_persisted_step", int64_t{-1});
  }
  return st;
}

void CheckpointSink::CheckDaemonRoot() {
  auto text = client_->StatusJson();
  nlohmann::json j = text.ok() ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  const std::string theirs = j.is_object() ? j.value("root", std::string()) : std::string();
  if (theirs.empty() || CanonicalPath(theirs) != CanonicalPath(options_.root)) {
    // Its checkpoints would land where this run never looks for them.
    DropDaemon("it writes to '" + theirs + "' but ckpt.root is '" + options_.root +
               "' (start ckptd with --root " + options_.root + ", or set FTRAIN_CKPT_ROOT)");
    return;
  }
  const int keep = j.value("keep", options_.keep);
  const int64_t every = j.value("keep_every", int64_t{0});
  if ((keep != options_.keep || every != options_.keep_every) && options_.rank == 0) {
    // Whoever commits a step rotates with its own policy, and the daemons commit most of them.
    FT_LOG(Warning) << "ckptd rotates with --keep " << keep << " --keep-every " << every
                    << " but this run has ckpt.keep = " << options_.keep
                    << ", ckpt.keep_every = " << options_.keep_every
                    << "; the daemons' policy wins for the checkpoints "
                    << "they commit (start them with FTRAIN_CKPTD_ARGS=\"--keep " << options_.keep
                    << " --keep-every " << options_.keep_every << "\")";
  }
}

Status CheckpointSink::Start(uint64_t slot_bytes) {
  // Room for the blobs to grow (cursor, metrics line) without reconnecting.
  slot_bytes_ = slot_bytes + slot_bytes / 64 + (1u << 20);
  if (options_.daemon != DaemonMode::kOff) {
    const std::string sock = ckpt::proto::SocketPath(options_.run_dir, options_.node);
    if (!options_.env->FileExists(sock)) {
      if (options_.daemon == DaemonMode::kRequire) {
        FT_LOG(Error) << "ckpt.daemon = require, but there is no ckptd socket " << sock;
      } else {
        FT_LOG(Info) << "ckptd: no daemon on node '" << options_.node << "' (" << sock
                     << "): checkpoints are written synchronously";
      }
    } else {
      // What an earlier trainer of this job handed over must be on disk (or have failed)
      // before rank 0's recovery looks at the partial checkpoints.
      const auto t0 = Clock::now();
      bool logged = false;
      for (;;) {
        auto text = ckpt::QueryCkptdStatus(sock);
        if (!text.ok()) break;  // not answering: TryConnect below says so
        nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
        const int64_t busy = j.is_discarded() ? 0
                                              : j.value("snapshots_in_flight", int64_t{0}) +
                                                    j.value("queue_depth", int64_t{0});
        if (busy == 0) break;
        if (!logged) {
          FT_LOG(Info) << "ckptd: waiting for the daemon to persist " << busy
                       << " snapshot(s) handed over before this start";
          logged = true;
        }
        if (Since(t0) > options_.flush_timeout_s) {
          FT_LOG(Error) << "ckptd: the daemon still writes after " << options_.flush_timeout_s
                        << " s (ckpt.flush_timeout_s); going on";
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (TryConnect(/*quiet=*/false)) CheckDaemonRoot();
    }
  }
  double v[1] = {options_.daemon == DaemonMode::kRequire && client_ == nullptr ? 1.0 : 0.0};
  FT_RETURN_IF_ERROR(ReduceMax(v, 1));  // also the barrier before rank 0's recovery
  if (v[0] != 0) {
    return Status::FailedPrecondition(
        "ckpt.daemon = require, but a rank has no checkpoint daemon on its node (see the log: "
        "start ckptd through slurm/agent.sh, or set ckpt.daemon = auto)");
  }
  return Status::Ok();
}

Status CheckpointSink::SaveSync(const ckpt::CheckpointMeta& meta,
                                const ckpt::ShardContents& contents, bool* committed) {
  *committed = false;
  // The file writer reads host memory: device tensors go through a host copy first (one
  // buffer, reused across checkpoints; pinned by the device where it can).
  const ckpt::ShardContents* host = &contents;
  ckpt::ShardContents staged;
  if (ckpt::HasDeviceTensors(contents)) {
    if (options_.device == nullptr) {
      return Status::Internal(
          "device tensors in a snapshot, but the checkpoint sink has no device");
    }
    staged = contents;
    uint64_t total = 0;
    for (const auto& t : contents.tensors) {
      if (t.on_device) total += static_cast<uint64_t>(t.length) * ckpt::DTypeSize(t.dtype);
    }
    if (sync_staging_bytes_ < total) {
      ReleaseSyncStaging();
      // Whole pages of its own (mmap), so registering it never overlaps another range.
      void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        return Status::IOError("cannot map " + std::to_string(total) +
                               " bytes to stage a checkpoint on the host: " + std::strerror(errno));
      }
      sync_staging_ = static_cast<uint8_t*>(p);
      sync_staging_bytes_ = total;
      options_.device->RegisterHost(sync_staging_, sync_staging_bytes_);
    }
    std::vector<ckpt::DeviceCopy> copies;
    uint64_t off = 0;
    for (auto& t : staged.tensors) {
      if (!t.on_device) continue;
      const uint64_t n = static_cast<uint64_t>(t.length) * ckpt::DTypeSize(t.dtype);
      copies.push_back({sync_staging_ + off, t.data, n});
      t.data = sync_staging_ + off;
      t.on_device = false;
      off += n;
    }
    FT_RETURN_IF_ERROR(options_.device->CopyToHost(copies).Annotate("checkpoint staging"));
    host = &staged;
  }
  FT_RETURN_IF_ERROR(store_.WriteShard(meta, options_.rank, *host, options_.write).status());
  // Whoever completes the set of receipts commits (a daemon or a rank); O_EXCL picks one.
  FT_ASSIGN_OR_RETURN(ckpt::CommitOutcome outcome, store_.TryCommit(meta));
  // ckpt.root = s3://...: the step counts once S3 holds it (ckpt/s3_staging.h). Whoever sees
  // it committed here and not yet there uploads it: the winner, or a rank rewriting what its
  // daemon failed to upload (a second upload of a committed step is refused harmlessly).
  FT_ASSIGN_OR_RETURN(std::string s3, ckpt::StagedS3Root(options_.root, options_.env));
  if (!s3.empty() && outcome != ckpt::CommitOutcome::kNotReady &&
      outcome != ckpt::CommitOutcome::kBeingCommitted &&
      ckpt::StagedS3Latest(options_.root, options_.env) < meta.step) {
    FT_RETURN_IF_ERROR(ckpt::CommitStaged(options_.root, meta.step, options_.keep, options_.env));
  }
  if (outcome == ckpt::CommitOutcome::kCommitted) {
    *committed = true;
    ckpt::RotationPolicy policy;
    policy.keep_last = options_.keep;
    policy.keep_every = options_.keep_every;
    policy.verify_threads = options_.write.threads;
    auto rotated = store_.Rotate(policy);
    if (!rotated.ok()) FT_LOG(Warning) << "rotation: " << rotated.status().message();
  } else if (outcome == ckpt::CommitOutcome::kAlreadyCommitted) {
    *committed = true;
  }
  return Status::Ok();
}

void CheckpointSink::BeforeStateChanges() {
  if (!pending_ || options_.device == nullptr) return;
  Status s = options_.device->OrderBeforeStateChanges();
  if (!s.ok()) {
    // The state must not change under the copy: wait for it on the host instead.
    FT_LOG(Warning) << "checkpoint: " << s.message() << "; waiting for the copy on the host";
    s = options_.device->WaitForCopies();
    if (!s.ok()) FT_LOG(Error) << "checkpoint: " << s.message();
  }
}

Status CheckpointSink::CommHealth() const {
  return options_.comm_health ? options_.comm_health() : Status::Ok();
}

void CheckpointSink::DropPending(const Status& why) {
  WaitForDeviceCopies();  // the copy may still write into the slot; let it end first
  pending_.reset();
  FT_LOG(Error) << "CHECKPOINT DROPPED at step " << pending_step_
                << ": not handed over to ckptd because a communicator failed (" << why.message()
                << "); the state may hold partially reduced values";
}

void CheckpointSink::FinishPending() {
  if (!pending_) return;
  // The snapshot was begun at a step boundary that passed its own check, but a communicator
  // that failed since (this step's, or any later) leaves the run without a trustworthy
  // continuation: finish nothing once one has failed.
  Status health = CommHealth();
  if (!health.ok()) {
    DropPending(health);
    return;
  }
  ckpt::CkptdClient::Pending p = std::move(*pending_);
  pending_.reset();
  const std::string step_s = std::to_string(pending_step_);
  auto sub = client_ != nullptr ? client_->FinishSubmit(std::move(p))
                                : StatusOr<ckpt::SubmitStats>(Status::Unavailable("no daemon"));
  if (!sub.ok()) {
    // The device state has moved on: this step cannot be rewritten synchronously. Older
    // checkpoints are intact; the next checkpoint tries again.
    FT_LOG(Error) << "CHECKPOINT FAILED at step " << step_s
                  << ": handing it over to ckptd: " << sub.status().message()
                  << " (training continues; the next checkpoint "
                  << "tries again)";
    DropDaemon("finishing the hand-over of step " + step_s + ": " + sub.status().message());
  }
}

// Waits until the step is committed; rewrites synchronously what a daemon failed to persist.
Status CheckpointSink::WaitUntilCommitted(const ckpt::CheckpointMeta& meta,
                                          const ckpt::ShardContents& contents, bool via_daemon) {
  const std::string step_s = std::to_string(meta.step);
  const std::string final_dir = JoinPath(options_.root, ckpt::StepDirName(meta.step));
  const auto deadline = Clock::now() + std::chrono::duration<double>(options_.flush_timeout_s);
  bool mine_pending = via_daemon;
  FT_ASSIGN_OR_RETURN(std::string s3, ckpt::StagedS3Root(options_.root, options_.env));
  const bool staged = !s3.empty();
  for (;;) {
    bool failed = false;
    if (mine_pending) {
      auto st = QueryDaemon();  // drops the daemon if it does not answer
      if (!st.has_value()) {
        failed = true;
        mine_pending = false;
      } else if (st->in_flight == 0) {
        failed = st->last_persisted_step < meta.step;
        if (failed)
          FT_LOG(Error) << "ckptd could not persist step " << step_s << ": " << st->last_error;
        mine_pending = false;
      }
    }
    // ckpt.root = s3://...: committed once S3 holds it (S3_LATEST), not once staged.
    const bool committed = staged ? ckpt::StagedS3Latest(options_.root, options_.env) >= meta.step
                                  : options_.env->IsDirectory(final_dir);
    const bool late = options_.rank == 0 && Clock::now() > deadline;
    double w[3] = {committed ? 0.0 : 1.0, failed ? 1.0 : 0.0, late ? 1.0 : 0.0};
    FT_RETURN_IF_ERROR(ReduceMax(w, 3));
    if (w[0] == 0) return Status::Ok();
    if (w[2] != 0) {
      return Status::DeadlineExceeded("step " + step_s + " was not committed within " +
                                      std::to_string(options_.flush_timeout_s) +
                                      " s (ckpt.flush_timeout_s); see `ckptctl status " +
                                      options_.run_dir + "`");
    }
    if (w[1] != 0) {
      Status s;
      bool c = false;
      const auto until = std::chrono::time_point_cast<Clock::duration>(deadline);
      if (failed && staged && options_.env->IsDirectory(final_dir)) {
        // Committed in the staging root, not on S3 (ckptd's upload failed): only the upload
        // is left, and a rewrite of the shard would be refused there.
        FT_LOG(Warning) << "rank " << options_.rank << " uploads step " << step_s << " to " << s3
                        << " itself";
        s = ckpt::CommitStagedRetrying(options_.root, meta.step, options_.keep,
                                       UntilDeadline(until), options_.env);
      } else if (failed) {
        FT_LOG(Warning) << "rank " << options_.rank << " rewrites its shard of step " << step_s
                        << " synchronously";
        s = RetryS3Outage(SaveSync(meta, contents, &c), options_.root, meta.step, options_.keep,
                          until, options_.env);
      }
      double x[1] = {s.ok() ? 0.0 : 1.0};
      FT_RETURN_IF_ERROR(ReduceMax(x, 1));
      if (!s.ok()) return s;
      if (x[0] != 0)
        return Status::IOError("step " + step_s + ": a synchronous rewrite failed on another rank");
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

StatusOr<SaveOutcome> CheckpointSink::Save(const ckpt::CheckpointMeta& meta,
                                           const ckpt::ShardContents& contents, bool durable) {
  const auto t0 = Clock::now();
  const std::string step_s = std::to_string(meta.step);
  // Before any snapshot begins: the host has synchronised with the device since the last
  // collective (the optimizer step read the gradient norm), so a failed group shows here.
  // It is also this rank's vote below: with one failed group anywhere, no rank saves.
  Status health = CommHealth();
  const bool comm_failed = !health.ok();
  if (!comm_failed && options_.state_check) health = options_.state_check();
  if (!health.ok()) {
    if (pending_ && comm_failed) DropPending(health);
    double v[5] = {0, 0, 0, 0, 1.0};
    FT_RETURN_IF_ERROR(ReduceMax(v, 5));
    return health.Annotate("checkpoint of step " + step_s + " refused");
  }
  FinishPending();  // an earlier step's snapshot goes to the daemon first
  if (client_ == nullptr && options_.daemon != DaemonMode::kOff && had_daemon_) {
    TryConnect(/*quiet=*/true);  // the node agent may have restarted it
  }
  if (client_ != nullptr) {
    // Failures of earlier asynchronous writes surface here, loudly, once each.
    auto st = QueryDaemon();
    if (st.has_value() && st->last_failed_step > reported_failed_step_) {
      reported_failed_step_ = st->last_failed_step;
      FT_LOG(Error) << "CHECKPOINT FAILED in ckptd at step " << st->last_failed_step << ": "
                    << st->last_error << " (older checkpoints are intact; training continues and "
                    << "this checkpoint, step " << step_s << ", tries again)";
    }
  }
  bool via_daemon = false, deferred = false;
  if (client_ != nullptr && !durable && options_.device != nullptr &&
      ckpt::HasDeviceTensors(contents)) {
    // GPU: the device -> host copy runs on a side stream while the next step's forward and
    // backward compute; its optimizer step waits for it (BeforeStateChanges), and the
    // snapshot is submitted after that step (FinishPending).
    auto begun = client_->BeginSubmit(meta, contents, options_.flush_timeout_s);
    if (begun.ok()) {
      pending_ = std::move(*begun);
      pending_step_ = meta.step;
      via_daemon = deferred = true;
    } else {
      DropDaemon("handing over step " + step_s + ": " + begun.status().message());
    }
  } else if (client_ != nullptr) {
    auto sub = client_->Submit(meta, contents, options_.flush_timeout_s);
    if (sub.ok()) {
      via_daemon = true;
    } else {
      DropDaemon("handing over step " + step_s + ": " + sub.status().message());
    }
  }
  Status local;
  bool committed_here = false;
  if (!via_daemon) local = SaveSync(meta, contents, &committed_here);
  if (!via_daemon && durable && !local.ok()) {
    const auto deadline = t0 + std::chrono::duration<double>(options_.flush_timeout_s);
    local = RetryS3Outage(local, options_.root, meta.step, options_.keep,
                          std::chrono::time_point_cast<Clock::duration>(deadline), options_.env);
    committed_here = local.ok();  // S3 holds it: the file-system commit came first
  }
  double v[5] = {local.ok() ? 0.0 : 1.0, via_daemon ? 1.0 : 0.0, committed_here ? 1.0 : 0.0,
                 Since(t0), 0.0};
  FT_RETURN_IF_ERROR(ReduceMax(v, 5));
  if (v[4] != 0) {
    // Whatever this rank handed over stays uncommitted: the failed rank writes no shard.
    if (pending_) DropPending(Status::Unavailable("another rank's communicator failed"));
    return Status::Unavailable("checkpoint of step " + step_s +
                               " refused: a communicator failed on another rank (see its log); "
                               "the state may hold partially reduced values");
  }
  if (!local.ok()) return local;
  if (v[0] != 0) {
    return Status::IOError("checkpoint of step " + step_s +
                           " failed on another rank (see its log)");
  }
  SaveOutcome out;
  out.via_daemon = v[1] != 0;
  out.deferred = deferred;
  out.stall_s = v[3];
  if (!out.via_daemon) {
    if (v[2] == 0)
      return Status::Internal("every shard of step " + step_s +
                              " was written but no rank committed it");
    out.durable = true;
    return out;
  }
  if (!durable) return out;

  FT_RETURN_IF_ERROR(WaitUntilCommitted(meta, contents, via_daemon));
  out.durable = true;
  out.stall_s = Since(t0);
  return out;
}

StatusOr<ckpt::CkptdClient::PeerFetch> CheckpointSink::FetchFromPeer(int64_t step) {
  if (client_ == nullptr) return ckpt::CkptdClient::PeerFetch();
  return client_->FetchFromPeer(step, "", options_.flush_timeout_s);
}

StatusOr<std::optional<ckpt::CkptdClient::MemorySnapshot>> CheckpointSink::MemorySnapshot(
    int64_t step) {
  if (client_ == nullptr) return std::optional<ckpt::CkptdClient::MemorySnapshot>();
  return client_->Restore(step);
}

std::string CheckpointSink::MemorySlotProblem() {
  if (client_ == nullptr) return "no checkpoint daemon on this node";
  auto st = QueryDaemon();  // drops the daemon if it does not answer
  if (!st.has_value()) return "the checkpoint daemon does not answer";
  if (st->in_flight >= static_cast<int64_t>(client_->slot_count())) {
    return "all " + std::to_string(client_->slot_count()) +
           " slots of this rank are still being written (raise ckptd --slots-per-rank)";
  }
  return "";
}

StatusOr<SaveOutcome> CheckpointSink::SaveMemory(const ckpt::CheckpointMeta& meta,
                                                 const ckpt::ShardContents& contents) {
  const auto t0 = Clock::now();
  FT_RETURN_IF_ERROR(CommHealth());
  FinishPending();  // an earlier snapshot goes to the daemon first
  const std::string problem = MemorySlotProblem();
  if (!problem.empty()) return Status::Unavailable(problem);
  SaveOutcome out;
  out.via_daemon = true;
  auto begun = client_->BeginSubmit(meta, contents, options_.flush_timeout_s);
  if (!begun.ok()) {
    DropDaemon("memory snapshot of step " + std::to_string(meta.step) + ": " +
               begun.status().message());
    return begun.status();
  }
  begun->submit.memory_only = true;
  if (options_.device != nullptr && ckpt::HasDeviceTensors(contents)) {
    // GPU: as Save's deferred path; the copy overlaps the next forward and backward.
    pending_ = std::move(*begun);
    pending_step_ = meta.step;
    out.deferred = true;
  } else {
    auto sub = client_->FinishSubmit(std::move(*begun));
    if (!sub.ok()) {
      DropDaemon("memory snapshot of step " + std::to_string(meta.step) + ": " +
                 sub.status().message());
      return sub.status();
    }
  }
  out.stall_s = Since(t0);
  return out;
}

std::map<int64_t, uint64_t> CheckpointSink::MemoryHeldTwice() {
  std::map<int64_t, uint64_t> out;
  if (client_ == nullptr) return out;
  auto text = client_->StatusJson();
  if (!text.ok()) return out;  // not held as far as we know; the next save drops the daemon
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return out;
  for (const auto& r : j.value("ranks", nlohmann::json::array())) {
    if (r.value("rank", -1) != options_.rank) continue;
    for (const auto& m : r.value("memory_snapshots", nlohmann::json::array())) {
      if (!m.value("at_buddy", false)) continue;
      out[m.value("step", int64_t{-1})] =
          std::strtoull(m.value("digest", std::string("0")).c_str(), nullptr, 16);
    }
  }
  return out;
}

}  // namespace ftrain::train
