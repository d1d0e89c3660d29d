// The training loop. One optimizer step reads like this:
//   for each of K micro-batches: next batch -> forward + backward (FSDP) -> accumulate
//   clip + AdamW (sharded) -> metrics -> maybe checkpoint (step boundary) -> maybe stop
#include "train/trainer.h"

#include <sys/stat.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ckpt/filename.h"
#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "comm/context.h"
#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "core/version.h"
#include "data/reader.h"
#include "fsdp/engine.h"
#include "fsdp/trace_range.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "records/restarts.h"
#include "train/base_model.h"
#include "train/checkpointer.h"
#include "train/checkpointing.h"
#include "train/device.h"
#include "train/device_memory.h"
#include "train/eval_loop.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/metrics_sinks.h"
#include "train/phase_clock.h"
#include "train/profiler.h"
#include "train/signals.h"

namespace ftrain::train {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string FormatEta(double s) {
  if (s < 0 || s > 1e7) return "--:--:--";
  char buf[32];
  const long t = static_cast<long>(s);
  std::snprintf(buf, sizeof(buf), "%02ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

// Rank 0 picks what to resume from and broadcasts the step (-1: start fresh).
StatusOr<int64_t> ChooseResumeStep(const TrainConfig& cfg, comm::DistContext& ctx,
                                   std::string* dir) {
  int64_t step = -1;
  Status decision;
  if (ctx.world().rank == 0) {
    ckpt::CheckpointStore store(cfg.ckpt.root);
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
      } else if (!latest->has_value()) {
        FT_LOG(Info) << "resume: no complete checkpoint in " << cfg.ckpt.root << ": starting fresh";
      } else {
        step = (*latest)->step;
        FT_LOG(Info) << "resume: newest complete checkpoint is " << (*latest)->path;
      }
      // A newer step-N whose manifest does not parse is not a checkpoint; move it aside so
      // that the step can be written again (and the evidence is kept).
      auto all = store.List();
      for (const auto& i : all.ok() ? *all : std::vector<ckpt::CheckpointInfo>()) {
        if (i.status != ckpt::CheckpointStatus::kUnreadable || i.is_symlink || i.step <= step) {
          continue;
        }
        auto moved = store.MarkCorrupt(i.step);
        FT_LOG(Error) << "resume: " << i.path << " is unreadable (" << i.problem << "); "
                      << (moved.ok() ? "moved aside as " + *moved
                                     : "cannot move it aside: " + moved.status().message());
      }
    } else {
      ckpt::Manifest m;
      ckpt::CheckpointStore parent(Dirname(r));
      Status s = parent.CheckComplete(r, &m);
      if (!s.ok() || ckpt::ParseRootEntry(Basename(r)).kind != ckpt::EntryKind::kComplete) {
        decision =
            Status::InvalidArgument("train.resume = '" + r + "' is not a complete checkpoint: " +
                                    (s.ok() ? "not a step-NNNNNNNN directory" : s.message()));
      } else {
        step = m.meta.step;
        FT_LOG(Info) << "resume: from " << r << " (train.resume)";
      }
    }
  }
  // Broadcast (step, ok) so that every rank fails or resumes together.
  torch::Tensor t =
      torch::tensor({static_cast<double>(step), decision.ok() ? 0.0 : 1.0}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(t, 0)->Wait());
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
  if (m.meta.world_size != world_size) {
    FT_LOG(Warning) << "resume: checkpoint was written by " << m.meta.world_size
                    << " ranks, this run has " << world_size
                    << ": resharding; the run is no longer bit-comparable";
  }
  return Status::Ok();
}

// Loads `dir` (step `step`) into the engine and run state on this rank: from this node's
// ckptd memory where it provably holds the same bytes, the rest from disk; every byte is
// checked against the manifest's hashes as it is read.
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
void FetchFromPeerIfMissing(const comm::WorldInfo& world, Checkpointer& checkpointer, int64_t step,
                            std::optional<ckpt::CkptdClient::MemorySnapshot>* snap,
                            RestoreSources* src) {
  if (snap->has_value() && (*snap)->submit.meta.step == step) return;
  auto f = checkpointer.FetchFromPeer(step);
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
  auto again = checkpointer.MemorySnapshot(step);
  if (!again.ok() || !again->has_value()) return;
  *snap = std::move(*again);
  src->from_peer = f->bytes;
  src->peer_s = f->seconds;
}

// `*src`: where this rank's bytes came from (all zero: all from disk).
Status LoadOne(const TrainConfig& cfg, const comm::WorldInfo& world, Checkpointer& checkpointer,
               const std::string& data_version, const nlohmann::json& hardware,
               const std::string& dir, int64_t step, fsdp::FsdpEngine& engine, RunState* state,
               RestoreSources* src) {
  *src = RestoreSources();
  const auto t0 = Clock::now();
  FT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointReader> reader,
                      ckpt::CheckpointReader::Open(dir));
  FT_RETURN_IF_ERROR(
      CheckResumeCompatible(cfg, reader->manifest(), data_version, world.world_size, hardware));
  // Restore from memory: the daemon of this node may still hold this rank's snapshot of
  // exactly this checkpoint (in-job restart after a process crash); a node failure or any
  // doubt falls back to disk, piece by piece (LoadCheckpoint checks every hash).
  std::optional<ckpt::CkptdClient::MemorySnapshot> snap;
  MemorySource memory;
  if (cfg.ckpt.restore_from_memory) {
    auto s = checkpointer.MemorySnapshot(step);
    if (!s.ok()) {
      FT_LOG(Warning) << "resume: cannot ask ckptd for its in-memory snapshot: "
                      << s.status().message() << "; reading from disk";
    } else if (s->has_value()) {
      snap = std::move(*s);
    }
    FetchFromPeerIfMissing(world, checkpointer, step, &snap, src);
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

// Rank 0's NewGeneration(), handed to every rank ("<15-digit ms>-<8 hex>", or under the job
// controller "e<15-digit lease epoch>-<8 hex>", sent negated: two doubles carry it exactly
// through the world's broadcast).
StatusOr<std::string> AgreeOnGeneration(comm::DistContext& ctx) {
  double ms = 0, rnd = 0;
  if (ctx.world().rank == 0) {
    const std::string g = ckpt::NewGeneration();
    const size_t at = g[0] == 'e' ? 1 : 0;
    ms = static_cast<double>(std::stoll(g.substr(at, 15))) * (at == 1 ? -1 : 1);
    rnd = static_cast<double>(std::stoul(g.substr(at + 16), nullptr, 16));
  }
  torch::Tensor t = torch::tensor({ms, rnd}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(t, 0)->Wait());
  const double first = t[0].item<double>();
  char buf[64];
  std::snprintf(buf, sizeof(buf), first < 0 ? "e%015lld-%08x" : "%015lld-%08x",
                static_cast<long long>(first < 0 ? -first : first),
                static_cast<unsigned>(t[1].item<double>()));
  return std::string(buf);
}

// Whether a failed load means the checkpoint itself is bad (set it aside, try an older one)
// rather than the configuration (a refused config hash, another model: fail the job).
bool IsDamage(const Status& s) {
  return s.IsCorruption() || s.IsNotFound() || s.code() == Status::Code::kIOError;
}

// Where the resumed state came from, for `ftrain report` (collective): a `resumed` record in
// restarts.jsonl by rank 0: disk, or how many ranks took how many bytes from ckptd memory and
// how many of those fetched their snapshot from a peer's memory first; restore_s is the
// slowest rank's load.
Status RecordResume(const TrainConfig& cfg, comm::DistContext& ctx, int64_t step,
                    const std::string& dir, const RestoreSources& src) {
  torch::Tensor sum =
      torch::tensor({static_cast<double>(src.from_memory), src.from_memory > 0 ? 1.0 : 0.0,
                     static_cast<double>(src.from_peer), src.from_peer > 0 ? 1.0 : 0.0},
                    torch::kFloat64);
  torch::Tensor slowest = torch::tensor({src.load_s, src.peer_s}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(sum, comm::ReduceOp::kSum)->Wait());
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(slowest, comm::ReduceOp::kMax)->Wait());
  if (ctx.world().rank != 0) return Status::Ok();
  const int64_t ranks = static_cast<int64_t>(sum[1].item<double>());
  const int64_t peer_ranks = static_cast<int64_t>(sum[3].item<double>());
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
      {"restore_s", slowest[0].item<double>()}};
  if (const char* job = std::getenv("SLURM_JOB_ID")) rec["job"] = job;
  Status w = records::AppendForThisProcess(RunLayout(cfg.run_dir), rec.dump());
  // The record only informs the report; training goes on without it.
  if (!w.ok()) FT_LOG(Warning) << "resume: cannot record the resume: " << w.message();
  return Status::Ok();
}

