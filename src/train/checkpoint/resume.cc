// The resume policy: which checkpoint a start resumes from (train.resume: auto, none or a
// path), whether this run may resume it (config, code and data versions; another device or
// library only warns), where each rank's bytes come from (ckptd memory, a peer's memory,
// disk), the fallback past a damaged checkpoint, and the restarts.jsonl records of it.
// Collective over the world; the loop calls Resume() once per start.
#include "train/checkpoint/resume.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "ckpt/filename.h"
#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "comm/context.h"
#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "core/version.h"
#include "records/json_lines.h"
#include "records/restarts.h"
#include "train/checkpoint/memory_restore.h"
#include "train/verdicts/resume_verdict.h"

namespace ftrain::train {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Rank 0 picks what to resume from and broadcasts the step (-1: start fresh). When the root
// or a checkpoint newer than the newest complete one cannot be read (an outage), `*outage`
// says so (with rank 0's message) and nothing is chosen: the caller waits and asks again.
StatusOr<int64_t> ChooseResumeStep(const TrainConfig& cfg, comm::DistContext& ctx, Env* env,
                                   std::string* dir, std::string* outage) {
  int64_t step = -1;
  Status decision;
  outage->clear();
  if (ctx.world().rank == 0) {
    ckpt::CheckpointStore store(cfg.ckpt.root, env);
    Status rec = store.Recover();
    if (!rec.ok()) FT_LOG(Warning) << "checkpoint recovery: " << rec.message();
    // No writer of this root is alive at a job start (one job per root), so what recovery
    // could not finish is abandoned; a rewrite of the same step must start clean.
    auto removed = store.RemoveAbandonedPartials();
    if (removed.ok()) {
      for (const auto& p : *removed) FT_LOG(Info) << "removed abandoned partial checkpoint " << p;
    }
    const std::string& r = cfg.train.resume;
    if (r == "none") {
      FT_LOG(Info) << "resume: train.resume = none: starting fresh";
    } else if (r == "auto") {
      auto latest = store.Latest();
      if (!latest.ok()) {
        decision = latest.status();
      } else if (!latest->has_value() && !env->ListDir(cfg.ckpt.root).ok()) {
        // This start made the root a moment ago: a root that does not list now is storage
        // that does not answer (or lies: an NFS negative entry), not a fresh run.
        decision = Status::StorageUnavailable("the checkpoint root '" + cfg.ckpt.root +
                                              "' cannot be listed");
      } else if (!latest->has_value()) {
        FT_LOG(Info) << "resume: no complete checkpoint in " << cfg.ckpt.root << ": starting fresh";
      } else {
        step = (*latest)->step;
        FT_LOG(Info) << "resume: newest complete checkpoint is " << (*latest)->path;
      }
      // A newer step-N whose manifest was read and does not parse is not a checkpoint; move
      // it aside so that the step can be written again (and the evidence is kept). One that
      // could not be read at all stays where it is (Latest() then reports an outage).
      auto all =
          decision.ok()
              ? store.List()
              : StatusOr<std::vector<ckpt::CheckpointInfo>>(std::vector<ckpt::CheckpointInfo>());
      for (const auto& i : all.ok() ? *all : std::vector<ckpt::CheckpointInfo>()) {
        if (i.status != ckpt::CheckpointStatus::kUnreadable || i.unavailable || i.is_symlink ||
            i.step <= step) {
          continue;
        }
        auto moved = store.MarkCorrupt(i.step);
        FT_LOG(Error) << "resume: " << i.path << " is unreadable (" << i.problem << "); "
                      << (moved.ok() ? "moved aside as " + *moved
                                     : "cannot move it aside: " + moved.status().message());
      }
    } else {
      ckpt::Manifest m;
      ckpt::CheckpointStore parent(Dirname(r), env);
      Status s = parent.CheckComplete(r, &m);
      struct stat st {};
      const bool no_such_dir = ::stat(r.c_str(), &st) != 0 && errno == ENOENT;
      if (!s.ok() && !s.IsCorruption() && !s.IsInvalidArgument() && !no_such_dir) {
        decision = Status::StorageUnavailable("train.resume = '" + r + "': " + s.message());
      } else if (!s.ok() || ckpt::ParseRootEntry(Basename(r)).kind != ckpt::EntryKind::kComplete) {
        decision =
            Status::InvalidArgument("train.resume = '" + r + "' is not a complete checkpoint: " +
                                    (s.ok() ? "not a step-NNNNNNNN directory" : s.message()));
      } else {
        step = m.meta.step;
        FT_LOG(Info) << "resume: from " << r << " (train.resume)";
      }
    }
  }
  // An I/O error while choosing is an outage (retried), not a reason to start fresh.
  const bool unreadable = decision.IsStorageUnavailable() ||
                          decision.code() == Status::Code::kIOError || decision.IsNotFound();
  if (unreadable) *outage = decision.message();
  // Broadcast (step, 0 ok / 1 refused / 2 outage) so that every rank acts together.
  torch::Tensor t = torch::tensor(
      {static_cast<double>(step), decision.ok() ? 0.0 : (unreadable ? 2.0 : 1.0)}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(t, 0)->Wait());
  if (t[1].item<double>() == 2) {
    if (outage->empty()) *outage = "rank 0 cannot read the checkpoint root (see its log)";
    return int64_t{-1};
  }
  if (t[1].item<double>() != 0) {
    if (!decision.ok()) return decision;
    return Status::InvalidArgument("rank 0 refused to resume (see its log)");
  }
  step = static_cast<int64_t>(t[0].item<double>());
  if (step >= 0) {
    *dir = cfg.train.resume == "auto" || cfg.train.resume == "none"
               ? JoinPath(cfg.ckpt.root, ckpt::StepDirName(step))
               : cfg.train.resume;
  }
  return step;
}

Status CheckResumeCompatible(const TrainConfig& cfg, const ckpt::Manifest& m,
                             const std::string& data_version, int world_size,
                             const nlohmann::json& hardware) {
  std::vector<std::string> problems;
  if (m.meta.config_hash != cfg.ConfigHash()) {
    problems.push_back("config hash " + m.meta.config_hash + " != " + cfg.ConfigHash() +
                       " (model/optimizer/schedule settings changed)");
  }
  if (m.meta.code_version != CodeVersion()) {
    problems.push_back("code version " + m.meta.code_version + " != " + CodeVersion());
  }
  if (m.meta.data_version != data_version) {
    problems.push_back("data version " + m.meta.data_version + " != " + data_version);
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    if (!cfg.train.allow_resume_mismatch) {
      return Status::InvalidArgument("refusing to resume from step " + std::to_string(m.meta.step) +
                                     ": " + all +
                                     "; set train.allow_resume_mismatch=true to resume anyway, or "
                                     "train.resume=none to start fresh");
    }
    FT_LOG(Warning) << "resume despite mismatch (train.allow_resume_mismatch): " << all;
  }
  // Where it was written: another device kind, GPU model or LibTorch resumes, but the bits
  // of the continued run are not promised to match an uninterrupted one.
  const nlohmann::json written = nlohmann::json::parse(m.meta.layout_json, nullptr, false);
  if (written.is_object()) {
    const std::string was = written.contains("device") && written["device"].is_string()
                                ? written["device"].get<std::string>()
                                : std::string("cpu");
    const std::string torch_was = written.contains("torch") && written["torch"].is_string()
                                      ? written["torch"].get<std::string>()
                                      : std::string("?");
    if (was != DeviceName(cfg.train.device) || torch_was != TORCH_VERSION) {
      FT_LOG(Warning) << "resume: checkpoint step " << m.meta.step << " was written on " << was
                      << " with LibTorch " << torch_was << "; this run trains on "
                      << DeviceName(cfg.train.device) << " with LibTorch " << TORCH_VERSION
                      << ": it resumes, but bit-exactness with an uninterrupted run is not "
                         "promised across devices or libraries";
    } else if (written.contains("hardware") && written["hardware"].is_object()) {
      // Same device kind: the GPU model, SM count and the math libraries decide the bits too.
      std::string changed;
      for (const auto& [key, now] : hardware.items()) {
        const auto it = written["hardware"].find(key);
        const std::string then = it != written["hardware"].end() && it->is_string()
                                     ? it->get<std::string>()
                                     : std::string("?");
        if (then != now.get<std::string>()) {
          changed +=
              (changed.empty() ? "" : ", ") + key + " " + then + " -> " + now.get<std::string>();
        }
      }
      if (!changed.empty()) {
        FT_LOG(Warning) << "resume: checkpoint step " << m.meta.step
                        << " was written on other hardware or libraries (" << changed
                        << "): it resumes, but bit-exactness with an uninterrupted run is not "
                           "promised";
      }
    }
  }
  if (m.meta.world_size != world_size && cfg.dist.exact_reduce) {
    FT_LOG(Info) << "resume: checkpoint was written by " << m.meta.world_size
                 << " ranks, this run has " << world_size
                 << ": resharding; dist.reduce = exact keeps the run bit-identical to one that "
                    "never changed size";
  } else if (m.meta.world_size != world_size) {
    FT_LOG(Warning) << "resume: checkpoint was written by " << m.meta.world_size
                    << " ranks, this run has " << world_size
                    << ": resharding; the run is no longer bit-comparable";
  }
  return Status::Ok();
}

// Where one rank's resumed bytes came from (restarts.jsonl's `resumed` record sums them).
struct RestoreSources {
  uint64_t from_memory = 0;  // bytes taken from ckptd memory (the local or a fetched snapshot)
  uint64_t from_peer = 0;    // of which fetched from a peer daemon's memory first
  double peer_s = 0;         // how long that fetch took
  double load_s = 0;         // the whole load of this rank
};

// Restore from a peer: when this node's daemon has no snapshot of `step` for this rank (a
// replacement node after a node failure), it may pull one from the memory of a peer daemon
// that holds a replica (buddy replication). Any failure just means: read from disk.
void FetchFromPeerIfMissing(const comm::WorldInfo& world, CheckpointSink& sink, int64_t step,
                            std::optional<ckpt::CkptdClient::MemorySnapshot>* snap,
                            RestoreSources* src) {
  if (snap->has_value() && (*snap)->submit.meta.step == step) return;
  auto f = sink.FetchFromPeer(step);
  if (!f.ok()) {
    FT_LOG(Debug) << "resume: no fetch from a peer: " << f.status().message();
    return;
  }
  if (!f->found) {
    if (!f->detail.empty())
      FT_LOG(Info) << "resume: no peer holds step " << step << ": " << f->detail;
    return;
  }
  FT_LOG(Info) << "resume: rank " << world.rank << " fetched step " << step << " from " << f->source
               << ": " << f->bytes << " bytes in " << f->seconds << " s (" << f->mb_per_s()
               << " MB/s)";
  auto again = sink.MemorySnapshot(step);
  if (!again.ok() || !again->has_value()) return;
  *snap = std::move(*again);
  src->from_peer = f->bytes;
  src->peer_s = f->seconds;
}

// Loads `dir` (step `step`) into the engine and run state on this rank: from this node's
// ckptd memory where it provably holds the same bytes, the rest from disk; every byte is
// checked against the manifest's hashes as it is read. `*src`: where this rank's bytes came
// from (all zero: all from disk).
Status LoadOne(const TrainConfig& cfg, const comm::WorldInfo& world, CheckpointSink& sink,
               const std::string& data_version, const nlohmann::json& hardware,
               const std::string& dir, int64_t step, fsdp::FsdpEngine& engine, RunState* state,
               RestoreSources* src) {
  *src = RestoreSources();
  const auto t0 = Clock::now();
  FT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointReader> reader,
                      ckpt::CheckpointReader::Open(dir, sink.env()));
  FT_RETURN_IF_ERROR(
      CheckResumeCompatible(cfg, reader->manifest(), data_version, world.world_size, hardware));
  // Restore from memory: the daemon of this node may still hold this rank's snapshot of
  // exactly this checkpoint (in-job restart after a process crash); a node failure or any
  // doubt falls back to disk, piece by piece (LoadCheckpoint checks every hash).
  std::optional<ckpt::CkptdClient::MemorySnapshot> snap;
  MemorySource memory;
  if (cfg.ckpt.restore_from_memory) {
    auto s = sink.MemorySnapshot(step);
    if (!s.ok()) {
      FT_LOG(Warning) << "resume: cannot ask ckptd for its in-memory snapshot: "
                      << s.status().message() << "; reading from disk";
    } else if (s->has_value()) {
      snap = std::move(*s);
    }
    FetchFromPeerIfMissing(world, sink, step, &snap, src);
    if (snap.has_value()) {
      const auto& meta = snap->submit.meta;
      if (meta.step == step && meta.world_size == world.world_size &&
          meta.config_hash == reader->manifest().meta.config_hash) {
        memory.snapshot = &snap->submit;
        memory.base = snap->base;
      } else {
        FT_LOG(Info) << "resume: ckptd holds step " << meta.step << " in memory, not step " << step
                     << ": reading from disk";
      }
    }
  }
  FT_RETURN_IF_ERROR(LoadCheckpoint(*reader, world.rank, world.world_size, engine, state,
                                    memory.snapshot != nullptr ? &memory : nullptr));
  if (memory.snapshot != nullptr) {
    src->from_memory = memory.bytes_from_memory;
    if (memory.bytes_from_memory == 0) src->from_peer = 0;  // fetched, but it did not match
    FT_LOG(Info) << "resume: rank " << world.rank << " restored " << memory.bytes_from_memory
                 << " bytes from ckptd memory and " << memory.bytes_from_disk << " from disk (step "
                 << step << ")"
                 << (memory.mismatched > 0 ? "; " + std::to_string(memory.mismatched) +
                                                 " in-memory pieces did not match the manifest"
                                           : std::string());
  }
  src->load_s = Seconds(t0, Clock::now());
  return Status::Ok();
}

