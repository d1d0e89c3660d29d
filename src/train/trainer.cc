// The training loop. One optimizer step reads like this:
//   for each of K micro-batches: next batch -> forward + backward (FSDP) -> accumulate
//   clip + AdamW (sharded) -> metrics -> maybe checkpoint (step boundary) -> maybe stop
#include "train/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "ckpt/filename.h"
#include "ckpt/memory_manifest.h"
#include "ckpt/mirror.h"
#include "ckpt/store.h"
#include "comm/context.h"
#include "core/env.h"
#include "core/fault_inject.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "core/version.h"
#include "data/read/reader.h"
#include "formats/hf_config.h"
#include "fsdp/engine.h"
#include "model/llama.h"
#include "plan/memory_fit.h"
#include "records/restarts.h"
#include "trace/trace_range.h"
#include "train/base_model.h"
#include "train/boundary_agreement.h"
#include "train/checkpoint/coordinator.h"
#include "train/checkpoint/resume.h"
#include "train/checkpoint/s3_root.h"
#include "train/checkpoint/sink.h"
#include "train/checkpoint/train_state.h"
#include "train/config/lr_schedule.h"
#include "train/config/mirror_config.h"
#include "train/device/device.h"
#include "train/device/device_memory.h"
#include "train/engine_builder.h"
#include "train/eval/eval_loop.h"
#include "train/hang_watch.h"
#include "train/phase_clock.h"
#include "train/profiler.h"
#include "train/sdc_check.h"
#include "train/signals.h"
#include "train/telemetry/metrics.h"
#include "train/telemetry/metrics_sinks.h"
#include "train/verdicts/guard.h"
#include "train/verdicts/rollback.h"

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