// Chooses and loads the checkpoint to resume from (collective). With train.resume = auto a
// checkpoint that fails to load or verify on any rank is moved aside as step-N.corrupt by
// rank 0 (logged, recorded in restarts.jsonl) and the next older complete one is tried, down
// to starting fresh; training is deterministic, so the run still ends bit-identical.
// Returns the resumed step, or -1 for a fresh start.
StatusOr<int64_t> Resume(const TrainConfig& cfg, comm::DistContext& ctx, Checkpointer& checkpointer,
                         const std::string& data_version, const nlohmann::json& hardware,
                         fsdp::FsdpEngine& engine, RunState* state, std::string* dir) {
  const comm::WorldInfo& world = ctx.world();
  for (;;) {
    *state = RunState();
    FT_ASSIGN_OR_RETURN(int64_t step, ChooseResumeStep(cfg, ctx, dir));
    if (step < 0) return step;
    RestoreSources src;
    Status loaded =
        LoadOne(cfg, world, checkpointer, data_version, hardware, *dir, step, engine, state, &src);
    if (!loaded.ok()) {
      FT_LOG(Error) << "resume: rank " << world.rank << " cannot load " << *dir << ": "
                    << loaded.message();
    }
    // Every rank learns whether any rank failed, and whether any failure was not damage.
    torch::Tensor vote = torch::tensor(
        {loaded.ok() ? 0.0 : 1.0, !loaded.ok() && !IsDamage(loaded) ? 1.0 : 0.0}, torch::kFloat64);
    FT_RETURN_IF_ERROR(ctx.control().AllReduce(vote, comm::ReduceOp::kMax)->Wait());
    const bool any_failed = vote[0].item<double>() != 0;
    const bool any_config = vote[1].item<double>() != 0;
    if (!any_failed) {
      state->restarts += 1;
      FT_LOG(Info) << "resume: restored step " << state->step << " from " << *dir << " (restart "
                   << state->restarts << ", every byte verified)";
      FT_RETURN_IF_ERROR(RecordResume(cfg, ctx, step, *dir, src));
      return step;
    }
    if (any_config || (cfg.train.resume != "auto")) {
      if (!loaded.ok()) return loaded;
      return Status::FailedPrecondition("another rank cannot load " + *dir + " (see its log)");
    }
    if (world.rank == 0) {
      ckpt::CheckpointStore store(cfg.ckpt.root);
      auto moved = store.MarkCorrupt(step);
      const std::string why =
          loaded.ok() ? "another rank failed to load it (see its log)" : loaded.message();
      if (!moved.ok()) {
        FT_LOG(Error) << "resume: cannot set aside the damaged " << *dir << ": "
                      << moved.status().message();
      } else {
        FT_LOG(Error) << "resume: checkpoint step " << step << " FAILED verification (" << why
                      << "); moved aside as " << *moved
                      << " (kept as evidence, never deleted automatically); trying the next "
                         "older checkpoint";
        nlohmann::json rec = {{"time", std::chrono::duration<double>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count()},
                              {"event", "fell_back"},
                              {"cause", "corrupt_checkpoint"},
                              {"step", step},
                              {"moved_to", *moved},
                              {"problem", why}};
        if (const char* job = std::getenv("SLURM_JOB_ID")) rec["job"] = job;
        Status w = records::AppendForThisProcess(RunLayout(cfg.run_dir), rec.dump());
        if (!w.ok()) FT_LOG(Warning) << "resume: cannot record the fallback: " << w.message();
      }
    }
    // Everyone waits until the damaged checkpoint is out of the way before choosing again.
    FT_RETURN_IF_ERROR(ctx.control().Barrier()->Wait());
  }
}