// Reads `path` to its end, discarding the bytes: an I/O error or a missing file is a Status.
Status ReadThrough(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("open '" + path + "': " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  Status s;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = Status::IOError("read '" + path + "': " + std::strerror(errno));
      break;
    }
  }
  ::close(fd);  // read-only: nothing to lose on close
  return s;
}

// Whether what this rank read of checkpoint `dir` reads back in full right now: the manifest
// and this rank's shards (every shard when the world size changed). A load that reported a
// Corruption is damage only if it does: HDF5 reports an I/O error while opening a file as a
// format error, and an outage must never set a good checkpoint aside.
bool RereadsInFull(const std::string& dir, int rank, int world_size, Env* env) {
  const std::string manifest_path = JoinPath(dir, "manifest.json");
  std::string text;
  if (!env->ReadFile(manifest_path, &text).ok()) return false;
  auto m = ckpt::Manifest::FromJson(text, manifest_path);
  if (!m.ok()) return true;  // read in full, and wrong: damage
  for (const auto& f : m->files) {
    if (m->meta.world_size == world_size && f.rank != rank) continue;
    Status s = ReadThrough(JoinPath(dir, f.path));
    if (!s.ok()) {
      FT_LOG(Warning) << "resume: " << s.message() << ": an outage, not damage";
      return false;
    }
  }
  return true;
}