// Rank 0's NewGeneration(), handed to every rank ("<15-digit ms>-<8 hex>", or under the job
// controller "e<15-digit lease epoch>-<8 hex>", sent negated: two doubles carry it exactly
// through the world's broadcast).
StatusOr<std::string> AgreeOnGeneration(comm::DistContext& ctx, int64_t fence_epoch) {
  double ms = 0, rnd = 0;
  if (ctx.world().rank == 0) {
    const std::string g = ckpt::NewGeneration(fence_epoch);
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

// Where this rank's checkpoints go (ckpt.*): this node's ckptd if there is one, else
// synchronously through the library.
StatusOr<CheckpointSinkOptions> SinkOptionsFor(const TrainConfig& cfg, const comm::WorldInfo& world,
                                               const records::LaunchContext& launch, Env* env) {
  CheckpointSinkOptions co;
  co.env = env;
  co.daemon = cfg.ckpt.daemon;
  co.run_dir = cfg.run_dir;
  co.node = launch.CkptdNodeId();
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
// gradients as it goes). Token ids are checked on the host, before they go up to a GPU from
// pinned memory without blocking: nothing here waits for the device (the step's loss comes
// back with the optimizer's one host synchronisation, fsdp::StepStats::loss_sum).
struct MicroBatches {
  double data_wait_s = 0;  // waiting for the reader
};
struct MicroBatchSource {
  data::TokenReader& reader;
  const torch::Device& device;
  int64_t vocab;
  HangWatch& hang;
  int64_t step;
};
// The next micro-batch as int64 tokens on the device; `use` false: read and dropped.
StatusOr<torch::Tensor> NextTokens(const MicroBatchSource& src, bool use, MicroBatches* out) {
  auto td = Clock::now();
  src.hang.Enter(src.step, HangPhase::kIo);  // a wait for storage gets the I/O allowance
  FT_ASSIGN_OR_RETURN(data::Batch batch, src.reader.Next());
  src.hang.Enter(src.step, HangPhase::kCompute);
  out->data_wait_s += Seconds(td, Clock::now());
  if (!use) return torch::Tensor();
  FT_RETURN_IF_ERROR(model::CheckTokenIds(batch.tokens.data(), batch.tokens.size(), src.vocab));
  torch::Tensor tokens =
      torch::from_blob(batch.tokens.data(), {batch.rows, batch.row_tokens}, torch::kInt32)
          .to(torch::kInt64);
  if (src.device.is_cuda()) {
    // The copy is ordered before the forward on the current stream.
    tokens = tokens.pin_memory().to(src.device, /*non_blocking=*/true);
  }
  return tokens;
}

StatusOr<MicroBatches> RunMicroBatches(const MicroBatchSource& src, fsdp::FsdpEngine& engine,
                                       int64_t K) {
  MicroBatches out;
  for (int64_t k = 0; k < K; ++k) {
    FT_ASSIGN_OR_RETURN(torch::Tensor tokens, NextTokens(src, true, &out));
    FT_RETURN_IF_ERROR(
        engine.ForwardBackward(tokens, 1.0 / static_cast<double>(K), k == K - 1).status());
  }
  return out;
}

// dist.reduce = exact: the step's M micro-batches come in global order (the reader reads the
// whole stream); rank r of R trains those with global index g = k R + r, in ceil(M / R) slots
// that every rank runs. A slot with no micro-batch of its own runs zeros for the collectives
// and contributes an exact zero. The engine divides the sum by M.
StatusOr<MicroBatches> RunMicroBatchesExact(const MicroBatchSource& src, fsdp::FsdpEngine& engine,
                                            int64_t M, const comm::WorldInfo& world,
                                            at::IntArrayRef shape) {
  MicroBatches out;
  const int64_t R = world.world_size;
  const int64_t slots = (M + R - 1) / R;
  int64_t read = 0;  // micro-batches of the step read so far
  for (int64_t k = 0; k < slots; ++k) {
    const int64_t g = k * R + world.rank;
    torch::Tensor tokens;
    while (read <= g && read < M) {
      FT_ASSIGN_OR_RETURN(tokens, NextTokens(src, read == g, &out));
      ++read;
    }
    const bool mine = g < M;
    if (!mine) tokens = torch::zeros(shape, torch::TensorOptions(torch::kInt64).device(src.device));
    FT_RETURN_IF_ERROR(engine.ForwardBackward(tokens, 1.0, k == slots - 1, mine).status());
  }
  for (; read < M; ++read) FT_RETURN_IF_ERROR(NextTokens(src, false, &out).status());
  return out;
}

// A step data.skip names: its micro-batches are read (the data position moves on exactly as
// if they had been trained on) and nothing else happens.
StatusOr<MicroBatches> SkipMicroBatches(data::TokenReader& reader, int64_t K, HangWatch& hang,
                                        int64_t step) {
  MicroBatches out;
  hang.Enter(step, HangPhase::kIo);
  for (int64_t k = 0; k < K; ++k) {
    auto td = Clock::now();
    FT_RETURN_IF_ERROR(reader.Next().status());
    out.data_wait_s += Seconds(td, Clock::now());
  }
  hang.Enter(step, HangPhase::kCompute);
  return out;
}

// The step's record for metrics.jsonl (ckpt_stall_s and the final step time are set after
// the checkpoint).
records::StepMetrics MeasureStep(const RunState& state, double loss, double lr,
                                 const fsdp::StepStats& stats, double data_wait_s,
                                 Clock::time_point t0, int64_t tokens_per_step) {
  records::StepMetrics m;
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
void AddAllocatorStats(int cuda_index, records::StepMetrics* m) {
  if (std::optional<AllocatorStats> a = TakeAllocatorStats(cuda_index)) {
    m->gpu_alloc_peak_gb = a->allocated_peak_gib;
    m->gpu_reserved_peak_gb = a->reserved_peak_gib;
    m->gpu_alloc_retries = static_cast<double>(a->alloc_retries);
  }
}

// Rank 0's progress line, every train.log_every steps and at the last one.
void LogProgress(const TrainConfig& cfg, const records::StepMetrics& m, double elapsed_s,
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
// reverse: the checkpoint sink before the device memory its copies use).
struct Run {
  Run(const TrainConfig& c, const records::LaunchContext& l, Env* e) : cfg(c), launch(l), env(e) {}
  const TrainConfig& cfg;
  const records::LaunchContext& launch;
  Env* env;  // every file and the clock (the main's)
  DeviceChoice dev;
  std::string math_modes;
  std::unique_ptr<comm::DistContext> ctx;
  bool leader = false;
  nlohmann::json hardware = nlohmann::json::object();  // recorded in every checkpoint
  std::unique_ptr<fsdp::FsdpEngine> engine;
  std::unique_ptr<ckpt::DeviceMemory> device_memory;  // GPU: D2H into ckptd's slots
  std::unique_ptr<CheckpointSink> ckpt_sink;
  std::string data_version;
  std::string generation;
  std::unique_ptr<ckpt::CheckpointMirror> mirror;  // ckpt.mirror (rank 0)
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
  // When, what, where: over the sink, engine, state, reader and clock above (so it goes first).
  std::unique_ptr<CheckpointCoordinator> checkpoints;
  std::unique_ptr<StepGuard> guard;  // [guard] and data.skip
  FaultPlan faults;                  // FTRAIN_FAULT (testing only; usually empty)
  bool flip_after_step = false;      // FTRAIN_FAULT's bitflip, armed for this step
  std::vector<std::string> hosts;    // every rank's host (GatherHosts), for the SDC records
  bool sdc_check = false;            // guard.sdc_every_steps > 0 and the shards have replicas
  ReplicaPlace place;                // this rank's shard, for the replica check
  bool sdc_timed = false;            // the first check's time was logged
  int64_t sdc_passed = 0;            // the newest step a check passed at (or the one resumed)
  // Rolled-back spikes' norms the guard takes as suspects after the keyed step (rollback.h).
  std::map<int64_t, std::vector<double>> suspects_at;
  double hang_io_s = 0;             // guard.hang_io_s, or the deprecated FTRAIN_HANG_IO_S
  std::unique_ptr<HangWatch> hang;  // the hang guard (last: stopped first)
};

// The device, the math modes that keep it deterministic, the rendezvous and the hardware
// fingerprint. The device comes first: NCCL communicators are bound to it, and a machine that
// cannot give this rank a GPU is a one-line node fault (exit 76, RUN/node_faults.jsonl), not
// a crash later.
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
  dopts.order_free = cfg.dist.exact_reduce;
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
                                     int prefetch_depth, Env* env) {
  data::ReaderOptions o;
  o.source = cfg.data.path;
  o.env = env;
  o.seed = static_cast<uint64_t>(cfg.train.seed);
  // exact: every rank reads the whole stream and keeps its micro-batches (the assignment is
  // by global micro-batch index, not by a rank's slice of the stream).
  o.dp_rank = cfg.dist.exact_reduce ? 0 : world.rank;
  o.dp_size = cfg.dist.exact_reduce ? 1 : world.world_size;
  o.micro_batch = static_cast<int>(cfg.train.micro_batch);
  o.prefetch_depth = prefetch_depth;
  return o;
}

// The data's version and tokenizer, from opening it once without a cursor (cheap: reads
// index.json).
StatusOr<std::string> DataVersionOf(const TrainConfig& cfg, const comm::WorldInfo& world, Env* env,
                                    DataTokenizer* tokenizer, int64_t* seq_len) {
  auto r = data::TokenReader::Open(ReaderOptionsFor(cfg, world, 0, env), nullptr);
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
  *seq_len = index.seq_len;
  return (*r)->data_version();
}

// Refuses (exit 2), before the model is allocated, a run whose plan does not fit the device:
// a GPU's memory, or on CPU each rank's share of the host's (plan/memory_fit.h).
Status CheckMemory(const Run& run, int64_t seq_len) {
  const char* skip = std::getenv("FTRAIN_SKIP_MEMORY_CHECK");
  if (skip != nullptr && std::string(skip) == "1") return Status::Ok();
  const TrainConfig& cfg = run.cfg;
  const comm::WorldInfo& w = run.ctx->world();
  PlanInput in;
  in.model = cfg.model;
  in.model_source = "the run's model";  // what the planner's messages say the model is
  in.nodes = w.num_nodes;
  in.gpus_per_node = w.local_world_size;
  const uint64_t device_bytes =
      run.dev.device.is_cuda()
          ? run.dev.memory_bytes
          : HostMemoryBytes() / static_cast<uint64_t>(std::max(1, w.local_world_size));
  in.gpu_mem_gb = static_cast<double>(device_bytes) / 1e9;  // 0: unknown, nothing is checked
  in.seq_len = seq_len;
  in.micro_batch = cfg.train.micro_batch;
  in.act_ckpt = cfg.train.activation_checkpointing;
  in.ac_every = cfg.train.ac_every;
  in.grad_bytes = cfg.train.reduce_dtype == Precision::kBFloat16 ? 2 : 4;
  const std::string device =
      run.dev.device.is_cuda()
          ? "cuda:" + std::to_string(run.dev.cuda_index)
          : "this host (its memory / " + std::to_string(w.local_world_size) + " ranks)";
  return CheckMemoryFit(in, cfg.dist.sharding, device);
}

// The reader positioned where the resumed state says, checked against the model.
Status OpenReader(Run* run) {
  const TrainConfig& cfg = run->cfg;
  data::ReaderOptions ro =
      ReaderOptionsFor(cfg, run->ctx->world(), static_cast<int>(cfg.data.prefetch_depth), run->env);
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
  run->effective_batch = cfg.dist.exact_reduce
                             ? cfg.train.global_batch
                             : cfg.train.micro_batch * cfg.train.grad_accum * world.world_size;
  run->sched = ScheduleFor(cfg, run->effective_batch);
  run->schedule_json = nlohmann::json({{"peak_lr", run->sched.peak_lr},
                                       {"min_lr", run->sched.min_lr},
                                       {"warmup_steps", run->sched.warmup_steps},
                                       {"total_steps", run->sched.total_steps}})
                           .dump();
  run->adamw = {cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay};
  if (!run->leader) return;
  if (cfg.dist.exact_reduce) {
    FT_LOG(Info) << "train: " << run->engine->NumParameters() << " parameters, "
                 << ShardingName(cfg.dist.sharding) << " over " << world.world_size
                 << " ranks; dist.reduce = exact: global batch " << cfg.train.global_batch << " = "
                 << cfg.dist.ExactMicroBatches(cfg.train) << " micro-batches of "
                 << cfg.train.micro_batch << " sequences of " << run->seq_len
                 << " tokens, dealt by global index; peak lr " << run->sched.peak_lr;
    return;
  }
  FT_LOG(Info) << "train: " << run->engine->NumParameters() << " parameters, "
               << ShardingName(cfg.dist.sharding) << " over " << world.world_size << " ranks ("
               << world.num_nodes << " nodes); effective batch = micro_batch "
               << cfg.train.micro_batch << " x accumulation " << cfg.train.grad_accum
               << " x data-parallel " << world.world_size << " = " << run->effective_batch
               << " sequences of " << run->seq_len << " tokens; peak lr " << run->sched.peak_lr
               << (cfg.train.lr_scale_with_batch ? " (linear scaling rule)" : "");
}

nlohmann::json LayoutJson(const Run& run) {
  const comm::WorldInfo& world = run.ctx->world();
  return {{"sharding", ShardingName(run.cfg.dist.sharding)},
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
          {"hf_files", run.hf_sources},
          // Checked before every save with guard.policy != off: only finite state commits.
          {"guard",
           {{"policy", GuardPolicyName(run.cfg.guard.policy)},
            {"finite", run.cfg.guard.policy != GuardPolicy::kOff}}}};
}

// Per-rank step phases: this rank's clock; rank 0 learns every rank's host once.
Status StartPhases(Run* run) {
  run->clock = std::make_unique<PhaseClock>(run->dev.device.is_cuda() ? run->dev.cuda_index : -1);
  const OptimSection& t = run->cfg.train;
  run->profiler = std::make_unique<StepProfiler>(
      t.profile_first, t.profile_last,
      RunLayout(run->cfg.run_dir).profile_trace(run->ctx->world().rank), run->dev.device.is_cuda(),
      run->env);
  FT_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                      GatherHosts(run->ctx->control(), run->launch.CkptdNodeId()));
  run->hosts = hosts;
  if (!run->leader) return Status::Ok();
  const MetricsSection& m = run->cfg.metrics;
  StragglerOptions so;
  so.window = m.straggler_window;
  so.threshold = m.straggler_threshold;
  run->phases = std::make_unique<PhaseRecorder>(std::move(hosts), m.rank_phases_every, so);
  return Status::Ok();
}

// The loop's checkpoints from here on: this run's identity in every checkpoint's meta, and
// the due rule's clock starting now.
void StartCheckpoints(Run* run) {
  CheckpointCoordinator::Parts p;
  p.sink = run->ckpt_sink.get();
  p.engine = run->engine.get();
  p.state = &run->state;
  p.reader = run->reader.get();
  ckpt::CheckpointMeta& meta = p.identity.meta;
  meta.world_size = run->ctx->world().world_size;
  meta.config_hash = run->cfg.ConfigHash();
  meta.code_version = CodeVersion();
  meta.data_version = run->data_version;
  meta.layout_json = run->layout.dump();
  meta.generation = run->generation;
  p.identity.schedule_json = run->schedule_json;
  p.leader = run->leader;
  p.rank = run->ctx->world().rank;
  p.resumed_step = run->resume_step;
  PhaseClock* clock = run->clock.get();
  p.on_stall = [clock](double s) { clock->AddStall(s); };
  run->checkpoints = std::make_unique<CheckpointCoordinator>(
      CheckpointSchedule(run->cfg.ckpt, run->cfg.train.LastStep(), run->env), std::move(p));
}

// guard.sdc_every_steps: whether this run's shards have replicas to compare (hybrid_shard over
// more than one node, no_shard over more than one rank); full_shard has none, said once.
void StartSdcCheck(Run* run) {
  const int64_t every = run->cfg.guard.sdc_every_steps;
  if (every <= 0) return;
  const comm::WorldInfo& w = run->ctx->world();
  const Sharding s = run->engine->config().sharding;
  // The resumed state was checked before it was saved (disk or memory): the last known good.
  run->sdc_passed = std::max<int64_t>(0, run->state.step);
  run->place.rank = w.rank;
  run->place.node = w.node_rank;
  run->place.shard = s == Sharding::kNoShard ? 0 : w.local_rank;
  run->sdc_check = (s == Sharding::kNoShard && w.world_size > 1) ||
                   (s == Sharding::kHybridShard && w.num_nodes > 1);
  if (!run->leader) return;
  if (run->sdc_check) {
    FT_LOG(Info) << "guard: replicas compare their master shards' hashes every " << every
                 << " steps and before every checkpoint (guard.sdc_every_steps)";
  } else {
    FT_LOG(Warning) << "guard: guard.sdc_every_steps = " << every << " but "
                    << ShardingName(run->cfg.dist.sharding) << " over " << w.num_nodes
                    << " node(s), " << w.world_size
                    << " rank(s) keeps no replica of a shard: there is nothing to compare, no "
                       "replica check runs (docs/operations.md, Silent data corruption)";
  }
}

// After silent data corruption (rank 0): the memory tier's record of a step newer than the last
// passed check is dropped, so that the restart goes to a checked state (issue 44, hole 7).
void DropUncheckedMemoryRecord(const Run& run) {
  auto dropped = ckpt::DropMemoryManifestNewerThan(run.env, run.cfg.ckpt.root, run.sdc_passed);
  if (!dropped.ok()) {
    FT_LOG(Error) << "guard: " << dropped.status().message();
  } else if (*dropped >= 0) {
    FT_LOG(Error) << "guard: dropped the memory tier's record of step " << *dropped
                  << ": it is newer than the last passed replica check (step " << run.sdc_passed
                  << "), so it may hold the corruption; the restart resumes a checked step";
  }
}

// The replica check after step `step` when it is due (SdcCheckDue: `snapshot_due` when a disk
// checkpoint or a memory snapshot follows); true when the replicas disagree (the ERROR is
// logged, rank 0 has recorded it, and the trainer is to exit with kExitSdc).
StatusOr<bool> SdcMismatch(Run& run, int64_t step, bool snapshot_due) {
  if (!run.sdc_check) return false;
  if (!SdcCheckDue(step, run.cfg.guard.sdc_every_steps, snapshot_due)) return false;
  const auto t0 = Clock::now();
  FT_ASSIGN_OR_RETURN(SdcVerdict v,
                      CheckReplicas(*run.engine, run.ctx->control(), run.place, run.hosts));
  if (run.leader && !run.sdc_timed) {  // what a check costs, once (docs/performance.md)
    run.sdc_timed = true;
    FT_LOG(Info) << "guard: replica check after step " << step << " took "
                 << Seconds(t0, Clock::now()) * 1e3 << " ms (hash + gather)";
  }
  if (v.ok) {
    run.sdc_passed = step;
    return false;
  }
  FT_LOG(Error) << "guard: silent data corruption after step " << step
                << ": replicas of a master shard hold different bits: " << v.summary
                << (v.by_majority ? "" : " (no majority: every replica named is a suspect)")
                << "; nothing of this step is saved, exiting with " << kExitSdc
                << " to restart from the newest checkpoint";
  if (run.leader) {
    Status w = RecordSdc(run.cfg.run_dir, run.launch, step, v, run.env);
    if (!w.ok()) FT_LOG(Error) << "guard: cannot record the corruption: " << w.message();
    DropUncheckedMemoryRecord(run);
  }
  // No rank exits (77) before rank 0's record is durable: the controller reads it to keep the
  // nodes out, and srun's kill-on-bad-exit would otherwise end rank 0 mid-append.
  FT_RETURN_IF_ERROR(run.ctx->control().Barrier()->Wait());
  return true;
}

// The hang guard (train/hang_watch.h): this rank's progress published from now on; a rank the
// others wait for beyond the threshold ends every rank with kExitHang.
void StartHangWatch(Run* run) {
  const comm::WorldInfo& w = run->ctx->world();
  HangWatch::Options o;
  o.run_dir = run->cfg.run_dir;
  o.env = run->env;
  o.rank = w.rank;
  o.world_size = w.world_size;
  o.node = w.node_rank;
  o.num_nodes = w.num_nodes;
  o.host = run->hosts.at(static_cast<size_t>(w.rank));
  o.generation = run->generation;
  o.job_id = run->launch.job_id;
  o.settings.timeout_s = run->cfg.guard.hang_timeout_s;
  o.settings.floor_s = run->cfg.guard.hang_floor_s;
  o.settings.startup_s = static_cast<double>(run->cfg.dist.timeout_s);
  o.settings.io_s = run->hang_io_s;
  // The main thread may be stuck (that is the point): only the watchdog can end the process.
  o.exit_process = [](int code) { std::_Exit(code); };
  o.stop_asked = [] { return StopRequested() != 0; };
  run->hang = std::make_unique<HangWatch>(std::move(o));
  run->hang->Enter(run->state.step + 1, HangPhase::kStart);
  if (!run->leader) return;
  std::ostringstream rule;
  if (run->cfg.guard.hang_timeout_s > 0) {
    rule << run->cfg.guard.hang_timeout_s << " s";
  } else {
    rule << "max(" << run->cfg.guard.hang_floor_s << " s, " << kHangStepFactor
         << " x the median step time)";
  }
  FT_LOG(Info) << "hang guard: a rank the others wait for is named after " << rule.str()
               << ", after " << run->cfg.dist.timeout_s
               << " s in the first step, a checkpoint or an evaluation, after " << run->hang_io_s
               << " s in metrics writes or data reads (guard.hang_io_s; progress in "
               << RunLayout(run->cfg.run_dir).progress_dir() << ")";
}

// FTRAIN_FAULT's stall (testing only): this rank stops progressing, as a rank stuck in a
// driver call or a dead file system would, until a signal asks it to stop or the hang guard
// ends it.
Status Stall(int64_t step, int rank) {
  FT_LOG(Warning) << "FTRAIN_FAULT: stalling at the start of step " << step << " on rank " << rank
                  << " (sleeping until killed)";
  while (StopRequested() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return Status::Unavailable("FTRAIN_FAULT: rank " + std::to_string(rank) + " stalled at step " +
                             std::to_string(step) + " and was asked to stop");
}

// The suspects due after `step` (RolledBackSuspects): where the recorded run took them.
void AddDueSuspects(Run* run, int64_t step) {
  auto it = run->suspects_at.find(step);
  if (it == run->suspects_at.end()) return;
  run->guard->AddSuspects(it->second);
  run->state.guard_recent = run->guard->recent();
  run->suspects_at.erase(it);
}

// guard.policy = rollback (train/verdicts/rollback.h): the steps RUN/rollbacks.jsonl rolls back
// that come after the step this start resumed are skipped, like data.skip. A rollback no start
// has applied yet is applied now, and rank 0 records the exact range before any step trains.
Status ApplyRollbacks(Run* run) {
  FT_ASSIGN_OR_RETURN(std::vector<RollbackRecord> records,
                      ReadRollbacks(run->cfg.run_dir, run->env));
  run->suspects_at = RolledBackSuspects(records, run->state.step);
  AddDueSuspects(run, run->state.step);
  const RollbackSkips skips = PlanRollbackSkips(records, run->state.step, run->cfg.train.steps);
  if (skips.must_record()) {
    // Every rank has read the file before rank 0 appends to it: all plan from the same lines.
    FT_RETURN_IF_ERROR(run->ctx->control().Barrier()->Wait());
    if (run->leader) {
      FT_RETURN_IF_ERROR(AppendAppliedRollback(run->cfg.run_dir, skips.to_record));
    }
  }
  for (const auto& [first, last] : skips.ranges) {
    run->guard->AddRolledBack(first, last);
    if (run->leader) {
      FT_LOG(Warning) << "guard: rolled back to step " << run->state.step << ": steps " << first
                      << "-" << last << " are read and not trained on (RUN/rollbacks.jsonl; "
                      << "reproduce with --data.skip=" << first << "-" << last << ")";
    }
  }
  return Status::Ok();
}

// `v` from rank 0 on every rank (a control collective).
StatusOr<double> FromLeader(comm::DistContext& ctx, double v) {
  torch::Tensor t = torch::tensor({v}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().Broadcast(t, 0)->Wait());
  return t[0].item<double>();
}

// ckpt.mirror, restore (train.resume = auto): when the mirror's newest committed checkpoint is
// newer than the newest in ckpt.root (scratch purged), each rank downloads its own ranks'
// shard objects (ckpt/s3_store.h RestoreFiles) and rank 0 commits the directory once every
// rank's files are there. Any failure (an outage, a damaged object) is logged and the start
// resumes from what the file system has; every rank agrees on that.
Status RestoreMirrorAtStart(Run* run, const std::string& url) {
  comm::DistContext& ctx = *run->ctx;
  const std::string& root = run->cfg.ckpt.root;
  double step = -1;
  if (run->leader) {
    auto plan = ckpt::PlanRestore(url, root, run->env);
    if (!plan.ok()) FT_LOG(Warning) << "ckpt.mirror: not restored: " << plan.status().ToString();
    if (plan.ok() && *plan) step = static_cast<double>(**plan);
  }
  FT_ASSIGN_OR_RETURN(step, FromLeader(ctx, step));
  if (step < 0) return Status::Ok();
  const int64_t s = static_cast<int64_t>(step);
  Status mine =
      ckpt::RestoreFiles(url, root, s, ctx.world().rank, ctx.world().world_size, run->env);
  if (!mine.ok()) FT_LOG(Warning) << "ckpt.mirror: restoring my files: " << mine.ToString();
  torch::Tensor failed = torch::tensor({mine.ok() ? 0.0 : 1.0}, torch::kFloat64);
  FT_RETURN_IF_ERROR(ctx.control().AllReduce(failed, comm::ReduceOp::kSum)->Wait());
  if (run->leader) {
    Status done = failed[0].item<double>() > 0 ? Status::Unavailable("a rank's download failed")
                                               : ckpt::FinishRestore(url, root, s, run->env);
    if (done.ok()) {
      FT_LOG(Info) << "ckpt.mirror: restored step " << s << " from " << url << " into " << root;
    } else {
      FT_LOG(Warning) << "ckpt.mirror: step " << s << " not restored: " << done.ToString()
                      << " (resuming from " << root << ")";
    }
  }
  // Every rank chooses the resume after rank 0's rename.
  return ctx.control().Barrier()->Wait();
}

// ckpt.mirror (ckpt/mirror.h): rank 0 checks the store and claims its fence before step 1
// (exit 2 with what to set); a refused mirror ends every rank with rank 0's code, not a
// peer's broken collective. Then the restore (above).
Status OpenMirror(Run* run) {
  FT_ASSIGN_OR_RETURN(MirrorConfig mc, ParseMirrorConfig(run->cfg.raw));
  if (!mc.enabled()) return Status::Ok();
  Status s;
  if (run->leader) {
    ckpt::MirrorOptions o;
    o.url = mc.url;
    o.keep = mc.keep;
    o.every_s = mc.every_s;
    o.env = run->env;
    o.store.upload.part_bytes = uint64_t(mc.part_mb) << 20;
    o.store.upload.threads = mc.threads;
    o.store.upload.max_bytes_per_s = static_cast<int64_t>(mc.max_mb_s * 1e6);
    auto m = ckpt::CheckpointMirror::Open(o, run->cfg.ckpt.root, run->generation);
    if (m.ok()) run->mirror = std::move(*m);
    s = m.status();
  }
  FT_ASSIGN_OR_RETURN(double c, FromLeader(*run->ctx, static_cast<double>(s.code())));
  const auto code = static_cast<Status::Code>(static_cast<int>(c));
  if (code != Status::Code::kOk) {
    return run->leader ? s : Status(code, "ckpt.mirror: refused by rank 0 (its log says why)");
  }
  if (run->cfg.train.resume != "auto") return Status::Ok();
  return RestoreMirrorAtStart(run, mc.url);
}

// The end of a start (done or stopped): the mirror copies the final checkpoint. A failure is
// logged, not fatal: the checkpoint is committed on the file system.
void FinishMirror(Run& run) {
  if (!run.mirror) return;
  Status s = run.mirror->Stop(/*final_pass=*/true);
  if (!s.ok()) FT_LOG(Warning) << "ckpt.mirror: the final copy failed: " << s.ToString();
}

// One start, from the device to the first step: rendezvous, the model under FSDP, the
// checkpoint path, the resume, the data reader, the optimizer and the metrics writers.
StatusOr<std::unique_ptr<Run>> StartRun(const TrainConfig& cfg,
                                        const records::LaunchContext& launch, Env* env) {
  auto run = std::make_unique<Run>(cfg, launch, env);
  FT_RETURN_IF_ERROR(StartDistributed(run.get()));
  comm::DistContext& ctx = *run->ctx;
  const comm::WorldInfo& world = ctx.world();
  if (run->leader) {
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
  // The data's version, tokenizer and sequence length (its index), and whether the plan for
  // them fits the device: known before the model is allocated.
  DataTokenizer data_tokenizer;
  int64_t data_seq_len = 0;
  FT_ASSIGN_OR_RETURN(run->data_version,
                      DataVersionOf(cfg, world, env, &data_tokenizer, &data_seq_len));
  FT_RETURN_IF_ERROR(CheckMemory(*run, data_seq_len));
  FT_ASSIGN_OR_RETURN(run->engine, BuildEngine(cfg, ctx, run->dev, EngineUse::kTrain));
  // Per-rank RNG stream (the model itself draws nothing at run time; the state is still
  // carried in every checkpoint so that anything that does draw resumes exactly).
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed) * 1000003ULL +
                     static_cast<uint64_t>(world.rank));
  // Checkpoint path: this node's ckptd if there is one (ckpt.daemon), else synchronous.
  // Start() waits until the daemon has persisted what an earlier trainer of this job handed
  // over, so that the recovery below sees no live writer.
  FT_ASSIGN_OR_RETURN(CheckpointSinkOptions co, SinkOptionsFor(cfg, world, run->launch, env));
  if (run->dev.device.is_cuda()) {
    run->device_memory = MakeCudaDeviceMemory(run->dev.cuda_index);
    co.device = run->device_memory.get();
  }
  // An aborted NCCL collective must never be checkpointed as good state (train/checkpoint/sink.h).
  co.comm_health = [&ctx] { return ctx.Health(); };
  // [guard]: a checkpoint is committed only if every rank's state is finite.
  if (cfg.guard.policy != GuardPolicy::kOff) {
    fsdp::FsdpEngine* engine = run->engine.get();
    co.state_check = [engine] { return engine->CheckFinite(); };
  }
  // The Hugging Face files each checkpoint will carry (rank 0): known before the daemon's
  // slots are sized.
  model::HfFiles hf;
  if (run->leader) {
    FT_ASSIGN_OR_RETURN(hf, HfFilesForRun(cfg, data_tokenizer, env));
  }
  FT_ASSIGN_OR_RETURN(std::string hf_sources, ShareHfSources(ctx, hf));
  run->hf_sources = nlohmann::json::parse(hf_sources);
  RunState sizing;
  sizing.hf_files = hf.bytes;
  // Its outcome votes are control collectives: CPU tensors on the Gloo control group.
  run->ckpt_sink = std::make_unique<CheckpointSink>(co, &ctx.control());
  FT_RETURN_IF_ERROR(
      run->ckpt_sink->Start(ckpt::SlotBytesFor(BuildShardContents(*run->engine, sizing, "{}"))));

  // Resume: the newest complete checkpoint that loads and verifies on every rank.
  // This start's generation: every shard this run writes carries it, so that a writer of an
  // earlier start that wakes up late is fenced off (ckpt/store.h). Rank 0 makes it.
  FT_ASSIGN_OR_RETURN(run->generation, AgreeOnGeneration(ctx, run->launch.fence_epoch));
  if (run->leader) FT_LOG(Info) << "checkpoint generation " << run->generation;
  FT_RETURN_IF_ERROR(OpenMirror(run.get()));
  FT_RETURN_IF_ERROR(OpenS3Root(ctx, cfg, run->generation, env));
  std::string resume_dir;
  FT_ASSIGN_OR_RETURN(run->resume_step,
                      Resume(cfg, ctx, *run->ckpt_sink, run->data_version, run->hardware,
                             *run->engine, &run->state, &resume_dir, run->launch, run->generation));
  if (run->mirror) run->mirror->Start();
  // Only a fresh start reads the base weights: a restart never needs the base directory.
  if (run->resume_step < 0 && cfg.train.init != "random") {
    FT_RETURN_IF_ERROR(LoadBaseWeights(cfg.train.init, ctx, *run->engine));
  }
  run->state.hf_files = std::move(hf.bytes);
  FT_RETURN_IF_ERROR(OpenReader(run.get()));
  FT_RETURN_IF_ERROR(CheckEvalData(cfg, ctx, env));
  PlanOptimizer(run.get());
  if (run->leader) {
    FT_ASSIGN_OR_RETURN(run->metrics,
                        MetricsWriter::Open(RunLayout(cfg.run_dir).metrics(), run->state.step,
                                            run->state.metrics_line));
    SinkContext sink{world.world_size, run->dev.cuda_index, run->engine->NumParameters(),
                     run->resume_step};
    sink.node = run->launch.CkptdNodeId();
    sink.job_id = run->launch.job_id;
    sink.env = env;
    sink.attention_flops_per_token = 12.0 * static_cast<double>(cfg.model.num_layers) *
                                     static_cast<double>(cfg.model.hidden_size) *
                                     static_cast<double>(run->seq_len);
    FT_ASSIGN_OR_RETURN(run->sinks, MetricsSinks::Open(cfg, sink));
  }
  const auto param_dtype =
      cfg.train.param_dtype == Precision::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
  run->attention = model::AttentionBackend(
      cfg.model, torch::TensorOptions().dtype(param_dtype).device(run->dev.device), run->seq_len);
  if (run->leader) FT_LOG(Info) << "attention: scaled_dot_product_attention, " << run->attention;
  run->layout = LayoutJson(*run);
  FT_RETURN_IF_ERROR(StartPhases(run.get()));
  StartCheckpoints(run.get());
  FT_ASSIGN_OR_RETURN(run->faults, FaultPlanFromEnv());
  DropFiredFaults(RunLayout(cfg.run_dir).faults_fired(), &run->faults);
  run->guard = std::make_unique<StepGuard>(cfg.guard, cfg.data.skip);
  run->guard->Restore(run->state.guard_norms, run->state.skipped, run->state.guard_recent);
  FT_RETURN_IF_ERROR(ApplyRollbacks(run.get()));
  run->engine->set_guard_nonfinite(run->guard->nonfinite_on());
  StartSdcCheck(run.get());
  const char* io_env = std::getenv("FTRAIN_HANG_IO_S");  // deprecated: guard.hang_io_s
  FT_ASSIGN_OR_RETURN(run->hang_io_s, HangIoAllowance(io_env, cfg.guard.hang_io_s));
  if (io_env != nullptr && *io_env != '\0' && run->leader) {
    FT_LOG(Warning) << "FTRAIN_HANG_IO_S is deprecated and goes in a later release: set "
                    << "guard.hang_io_s = " << io_env << " in the config instead (the variable "
                    << "overrides guard.hang_io_s = " << cfg.guard.hang_io_s << " for now)";
  }
  StartHangWatch(run.get());
  if (run->leader && !cfg.data.skip.empty()) {
    FT_LOG(Info) << "guard: data.skip lists " << cfg.data.skip.size()
                 << " steps, read and not trained on";
  }
  return run;
}

// The faults FTRAIN_FAULT arms for `step` on this rank (testing only). One that ends the
// process is recorded first, so that the job's restart does not meet it again.
Status ArmFaults(Run& run, int64_t step) {
  if (run.faults.empty()) return Status::Ok();
  fsdp::InjectedFault f;
  for (const Fault& x : run.faults.At(step, run.ctx->world().rank)) {
    if (FiresOncePerRun(x.kind)) {
      FT_RETURN_IF_ERROR(RecordFiredFault(RunLayout(run.cfg.run_dir).faults_fired(), x));
    }
    f.nan_loss |= x.kind == FaultKind::kNanLoss;
    f.nan_grad |= x.kind == FaultKind::kNanGrad;
    if (x.kind == FaultKind::kSpike) f.grad_factor = run.faults.spike_factor;
    run.flip_after_step |= x.kind == FaultKind::kBitflip;
    if (x.kind == FaultKind::kStall) return Stall(step, run.ctx->world().rank);
    FT_LOG(Warning) << "FTRAIN_FAULT: injecting " << FaultKindName(x.kind) << " into step " << step
                    << " on rank " << run.ctx->world().rank;
  }
  if (f.any()) run.engine->InjectFault(f);
  return Status::Ok();
}

// One optimizer step up to the boundary: its micro-batches and the update, or, for a step
// data.skip names, only its reads. The guard decides from the all-reduced gradient norm, the
// same value on every rank; its record goes into the run state the checkpoints carry.
struct StepResult {
  fsdp::StepStats stats;
  double data_wait_s = 0;
  double loss = 0;      // this rank's mean micro-batch loss
  std::string skipped;  // why the update was not applied; empty: applied
  TimeVotes votes;      // this rank's wall-clock checkpoint votes
};
StatusOr<StepResult> TrainStep(Run& run, int64_t step, double lr) {
  const TrainConfig& cfg = run.cfg;
  const int64_t K = cfg.train.grad_accum;
  // Micro-batches the reader yields per step (all of the step's with exact, which deals them).
  const int64_t M = cfg.dist.exact_reduce ? cfg.dist.ExactMicroBatches(cfg.train) : K;
  StepResult out;
  MicroBatches mb;
  if (run.guard->Listed(step + 1)) {
    FT_ASSIGN_OR_RETURN(mb, SkipMicroBatches(*run.reader, M, *run.hang, step + 1));
    out.stats.skipped = true;
    out.stats.grad_norm = std::nan("");
    out.loss = std::nan("");
    out.skipped = run.guard->ListedReason(step + 1);
  } else {
    FT_RETURN_IF_ERROR(ArmFaults(run, step + 1));
    const MicroBatchSource src{*run.reader, run.dev.device, cfg.model.vocab_size, *run.hang,
                               step + 1};
    if (cfg.dist.exact_reduce) {
      FT_ASSIGN_OR_RETURN(mb, RunMicroBatchesExact(src, *run.engine, M, run.ctx->world(),
                                                   {cfg.train.micro_batch, run.seq_len + 1}));
    } else {
      FT_ASSIGN_OR_RETURN(mb, RunMicroBatches(src, *run.engine, K));
    }
  }
  out.data_wait_s = mb.data_wait_s;
  run.clock->ComputeEnd(mb.data_wait_s);
  // The snapshot hand-offs may wait for ckptd's slots: a checkpoint's allowance, not a step's.
  run.hang->Enter(step + 1, HangPhase::kCheckpoint);
  run.checkpoints->BeforeOptimizerStep();  // a snapshot still copying off the GPU goes first
  run.hang->Enter(step + 1, HangPhase::kOptimizer);
  if (out.skipped.empty()) {
    StepGuard* guard = run.guard.get();
    FT_ASSIGN_OR_RETURN(out.stats,
                        run.engine->Step(run.adamw, lr, cfg.train.clip,
                                         [guard](double norm) { return guard->IsSpike(norm); }));
    // exact: the loss summed over the step's M micro-batches of all ranks (an integer sum).
    out.loss = out.stats.loss_sum / static_cast<double>(M);
    if (out.stats.skipped) out.skipped = run.guard->ReasonFor(out.stats.grad_norm);
  }
  if (run.flip_after_step) {
    run.flip_after_step = false;
    FT_LOG(Warning) << "FTRAIN_FAULT: flipped " << FlipMasterBit(*run.engine) << " after step "
                    << step + 1 << " on rank " << run.ctx->world().rank;
  }
  run.clock->OptimizerEnd(out.stats.comm_wait_s, out.stats.comm_wait_fb_s);
  run.clock->NoteBytesRead(run.reader->stats().bytes_read);
  run.hang->Enter(step + 1, HangPhase::kCheckpoint);
  out.votes = run.checkpoints->AfterOptimizerStep();  // the snapshot goes to ckptd
  run.hang->Enter(step + 1, HangPhase::kOptimizer);
  FT_RETURN_IF_ERROR(run.guard->Record(step + 1, out.stats.grad_norm, out.skipped));
  run.state.guard_norms = run.guard->norms();
  run.state.guard_recent = run.guard->recent();
  run.state.skipped = run.guard->skipped();
  if (run.guard->readmitted() && run.leader) {
    FT_LOG(Warning) << "guard: step " << step + 1 << " applied (grad norm " << out.stats.grad_norm
                    << "): it and the steps skipped just before agree on "
                    << "a new level; the spike window restarts from them";
  }
  if (!out.skipped.empty() && run.leader) {
    FT_LOG(Warning) << "guard: step " << step + 1 << " not applied (" << out.skipped
                    << ", grad norm " << out.stats.grad_norm
                    << "); a run given --data.skip=" << step + 1 << " reproduces it";
  }
  return out;
}

// Rank 0's record of a finished step: metrics.jsonl, the sinks, the progress line.
Status RecordStep(Run& run, records::StepMetrics& m, Clock::time_point t0,
                  const BoundarySave& saved) {
  if (saved.saved) run.sinks->NoteCheckpoint(m.step, saved.durable);
  m.ckpt_stall_s = saved.stall_s;
  m.step_time_s = Seconds(t0, Clock::now());
  // The record's time is the step's end, checkpoint included, so time - step_time_s is its
  // start (ftrain report's goodput adds step times up against wall time).
  m.unix_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  FT_RETURN_IF_ERROR(run.metrics->Append(m));
  run.sinks->Publish(m);
  return Status::Ok();
}

// Whether step `r` rolls the run back: guard.policy = rollback and the guard, not data.skip
// or an earlier rollback, kept it from being applied (the same decision on every rank).
bool MustRollBack(const Run& run, const StepResult& r) {
  return run.cfg.guard.policy == GuardPolicy::kRollback &&
         (r.skipped == "nonfinite" || r.skipped == "spike");
}

// Ends this start so that the next resumes from the newest restorable snapshot and skips up
// to `step` (train/verdicts/rollback.h). Rank 0 records it; a spent budget ends the run (exit 2).
Status RollBack(Run& run, int64_t step, const StepResult& r, int* exit_code) {
  FT_ASSIGN_OR_RETURN(std::vector<RollbackRecord> past, ReadRollbacks(run.cfg.run_dir, run.env));
  FT_RETURN_IF_ERROR(CheckRollbackBudget(past, step, run.cfg.guard));
  if (run.leader) {
    RollbackRecord rec{step, r.skipped, run.resume_step};
    FT_RETURN_IF_ERROR(AppendRollback(run.cfg.run_dir, rec, r.stats.grad_norm));
    FT_LOG(Error) << "guard: step " << step << " " << r.skipped << " (gradient norm "
                  << r.stats.grad_norm << "): ROLLING BACK to the newest restorable snapshot; "
                  << "the next start skips every step after it up to " << step << " (exit "
                  << kExitRollback << ": restart me)";
  }
  // No rank exits before the record is durable: the controller checks it, and the next start
  // skips by it (without it the same step would roll back again, for ever).
  FT_RETURN_IF_ERROR(run.ctx->control().Barrier()->Wait());
  *exit_code = kExitRollback;
  return Status::Ok();
}

}  // namespace

Status RunTraining(const TrainConfig& cfg, const records::LaunchContext& launch, Env* env,
                   int* exit_code) {
  *exit_code = 0;
  FT_ASSIGN_OR_RETURN(std::unique_ptr<Run> run, StartRun(cfg, launch, env));
  RunState& state = run->state;
  const int64_t tokens_per_step = run->effective_batch * run->seq_len;
  CheckpointCoordinator& ckpt = *run->checkpoints;
  const auto run_start = Clock::now();
  const int64_t start_step = state.step;
  // The loop: micro-batches, optimizer step, then the boundary work (decisions, metrics,
  // checkpoint, progress, stop).
  const int64_t last = cfg.train.LastStep();  // train.stop_after: the schedule stays steps'
  for (int64_t step = state.step; step < last; ++step) {
    const auto t0 = Clock::now();
    run->profiler->BeginStep(step + 1);
    run->clock->StepStart();
    run->hang->Enter(step + 1, HangPhase::kCompute);
    AddDueSuspects(run.get(), step);
    const double lr = run->sched.At(step);
    FT_ASSIGN_OR_RETURN(StepResult r, TrainStep(*run, step, lr));
    run->hang->Enter(step + 1, HangPhase::kBoundary);
    if (MustRollBack(*run, r)) return RollBack(*run, step + 1, r, exit_code);
    const fsdp::StepStats& stats = r.stats;
    state.step = step + 1;
    state.tokens += tokens_per_step;

    FT_ASSIGN_OR_RETURN(BoundaryDecision at, DecideAtBoundary(*run->ctx, r.loss, r.votes.disk,
                                                              r.votes.memory, *run->clock));
    const bool snapshot_due = ckpt.DiskDue(state.step, at.time_due, at.stop) ||
                              ckpt.MemoryDue(state.step, at.memory_time_due);
    FT_ASSIGN_OR_RETURN(bool corrupt, SdcMismatch(*run, state.step, snapshot_due));
    if (corrupt) {
      *exit_code = kExitSdc;
      return Status::Ok();
    }
    records::StepMetrics m =
        MeasureStep(state, at.loss, lr, stats, r.data_wait_s, t0, tokens_per_step);
    m.skipped = r.skipped;
    if (run->leader) {
      run->sinks->AddHealth(&m);
      AddAllocatorStats(run->dev.cuda_index, &m);
      SetReadLatency(run->reader->TakeReadLatencies(), &m);
      auto phases =
          std::make_shared<records::PhaseSummary>(run->phases->Observe(state.step, at.phases));
      phases->comm_bytes = static_cast<double>(stats.comm_bytes);
      m.phases = std::move(phases);
    }
    // Before the checkpoint, so that the line it carries has the held-out loss too.
    run->hang->Enter(state.step, HangPhase::kEval);
    FT_RETURN_IF_ERROR(
        EvalAtBoundary(cfg, *run->engine, *run->ctx, state.step, at.stop, run->env, &m));
    run->hang->Enter(state.step, HangPhase::kCheckpoint);
    FT_ASSIGN_OR_RETURN(BoundarySave saved,
                        ckpt.AtBoundary(state.step, {at.time_due, at.memory_time_due}, at.stop, m));
    run->hang->Enter(state.step, HangPhase::kBoundary);
    if (run->leader) {
      // metrics.jsonl, TensorBoard, Prometheus: storage, under the I/O allowance.
      run->hang->Enter(state.step, HangPhase::kIo);
      FT_RETURN_IF_ERROR(RecordStep(*run, m, t0, saved));
      run->hang->Enter(state.step, HangPhase::kBoundary);
      if (state.step % cfg.train.log_every == 0 || state.step == last || at.stop) {
        LogProgress(cfg, m, Seconds(run_start, Clock::now()), state.step - start_step,
                    saved.stall_s > 0);
      }
    }
    run->profiler->EndStep(state.step);
    // The first step of a start (compile, warm-up, a cold cache) does not predict the others.
    if (step > start_step) run->hang->StepTook(Seconds(t0, Clock::now()));
    if (at.stop) {
      FT_LOG(Warning) << "stop requested by signal: checkpointed step " << ckpt.last_saved()
                      << "; exiting with " << kExitRequeue << " (requeue me)";
      *exit_code = kExitRequeue;
      FinishMirror(*run);
      return Status::Ok();
    }
  }
  run->hang->Enter(state.step, HangPhase::kDone);
  if (run->leader) {
    FT_LOG(Info) << "train: done at step " << state.step
                 << (last < cfg.train.steps ? " (train.stop_after; the schedule runs to " +
                                                  std::to_string(cfg.train.steps) + ")"
                                            : "");
  }
  FinishMirror(*run);
  return Status::Ok();
}

}  // namespace ftrain::train