// The model and the FSDP engine over it. A random init is computed unit by unit while
// sharding (fsdp::FsdpConfig::init_seed); base weights (train.init) are read later, after the
// resume decided that they are needed, each rank reading only its own shards
// (LoadBaseWeights). Either way the model's own tensors are allocated but never written, so
// no rank holds the whole fp32 model.
StatusOr<std::unique_ptr<fsdp::FsdpEngine>> BuildEngine(const TrainConfig& cfg,
                                                        comm::DistContext& ctx,
                                                        const DeviceChoice& dev) {
  FT_ASSIGN_OR_RETURN(fsdp::Sharding sharding, fsdp::ParseSharding(cfg.dist.sharding));
  model::LlamaModel model(cfg.model);
  fsdp::FsdpConfig fc;
  if (cfg.train.init == "random") {
    fc.init_seed = static_cast<uint64_t>(cfg.train.seed);
  } else {
    fc.defer_init = true;
  }
  fc.sharding = sharding;
  auto dtype = [](Precision p) {
    return p == Precision::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
  };
  fc.param_dtype = dtype(cfg.train.param_dtype);
  fc.reduce_dtype = dtype(cfg.train.reduce_dtype);
  fc.activation_checkpointing = cfg.train.activation_checkpointing;
  fc.prefetch = cfg.train.prefetch;
  fc.device = dev.device;
  return fsdp::FsdpEngine::Create(
      model, fc, fsdp::GroupsFor(sharding, ctx.world_comm(), ctx.intra_node(), ctx.inter_node()));
}

// Where this rank's checkpoints go (ckpt.*): this node's ckptd if there is one, else
// synchronously through the library.
StatusOr<CheckpointerOptions> CheckpointerOptionsFor(const TrainConfig& cfg,
                                                     const comm::WorldInfo& world) {
  CheckpointerOptions co;
  co.daemon = cfg.ckpt.daemon;
  co.run_dir = cfg.run_dir;
  co.node = ckpt::proto::DefaultNodeId();
  co.root = cfg.ckpt.root;
  co.rank = world.rank;
  co.world = world.world_size;
  co.write.zstd_level = static_cast<int>(cfg.ckpt.zstd_level);
  co.write.shuffle = cfg.ckpt.shuffle;
  co.write.threads = static_cast<int>(cfg.ckpt.threads);
  co.keep = static_cast<int>(cfg.ckpt.keep);
  co.keep_every = static_cast<int>(cfg.ckpt.keep_every);
  co.flush_timeout_s = cfg.ckpt.flush_timeout_s;
  return co;
}

// The learning-rate schedule (train.lr*, warmup, linear scaling with the effective batch).
LrSchedule ScheduleFor(const TrainConfig& cfg, int64_t effective_batch) {
  LrSchedule sched;
  sched.peak_lr = cfg.train.lr_scale_with_batch
                      ? ScaleLrLinearly(cfg.train.lr, effective_batch, cfg.train.base_batch)
                      : cfg.train.lr;
  sched.min_lr = cfg.train.min_lr * sched.peak_lr / cfg.train.lr;
  sched.warmup_steps = cfg.train.warmup_steps;
  sched.total_steps = cfg.train.steps;
  return sched;
}