// Where the resumed state came from, for `ftrain report` (collective): a `resumed` record in
// restarts.jsonl by rank 0: disk, or how many ranks took how many bytes from ckptd memory and
// how many of those fetched their snapshot from a peer's memory first; restore_s is the
// slowest rank's load.
Status RecordResume(const TrainConfig& cfg, const records::LaunchContext& launch,
                    comm::DistContext& ctx, int64_t step, const std::string& dir,
                    const RestoreSources& src, const MemoryRestore& mem, Env* env) {
  torch::Tensor sum =
      torch::tensor({static_cast<double>(src.from_memory), src.from_memory > 0 ? 1.0 : 0.0,
                     static_cast<double>(src.from_peer), src.from_peer > 0 ? 1.0 : 0.0},
                    torch::kFloat64);
  torch::Tensor slowest = torch::tensor({src.load_s, src.peer_s}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(sum, comm::ReduceOp::kSum)->Wait());
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(slowest, comm::ReduceOp::kMax)->Wait());
  if (ctx.world().rank != 0) return Status::Ok();
  const int64_t ranks = static_cast<int64_t>(sum[1].item<double>());
  // A memory-tier restore fetched from the peers before the load (memory_restore.h): the load
  // then found those snapshots in this node's daemon.
  const int64_t peer_ranks = std::max<int64_t>(static_cast<int64_t>(sum[3].item<double>()),
                                               mem.step == step ? mem.ranks_from_peer : 0);
  std::string source = "disk";
  if (ranks > 0) {
    char buf[240];
    std::snprintf(buf, sizeof(buf), "ckptd memory on %lld of %d ranks (%.1f MB",
                  static_cast<long long>(ranks), ctx.world().world_size,
                  sum[0].item<double>() / 1e6);
    source = buf;
    if (peer_ranks > 0) {
      std::snprintf(buf, sizeof(buf), ", of which %lld ranks fetched from a peer's memory",
                    static_cast<long long>(peer_ranks));
      source += buf;
    }
    source += "; the rest from disk)";
  }
  // The tier: memory when the step was restorable only from the daemons' memory (recorded in
  // MEMORY_TIER.json, newer than every disk checkpoint); else disk.
  const bool memory_tier = mem.step >= 0 && mem.step == step;
  if (memory_tier) source = "memory tier (step " + std::to_string(step) + "): " + source;
  nlohmann::json rec = {
      {"time",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"event", "resumed"},
      {"cause", "resume"},
      {"step", step},
      {"dir", dir},
      {"source", source},
      {"ranks_from_memory", ranks},
      {"ranks_from_peer", peer_ranks},
      {"bytes_from_peer", sum[2].item<double>()},
      {"peer_fetch_s", slowest[1].item<double>()},
      {"restore_s", slowest[0].item<double>()},
      {"tier", memory_tier ? "memory" : "disk"}};
  if (mem.recorded >= 0) rec["memory_recorded_step"] = mem.recorded;
  if (!mem.why_not.empty()) rec["memory_fallback"] = mem.why_not;
  if (!launch.job_id.empty()) rec["job"] = launch.job_id;
  Status w = records::AppendForThisProcess(RunLayout(cfg.run_dir), launch, rec.dump(), env);
  // The record only informs the report; training goes on without it.
  if (!w.ok()) FT_LOG(Warning) << "resume: cannot record the resume: " << w.message();
  return Status::Ok();
}