// One optimizer step's micro-batches: next batch, forward, backward (the engine reduces the
// gradients on the last). Tokens go up to a GPU from pinned memory without blocking.
struct MicroBatches {
  double loss_sum = 0;     // this rank's, over the K micro-batches
  double data_wait_s = 0;  // waiting for the reader
};
StatusOr<MicroBatches> RunMicroBatches(data::TokenReader& reader, fsdp::FsdpEngine& engine,
                                       int64_t K, const torch::Device& device) {
  MicroBatches out;
  for (int64_t k = 0; k < K; ++k) {
    auto td = Clock::now();
    FT_ASSIGN_OR_RETURN(data::Batch batch, reader.Next());
    out.data_wait_s += Seconds(td, Clock::now());
    torch::Tensor tokens =
        torch::from_blob(batch.tokens.data(), {batch.rows, batch.row_tokens}, torch::kInt32)
            .to(torch::kInt64);
    if (device.is_cuda()) {
      // The copy is ordered before the forward on the current stream.
      tokens = tokens.pin_memory().to(device, /*non_blocking=*/true);
    }
    FT_ASSIGN_OR_RETURN(float loss,
                        engine.ForwardBackward(tokens, 1.0 / static_cast<double>(K), k == K - 1));
    out.loss_sum += loss;
  }
  return out;
}

// What every rank must agree on at a step boundary, so that all checkpoint and stop at the
// same step: two small collectives on the control group, an all-reduce of the global loss
// (average) and an all-gather of the checkpoint/stop flags (max over the gathered rows; the
// time trigger is rank 0's clock, a stop any rank's signal) that carries every rank's step
// phases along (train/phase_clock.h), timed by the loss all-reduce's wait.
struct BoundaryDecision {
  double loss = 0;
  bool checkpoint = false;
  bool stop = false;
  bool final_step = false;
  std::vector<RankPhases> phases;  // every rank's, this step
};
StatusOr<BoundaryDecision> DecideAtBoundary(const TrainConfig& cfg, comm::DistContext& ctx,
                                            int64_t step, double local_loss, bool time_due,
                                            PhaseClock& clock) {
  const bool leader = ctx.world().rank == 0;
  torch::Tensor loss_t = torch::tensor({local_loss}, torch::kFloat64);
  const auto tw = Clock::now();
  {
    TraceRange range("ftrain/boundary all-reduce");
    FT_RETURN_IF_ERROR(ctx.control().AllReduce(loss_t, comm::ReduceOp::kAvg)->Wait());
  }
  const RankPhases mine = clock.Take(Seconds(tw, Clock::now()));
  std::vector<double> flags;
  BoundaryDecision d;
  FT_RETURN_IF_ERROR(GatherAtBoundary(
      ctx.control(), {leader && time_due ? 1.0 : 0.0, StopRequested() != 0 ? 1.0 : 0.0}, mine,
      &flags, &d.phases));
  d.loss = loss_t.item<double>();
  d.stop = flags[1] != 0;
  d.final_step = step == cfg.train.steps;
  const bool step_due = cfg.ckpt.every_steps > 0 && step % cfg.ckpt.every_steps == 0;
  d.checkpoint = flags[0] != 0 || step_due || d.stop || (d.final_step && cfg.ckpt.save_final);
  return d;
}

// The step's record for metrics.jsonl (ckpt_stall_s and the final step time are set after
// the checkpoint).
StepMetrics MeasureStep(const RunState& state, double loss, double lr, const fsdp::StepStats& stats,
                        double data_wait_s, Clock::time_point t0, int64_t tokens_per_step) {
  StepMetrics m;
  m.step = state.step;
  m.loss = static_cast<float>(loss);
  m.lr = lr;
  m.grad_norm = stats.grad_norm;
  m.data_wait_s = data_wait_s;
  m.comm_s = stats.comm_wait_s;
  m.restart_count = state.restarts;
  m.tokens = state.tokens;
  m.unix_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.step_time_s = Seconds(t0, Clock::now());
  m.tokens_per_s = static_cast<double>(tokens_per_step) / m.step_time_s;
  return m;
}

// The caching allocator's peaks over the step just recorded (a GPU run; rank 0's device).
void AddAllocatorStats(int cuda_index, StepMetrics* m) {
  if (std::optional<AllocatorStats> a = TakeAllocatorStats(cuda_index)) {
    m->gpu_alloc_peak_gb = a->allocated_peak_gib;
    m->gpu_reserved_peak_gb = a->reserved_peak_gib;
    m->gpu_alloc_retries = static_cast<double>(a->alloc_retries);
  }
}

// Rank 0's progress line, every train.log_every steps and at the last one.
void LogProgress(const TrainConfig& cfg, const StepMetrics& m, double elapsed_s,
                 int64_t steps_done_here, bool checkpointed) {
  const double eta = elapsed_s / static_cast<double>(steps_done_here) *
                     static_cast<double>(cfg.train.steps - m.step);
  std::ostringstream line;
  line << "step " << m.step << "/" << cfg.train.steps << " loss " << std::fixed
       << std::setprecision(4) << m.loss << " lr " << std::scientific << std::setprecision(2)
       << m.lr << std::fixed << std::setprecision(0) << " tok/s " << m.tokens_per_s << " eta "
       << FormatEta(eta) << (checkpointed ? " [checkpoint]" : "");
  FT_LOG(Info) << line.str();
}

// Everything one start of the trainer holds, in the order it is built (and destroyed in
// reverse: the checkpointer before the device memory its copies use).
struct Run {
  explicit Run(const TrainConfig& c) : cfg(c) {}
  const TrainConfig& cfg;
  DeviceChoice dev;
  std::string math_modes;
  std::unique_ptr<comm::DistContext> ctx;
  bool leader = false;
  nlohmann::json hardware = nlohmann::json::object();  // recorded in every checkpoint
  std::unique_ptr<fsdp::FsdpEngine> engine;
  std::unique_ptr<ckpt::DeviceMemory> device_memory;  // GPU: D2H into ckptd's slots
  std::unique_ptr<Checkpointer> checkpointer;
  std::string data_version;
  std::string generation;
  RunState state;
  int64_t resume_step = 0;
  std::unique_ptr<data::TokenReader> reader;
  int64_t seq_len = 0;
  int64_t effective_batch = 0;  // sequences per optimizer step, all ranks
  LrSchedule sched;
  std::string schedule_json;
  fsdp::AdamWConfig adamw;
  std::unique_ptr<MetricsWriter> metrics;  // rank 0
  std::unique_ptr<MetricsSinks> sinks;     // TensorBoard, Prometheus, GPU health (rank 0)
  std::unique_ptr<PhaseClock> clock;       // this rank's step phases
  std::unique_ptr<PhaseRecorder> phases;   // every rank's, summarised (rank 0)
  std::unique_ptr<StepProfiler> profiler;  // train.profile_steps
  nlohmann::json layout;                   // the checkpoint layout: how this run is sharded
  // Where the Hugging Face files every checkpoint carries came from (file name -> source;
  // train/base_model.h), for the layout; the files themselves are in state.hf_files (rank 0).
  nlohmann::json hf_sources = nlohmann::json::object();
  std::string attention;  // the SDPA backend the model's layers run
};

// The device, the math modes that keep it deterministic, the rendezvous and the hardware
// fingerprint. The device comes first: NCCL communicators are bound to it, and a machine that
// cannot give this rank a GPU is a one-line configuration error (exit 2), not a crash later.
Status StartDistributed(Run* run) {
  const TrainConfig& cfg = run->cfg;
  FT_ASSIGN_OR_RETURN(run->dev, ChooseDevice(cfg.train.device, 0));
  run->math_modes = "cpu: " + std::to_string(cfg.train.threads) + " intra-op threads";
  if (run->dev.device.is_cuda()) run->math_modes = PinDeterministicMathModes();
  torch::set_num_threads(static_cast<int>(cfg.train.threads));
  InstallStopSignalHandlers();
  comm::DistOptions dopts;
  dopts.backend = cfg.dist.backend;
  dopts.rdzv_timeout_s = static_cast<int>(cfg.dist.rdzv_timeout_s);
  dopts.cuda_device = run->dev.cuda_index;
  dopts.op_timeout_s = static_cast<int>(cfg.dist.timeout_s);
  FT_ASSIGN_OR_RETURN(dopts, comm::DistOptionsFromEnv(dopts));
  FT_ASSIGN_OR_RETURN(run->ctx, comm::DistContext::Init(dopts));
  const comm::WorldInfo& world = run->ctx->world();
  run->leader = world.rank == 0;
  if (run->dev.device.is_cuda()) {
    FT_ASSIGN_OR_RETURN(run->dev, ChooseDevice(cfg.train.device, world.local_world_size));
  }
  FT_LOG(Info) << "device: " << run->dev.description << "; " << run->math_modes;
  // Recorded in every checkpoint; a resume on other hardware or libraries warns.
  for (const auto& [key, value] : FingerprintFields(FingerprintDevice(run->dev))) {
    if (!value.empty()) run->hardware[key] = value;
  }
  if (!run->ctx->collective_settings().empty()) {
    run->hardware["nccl"] = run->ctx->collective_settings();
  }
  if (run->dev.device.is_cuda()) FT_LOG(Info) << "device: " << run->hardware.dump();
  return Status::Ok();
}

// This rank's view of the data: its slice of every global batch, in the run's order.
data::ReaderOptions ReaderOptionsFor(const TrainConfig& cfg, const comm::WorldInfo& world,
                                     int prefetch_depth) {
  data::ReaderOptions o;
  o.source = cfg.data.path;
  o.seed = static_cast<uint64_t>(cfg.train.seed);
  o.dp_rank = world.rank;
  o.dp_size = world.world_size;
  o.micro_batch = static_cast<int>(cfg.train.micro_batch);
  o.prefetch_depth = prefetch_depth;
  return o;
}

// The data's version and tokenizer, from opening it once without a cursor (cheap: reads
// index.json).
StatusOr<std::string> DataVersionOf(const TrainConfig& cfg, const comm::WorldInfo& world,
                                    DataTokenizer* tokenizer) {
  auto r = data::TokenReader::Open(ReaderOptionsFor(cfg, world, 0), nullptr);
  if (!r.ok()) {
    // A data path that is not there is a configuration error (exit 2); damaged data is not.
    if (r.status().IsNotFound() || r.status().IsInvalidArgument()) {
      return Status::InvalidArgument("data.path: " + r.status().message());
    }
    return r.status();
  }
  const data::DatasetIndex& index = (*r)->index();
  const bool local = cfg.data.path.find("://") == std::string::npos;
  tokenizer->path = local && !index.tokenizer_file.empty()
                        ? JoinPath(cfg.data.path, index.tokenizer_file)
                        : std::string();
  tokenizer->bos_id = index.bos_id;
  tokenizer->eos_id = index.eos_id;
  return (*r)->data_version();
}