void LogMemoryTier(const comm::WorldInfo& world, const MemoryRestore& mem, int64_t disk_step) {
  if (world.rank != 0 || mem.recorded < 0) return;
  if (mem.step >= 0) {
    FT_LOG(Info) << "resume: memory tier: step " << mem.step
                 << " restored from the daemons' memory (the newest disk checkpoint is step "
                 << disk_step << "; " << mem.ranks_from_peer << " ranks fetched from a peer; "
                 << mem.seconds << " s, written out as a checkpoint)";
  } else {
    FT_LOG(Warning) << "resume: memory tier: step " << mem.recorded
                    << " was restorable from memory, but " << mem.why_not
                    << "; FALLING BACK to the disk tier (step " << disk_step << ")";
  }
}

// The waits of one start's resume for storage that does not answer (ckpt.resume_retry_s).
class StorageWait {
 public:
  StorageWait(double retry_s, Env* env) : retry_s_(retry_s), env_(env), start_(NowSeconds(env)) {}
  Env* env() const { return env_; }
  double waited() const { return NowSeconds(env_) - start_; }
  bool expired() const { return waited() >= retry_s_; }
  // Logs (rank 0) and sleeps before the next try; the give-up once the time is spent.
  Status Next(int rank, const std::string& what, bool expired) {
    if (expired) return Status::StorageUnavailable(GiveUpMessage(what, waited(), retry_s_));
    tries_ += 1;
    const double wait = RetryWaitSeconds(tries_, retry_s_ - waited());
    if (rank == 0) {
      FT_LOG(Warning) << "resume: the checkpoint storage cannot be read (" << what
                      << "): an outage, not damage; nothing is moved aside; trying again in "
                      << wait << " s (try " << tries_ << ", " << static_cast<int>(waited())
                      << " of ckpt.resume_retry_s = " << retry_s_ << " s used)";
    }
    env_->SleepForMicroseconds(static_cast<int64_t>(wait * 1e6));
    return Status::Ok();
  }