// The reader positioned where the resumed state says, checked against the model.
Status OpenReader(Run* run) {
  const TrainConfig& cfg = run->cfg;
  data::ReaderOptions ro =
      ReaderOptionsFor(cfg, run->ctx->world(), static_cast<int>(cfg.data.prefetch_depth));
  ro.expected_data_version = run->data_version;
  const std::string* cursor = run->state.data_cursor.empty() ? nullptr : &run->state.data_cursor;
  FT_ASSIGN_OR_RETURN(run->reader, data::TokenReader::Open(ro, cursor));
  run->seq_len = run->reader->index().seq_len;
  if (run->seq_len > cfg.model.max_seq_len) {
    return Status::InvalidArgument("data sequences have " + std::to_string(run->seq_len) +
                                   " tokens but model.max_seq_len is " +
                                   std::to_string(cfg.model.max_seq_len));
  }
  return Status::Ok();
}

// The optimizer, the schedule over the effective batch, and the start-up line that says both.
void PlanOptimizer(Run* run) {
  const TrainConfig& cfg = run->cfg;
  const comm::WorldInfo& world = run->ctx->world();
  run->effective_batch = cfg.train.micro_batch * cfg.train.grad_accum * world.world_size;
  run->sched = ScheduleFor(cfg, run->effective_batch);
  run->schedule_json = nlohmann::json({{"peak_lr", run->sched.peak_lr},
                                       {"min_lr", run->sched.min_lr},
                                       {"warmup_steps", run->sched.warmup_steps},
                                       {"total_steps", run->sched.total_steps}})
                           .dump();
  run->adamw = {cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay};
  if (!run->leader) return;
  FT_LOG(Info) << "train: " << run->engine->NumParameters() << " parameters, " << cfg.dist.sharding
               << " over " << world.world_size << " ranks (" << world.num_nodes
               << " nodes); effective batch = micro_batch " << cfg.train.micro_batch
               << " x accumulation " << cfg.train.grad_accum << " x data-parallel "
               << world.world_size << " = " << run->effective_batch << " sequences of "
               << run->seq_len << " tokens; peak lr " << run->sched.peak_lr
               << (cfg.train.lr_scale_with_batch ? " (linear scaling rule)" : "");
}

nlohmann::json LayoutJson(const Run& run) {
  const comm::WorldInfo& world = run.ctx->world();
  return {{"sharding", run.cfg.dist.sharding},
          {"world_size", world.world_size},
          {"num_nodes", world.num_nodes},
          {"local_world_size", world.local_world_size},
          {"param_dtype", PrecisionName(run.cfg.train.param_dtype)},
          {"device", DeviceName(run.cfg.train.device)},
          {"device_detail", run.dev.description},
          {"torch", TORCH_VERSION},
          {"math_modes", run.math_modes},
          {"attention", run.attention},
          {"hardware", run.hardware},
          {"hf_files", run.hf_sources}};
}

// Per-rank step phases: this rank's clock; rank 0 learns every rank's host once.
Status StartPhases(Run* run) {
  run->clock = std::make_unique<PhaseClock>(run->dev.device.is_cuda() ? run->dev.cuda_index : -1);
  const OptimSection& t = run->cfg.train;
  run->profiler = std::make_unique<StepProfiler>(
      t.profile_first, t.profile_last,
      RunLayout(run->cfg.run_dir).profile_trace(run->ctx->world().rank), run->dev.device.is_cuda());
  FT_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                      GatherHosts(run->ctx->control(), ckpt::proto::DefaultNodeId()));
  if (!run->leader) return Status::Ok();
  const MetricsSection& m = run->cfg.metrics;
  StragglerOptions so;
  so.window = m.straggler_window;
  so.threshold = m.straggler_threshold;
  run->phases = std::make_unique<PhaseRecorder>(std::move(hosts), m.rank_phases_every, so);
  return Status::Ok();
}

// One start, from the device to the first step: rendezvous, the model under FSDP, the
// checkpoint path, the resume, the data reader, the optimizer and the metrics writers.
StatusOr<std::unique_ptr<Run>> StartRun(const TrainConfig& cfg) {
  auto run = std::make_unique<Run>(cfg);
  FT_RETURN_IF_ERROR(StartDistributed(run.get()));
  comm::DistContext& ctx = *run->ctx;
  const comm::WorldInfo& world = ctx.world();
  if (run->leader) {
    Env* env = Env::Default();
    FT_RETURN_IF_ERROR(CreateDirs(env, cfg.run_dir).Annotate("run.dir"));
    // A checkpoint root that cannot be made is a setting to fix (exit 2), not a failure to
    // restart from: every checkpoint, the final one included, would fail the same way.
    Status root = CreateDirs(env, cfg.ckpt.root);
    if (!root.ok()) return Status::InvalidArgument("ckpt.root: " + root.message());
    FT_RETURN_IF_ERROR(WriteFileDurably(env, RunLayout(cfg.run_dir).resolved_config(),
                                        "# resolved by ftrain " + std::string(CodeVersion()) +
                                            ", config hash " + cfg.ConfigHash() + "\n" +
                                            cfg.raw.Canonical()));
    // model.hf's config.json, for a restart after the base directory has moved.
    if (!cfg.model.hf_config_path.empty()) {
      FT_RETURN_IF_ERROR(WriteFileDurably(env, RunLayout(cfg.run_dir).hf_config_copy(),
                                          HfConfigCopyJson(cfg.model)));
    }
  }
  FT_ASSIGN_OR_RETURN(run->engine, BuildEngine(cfg, ctx, run->dev));
  // Per-rank RNG stream (the model itself draws nothing at run time; the state is still
  // carried in every checkpoint so that anything that does draw resumes exactly).
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed) * 1000003ULL +
                     static_cast<uint64_t>(world.rank));
  // Checkpoint path: this node's ckptd if there is one (ckpt.daemon), else synchronous.
  // Start() waits until the daemon has persisted what an earlier trainer of this job handed
  // over, so that the recovery below sees no live writer.
  FT_ASSIGN_OR_RETURN(CheckpointerOptions co, CheckpointerOptionsFor(cfg, world));
  if (run->dev.device.is_cuda()) {
    run->device_memory = MakeCudaDeviceMemory(run->dev.cuda_index);
    co.device = run->device_memory.get();
  }
  // An aborted NCCL collective must never be checkpointed as good state (checkpointer.h).
  co.comm_health = [&ctx] { return ctx.Health(); };
  // The data, and the Hugging Face files each checkpoint will carry (rank 0): known before the
  // daemon's slots are sized.
  DataTokenizer data_tokenizer;
  FT_ASSIGN_OR_RETURN(run->data_version, DataVersionOf(cfg, world, &data_tokenizer));
  model::HfFiles hf;
  if (run->leader) {
    FT_ASSIGN_OR_RETURN(hf, HfFilesForRun(cfg, data_tokenizer));
  }
  FT_ASSIGN_OR_RETURN(std::string hf_sources, ShareHfSources(ctx, hf));
  run->hf_sources = nlohmann::json::parse(hf_sources);
  RunState sizing;
  sizing.hf_files = hf.bytes;
  // Its outcome votes are control collectives: CPU tensors on the Gloo control group.
  run->checkpointer = std::make_unique<Checkpointer>(co, &ctx.control());
  FT_RETURN_IF_ERROR(
      run->checkpointer->Start(ckpt::SlotBytesFor(BuildShardContents(*run->engine, sizing, "{}"))));

  // Resume: the newest complete checkpoint that loads and verifies on every rank.
  // This start's generation: every shard this run writes carries it, so that a writer of an
  // earlier start that wakes up late is fenced off (ckpt/store.h). Rank 0 makes it.
  FT_ASSIGN_OR_RETURN(run->generation, AgreeOnGeneration(ctx));
  if (run->leader) FT_LOG(Info) << "checkpoint generation " << run->generation;
  std::string resume_dir;
  FT_ASSIGN_OR_RETURN(run->resume_step,
                      Resume(cfg, ctx, *run->checkpointer, run->data_version, run->hardware,
                             *run->engine, &run->state, &resume_dir));
  // Only a fresh start reads the base weights: a restart never needs the base directory.
  if (run->resume_step < 0 && cfg.train.init != "random") {
    FT_RETURN_IF_ERROR(LoadBaseWeights(cfg.train.init, ctx, *run->engine));
  }
  run->state.hf_files = std::move(hf.bytes);
  FT_RETURN_IF_ERROR(OpenReader(run.get()));
  FT_RETURN_IF_ERROR(CheckEvalData(cfg, ctx));
  PlanOptimizer(run.get());
  if (run->leader) {
    FT_ASSIGN_OR_RETURN(run->metrics,
                        MetricsWriter::Open(RunLayout(cfg.run_dir).metrics(), run->state.step,
                                            run->state.metrics_line));
    FT_ASSIGN_OR_RETURN(run->sinks,
                        MetricsSinks::Open(cfg, {world.world_size, run->dev.cuda_index,
                                                 run->engine->NumParameters(), run->resume_step}));
  }
  const auto param_dtype =
      cfg.train.param_dtype == Precision::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
  run->attention = model::AttentionBackend(
      cfg.model, torch::TensorOptions().dtype(param_dtype).device(run->dev.device), run->seq_len);
  if (run->leader) FT_LOG(Info) << "attention: scaled_dot_product_attention, " << run->attention;
  run->layout = LayoutJson(*run);
  FT_RETURN_IF_ERROR(StartPhases(run.get()));
  return run;
}

// A collective: every rank gets the same outcome. `durable`: return only once the step is
// committed (stop signal, final step), whatever path the shards took.
StatusOr<SaveOutcome> SaveCheckpoint(Run& run, bool durable) {
  TraceRange range("ftrain/checkpoint save");
  ckpt::CheckpointMeta meta;
  meta.step = run.state.step;
  meta.world_size = run.ctx->world().world_size;
  meta.config_hash = run.cfg.ConfigHash();
  meta.code_version = CodeVersion();
  meta.data_version = run.data_version;
  meta.layout_json = run.layout.dump();
  meta.generation = run.generation;
  run.state.data_cursor = run.reader->SaveCursor();
  return run.checkpointer->Save(meta, BuildShardContents(*run.engine, run.state, run.schedule_json),
                                durable);
}