 private:
  double retry_s_;
  Env* env_;  // the clock the waits are measured and slept on
  double start_;
  int tries_ = 0;
};

// Every rank's outcome of one load, combined (collective): what the world does next.
StatusOr<ResumeStep> VoteOnLoad(const TrainConfig& cfg, comm::DistContext& ctx,
                                const Status& loaded, const std::string& dir,
                                const StorageWait& wait) {
  const comm::WorldInfo& world = ctx.world();
  const bool rereads =
      loaded.IsCorruption() && RereadsInFull(dir, world.rank, world.world_size, wait.env());
  const LoadOutcome o = ClassifyLoad(loaded, rereads);
  torch::Tensor vote = torch::tensor(
      {o == LoadOutcome::kDamaged ? 1.0 : 0.0, o == LoadOutcome::kUnreadable ? 1.0 : 0.0,
       o == LoadOutcome::kRefused ? 1.0 : 0.0, wait.expired() ? 1.0 : 0.0},
      torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(vote, comm::ReduceOp::kMax)->Wait());
  return DecideResume(vote[0].item<double>() != 0, vote[1].item<double>() != 0,
                      vote[2].item<double>() != 0, vote[3].item<double>() != 0,
                      cfg.train.resume != "auto");
}

// Rank 0 moves a checkpoint that failed verification aside (kept as evidence) and records it.
void SetAside(const TrainConfig& cfg, const records::LaunchContext& launch, int64_t step,
              const std::string& dir, const Status& loaded, Env* env) {
  ckpt::CheckpointStore store(cfg.ckpt.root, env);
  auto moved = store.MarkCorrupt(step);
  const std::string why =
      loaded.ok() ? "another rank failed to load it (see its log)" : loaded.message();
  if (!moved.ok()) {
    FT_LOG(Error) << "resume: cannot set aside the damaged " << dir << ": "
                  << moved.status().message();
    return;
  }
  FT_LOG(Error) << "resume: checkpoint step " << step << " FAILED verification (" << why
                << "); moved aside as " << *moved
                << " (kept as evidence, never deleted automatically); trying the next older "
                   "checkpoint";
  nlohmann::json rec = {
      {"time",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"event", "fell_back"},
      {"cause", "corrupt_checkpoint"},
      {"step", step},
      {"moved_to", *moved},
      {"problem", why}};
  if (!launch.job_id.empty()) rec["job"] = launch.job_id;
  Status w = records::AppendForThisProcess(RunLayout(cfg.run_dir), launch, rec.dump(), env);
  if (!w.ok()) FT_LOG(Warning) << "resume: cannot record the fallback: " << w.message();
}

}  // namespace