// The boundary's checkpoint: saved (the stall it cost), or failed loudly (nullopt) and retried
// at the next interval; a failure of a checkpoint that must be durable (stop, final step) ends
// the run.
StatusOr<std::optional<double>> CheckpointAtBoundary(Run& run, const BoundaryDecision& at,
                                                     const StepMetrics& m) {
  const int64_t step = run.state.step;
  run.state.metrics_line = run.leader ? FormatMetricsLine(m) : "";
  auto saved = SaveCheckpoint(run, at.stop || at.final_step);
  if (!saved.ok()) {
    // Never silently skip: log loudly; the next interval tries again.
    FT_LOG(Error) << "CHECKPOINT FAILED at step " << step << ": " << saved.status().message()
                  << " (training continues; will retry)";
    if (at.stop || at.final_step) return saved.status();
    return std::optional<double>();
  }
  if (run.leader) {
    FT_LOG(Info) << "checkpoint step " << step << ": "
                 << (saved->via_daemon ? (saved->deferred ? "copying to ckptd" : "handed to ckptd")
                                       : "written synchronously")
                 << (saved->durable ? ", committed" : ", persisting in the background")
                 << ", stall " << std::setprecision(3) << saved->stall_s << " s";
    run.sinks->NoteCheckpoint(step, saved->durable);
  }
  return std::optional<double>(saved->stall_s);
}

// Rank 0's record of a finished step: metrics.jsonl, the sinks, the progress line.
Status RecordStep(Run& run, StepMetrics& m, Clock::time_point t0, double stall) {
  m.ckpt_stall_s = stall;
  m.step_time_s = Seconds(t0, Clock::now());
  // The record's time is the step's end, checkpoint included, so time - step_time_s is its
  // start (ftrain report's goodput adds step times up against wall time).
  m.unix_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  FT_RETURN_IF_ERROR(run.metrics->Append(m));
  run.sinks->Publish(m);
  return Status::Ok();
}

}  // namespace

Status RunTraining(const TrainConfig& cfg, int* exit_code) {
  *exit_code = 0;
  FT_ASSIGN_OR_RETURN(std::unique_ptr<Run> run, StartRun(cfg));
  RunState& state = run->state;
  const int64_t K = cfg.train.grad_accum;
  const int64_t tokens_per_step = run->effective_batch * run->seq_len;
  const auto run_start = Clock::now();
  auto last_ckpt = Clock::now();
  const int64_t start_step = state.step;
  int64_t last_saved = run->resume_step;
  // The loop: micro-batches, optimizer step, then the boundary work (decisions, metrics,
  // checkpoint, progress, stop).
  for (int64_t step = state.step; step < cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    run->profiler->BeginStep(step + 1);
    run->clock->StepStart();
    FT_ASSIGN_OR_RETURN(MicroBatches mb,
                        RunMicroBatches(*run->reader, *run->engine, K, run->dev.device));
    run->clock->ComputeEnd(mb.data_wait_s, run->engine->comm_wait_so_far());
    const double lr = run->sched.At(step);
    const auto tc = Clock::now();
    run->checkpointer->BeforeStateChanges();  // a snapshot still copying off the GPU goes first
    run->clock->AddStall(Seconds(tc, Clock::now()));
    FT_ASSIGN_OR_RETURN(fsdp::StepStats stats, run->engine->Step(run->adamw, lr, cfg.train.clip));
    run->clock->OptimizerEnd(stats.comm_wait_s);
    run->clock->NoteBytesRead(run->reader->stats().bytes_read);
    run->checkpointer->FinishPending();
    state.step = step + 1;
    state.tokens += tokens_per_step;

    const bool time_due = cfg.ckpt.every_minutes > 0 &&
                          Seconds(last_ckpt, Clock::now()) >= cfg.ckpt.every_minutes * 60;
    FT_ASSIGN_OR_RETURN(BoundaryDecision at, DecideAtBoundary(cfg, *run->ctx, state.step,
                                                              mb.loss_sum / static_cast<double>(K),
                                                              time_due, *run->clock));
    StepMetrics m = MeasureStep(state, at.loss, lr, stats, mb.data_wait_s, t0, tokens_per_step);
    if (run->leader) {
      run->sinks->AddHealth(&m);
      AddAllocatorStats(run->dev.cuda_index, &m);
      SetReadLatency(run->reader->TakeReadLatencies(), &m);
      auto phases = std::make_shared<PhaseSummary>(run->phases->Observe(state.step, at.phases));
      phases->comm_bytes = static_cast<double>(stats.comm_bytes);
      m.phases = std::move(phases);
    }
    // Before the checkpoint, so that the line it carries has the held-out loss too.
    FT_RETURN_IF_ERROR(EvalAtBoundary(cfg, *run->engine, *run->ctx, state.step, at.stop, &m));
    double stall = 0;
    if (at.checkpoint) {
      FT_ASSIGN_OR_RETURN(std::optional<double> saved, CheckpointAtBoundary(*run, at, m));
      if (saved) {
        stall = *saved;
        run->clock->AddStall(stall);
        last_saved = state.step;
        last_ckpt = Clock::now();
      }
    }
    if (run->leader) {
      FT_RETURN_IF_ERROR(RecordStep(*run, m, t0, stall));
      if (state.step % cfg.train.log_every == 0 || at.final_step || at.stop) {
        LogProgress(cfg, m, Seconds(run_start, Clock::now()), state.step - start_step, stall > 0);
      }
    }
    run->profiler->EndStep(state.step);
    if (at.stop) {
      FT_LOG(Warning) << "stop requested by signal: checkpointed step " << last_saved
                      << "; exiting with " << kExitRequeue << " (requeue me)";
      *exit_code = kExitRequeue;
      return Status::Ok();
    }
  }
  if (run->leader) FT_LOG(Info) << "train: done at step " << state.step;
  return Status::Ok();
}

}  // namespace ftrain::train