StatusOr<int64_t> Resume(const TrainConfig& cfg, comm::DistContext& ctx, CheckpointSink& sink,
                         const std::string& data_version, const nlohmann::json& hardware,
                         fsdp::FsdpEngine& engine, RunState* state, std::string* dir,
                         const records::LaunchContext& launch, const std::string& generation) {
  const comm::WorldInfo& world = ctx.world();
  MemoryRestore mem;
  bool memory_tried = cfg.train.resume != "auto" || !cfg.ckpt.restore_from_memory;
  StorageWait wait(cfg.ckpt.resume_retry_s, sink.env());
  for (;;) {
    *state = RunState();
    std::string outage;
    FT_ASSIGN_OR_RETURN(int64_t step, ChooseResumeStep(cfg, ctx, sink.env(), dir, &outage));
    if (!outage.empty()) {
      FT_RETURN_IF_ERROR(wait.Next(world.rank, outage, wait.expired()));
      continue;
    }
    if (!memory_tried) {
      // Once per start, after rank 0's recovery: a newer step restorable from memory becomes
      // a committed checkpoint, which the next choice then takes.
      memory_tried = true;
      FT_ASSIGN_OR_RETURN(mem, RestoreMemoryTier(cfg, ctx, sink, generation, step));
      LogMemoryTier(world, mem, step);
      if (mem.step > step) continue;
    }
    if (step < 0) return step;
    RestoreSources src;
    Status loaded =
        LoadOne(cfg, world, sink, data_version, hardware, *dir, step, engine, state, &src);
    if (!loaded.ok()) {
      FT_LOG(Error) << "resume: rank " << world.rank << " cannot load " << *dir << ": "
                    << loaded.message();
    }
    FT_ASSIGN_OR_RETURN(ResumeStep next, VoteOnLoad(cfg, ctx, loaded, *dir, wait));
    switch (next) {
      case ResumeStep::kResume:
        state->restarts += 1;
        FT_LOG(Info) << "resume: restored step " << state->step << " from " << *dir << " (restart "
                     << state->restarts << ", every byte verified)";
        FT_RETURN_IF_ERROR(RecordResume(cfg, launch, ctx, step, *dir, src, mem, sink.env()));
        return step;
      case ResumeStep::kFail:
        if (!loaded.ok()) return loaded;
        return Status::FailedPrecondition("another rank cannot load " + *dir + " (see its log)");
      case ResumeStep::kRetry:
      case ResumeStep::kGiveUp:
        FT_RETURN_IF_ERROR(wait.Next(world.rank, *dir + " (see the ranks' errors above)",
                                     next == ResumeStep::kGiveUp));
        continue;
      case ResumeStep::kFallBack:
        if (world.rank == 0) SetAside(cfg, launch, step, *dir, loaded, sink.env());
        // Everyone waits until the damaged checkpoint is out of the way before choosing again.
        FT_RETURN_IF_ERROR(ctx.control().Barrier()->Wait());
        continue;
    }
  }
}

}  // namespace ftrain::train
