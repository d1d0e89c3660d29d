// Everything `ftrain train` reads from its config file and --section.key=value overrides,
// validated at start-up with messages that name the bad field (file:line). Each section is
// one struct; TrainConfig::Load reads them all and rejects unknown keys. No LibTorch here.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "core/config.h"
#include "core/sharding.h"
#include "core/status.h"
#include "formats/llama_config.h"
#include "train/verdicts/guard.h"

namespace ftrain::train {

// Where the engine's shards, gradients, optimizer state and activations live.
enum class Device { kCpu, kCuda };
const char* DeviceName(Device d);
// train.param_dtype / train.reduce_dtype.
enum class Precision { kFloat32, kBFloat16 };
const char* PrecisionName(Precision p);  // "float32", "bfloat16": the config's spelling
// ckpt.daemon: off | auto (use this node's ckptd if it runs) | require.
enum class DaemonMode { kOff, kAuto, kRequire };
const char* DaemonModeName(DaemonMode m);

struct OptimSection {
  int64_t steps = 0;  // optimizer steps of the whole run (required): the LR schedule's length
  // train.stop_after = N: this start ends after step N with a committed checkpoint and exit 0,
  // the schedule unchanged (0: off; at most train.steps). Not part of the config hash: a
  // resume with it reproduces step N of the run bit for bit (Megatron's --exit-interval).
  int64_t stop_after = 0;
  // The step this start ends after: stop_after when set, else steps.
  int64_t LastStep() const { return stop_after > 0 ? stop_after : steps; }
  int64_t micro_batch = 4;
  int64_t grad_accum = 1;
  // Sequences per optimizer step, all ranks together (dist.reduce = exact, where it is
  // required): global_batch / micro_batch micro-batches, dealt to ranks by global index.
  int64_t global_batch = 0;
  double lr = 3e-4;
  double min_lr = -1;  // default lr / 10
  int64_t warmup_steps = 0;
  bool lr_scale_with_batch = false;
  int64_t base_batch = 0;  // effective batch the lr was tuned for (linear scaling rule)
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double clip = 1.0;  // global gradient-norm clip; 0 = off
  int64_t seed = 1234;
  int64_t threads = 1;           // intra-op threads, fixed: part of what makes runs bit-exact
  Device device = Device::kCpu;  // train.device: cpu | cuda (one rank per GPU, needs nccl)
  Precision param_dtype = Precision::kFloat32;
  Precision reduce_dtype = Precision::kFloat32;
  bool activation_checkpointing = true;
  // Selective activation checkpointing by layer: with checkpointing on, every ac_every-th
  // layer (0, N, 2N, ...) is recomputed in the backward and the others keep their
  // activations (torchtitan's selective_ac_option = N). 1: every layer is recomputed.
  int64_t ac_every = 1;
  bool prefetch = true;
  std::string resume = "auto";  // auto | none | PATH of a complete checkpoint
  bool allow_resume_mismatch = false;
  std::string init = "random";  // random | path to model.safetensors or its index.json
  int64_t log_every = 1;
  // train.profile_steps = "A:B": record steps A..B (1-based, inclusive) with the Kineto
  // profiler into RUN/profile/trace-rank<R>.json; "" = off (train/profiler.h).
  std::string profile_steps;
  int64_t profile_first = 0, profile_last = -1;
};

struct DataSection {
  std::string path;  // packed directory or http(s):// URL (required)
  int64_t prefetch_depth = 4;
  // data.skip: optimizer steps whose batches are read and not trained on (train/verdicts/guard.h).
  std::set<int64_t> skip;
};

struct DistSection {
  Sharding sharding = Sharding::kFullShard;  // read with ParseSharding, printed with ShardingName
  std::string backend = "gloo";
  int64_t rdzv_timeout_s = 300;
  // A collective that has not finished in this long fails the rank with a message naming the
  // group and operation (a hung or dead peer never hangs a rank forever).
  int64_t timeout_s = 600;
  // dist.reduce: float (the gradient summed in floating point, in the collectives' order) or
  // exact (fixed-point sums, the same bits on any number of ranks: fsdp/exact.h).
  bool exact_reduce = false;
  // exact: micro-batches per optimizer step (train.global_batch / train.micro_batch).
  int64_t ExactMicroBatches(const OptimSection& o) const { return o.global_batch / o.micro_batch; }
};

struct CkptSection {
  // default <run.dir>/checkpoints. With ckpt.root = s3://B/P this is the staging root
  // (ckpt.staging, default <run.dir>/ckpt-staging) and s3_root holds the URL.
  std::string root;
  std::string s3_root;        // "s3://B/P" when ckpt.root is on S3 (ckpt/s3_staging.h)
  double every_minutes = 25;  // wall-clock interval; 0 = off
  int64_t every_steps = 0;    // step interval; 0 = off
  int64_t keep = 3;
  int64_t keep_every = 0;
  int64_t zstd_level = 1;
  bool shuffle = true;
  int64_t threads = 0;
  bool save_final = true;
  DaemonMode daemon = DaemonMode::kAuto;
  double flush_timeout_s = 600;     // max wait for the daemons at a stop / final checkpoint
  bool restore_from_memory = true;  // in-job restart: take ckptd's in-memory snapshot
  // Memory tier (train/checkpoint/memory_tier.h): every N steps a snapshot goes to this node's
  // ckptd and its buddy's memory, never to disk; 0 = off. Operational: not in ConfigHash.
  int64_t memory_every_steps = 0;
  // ... or every this many seconds (rank 0's clock, agreed at the step boundary like
  // every_minutes); 0 = off. Either interval turns the tier on. Operational too.
  double memory_every_seconds = 0;
  // The memory tier is on (either interval above): the trainer's schedule and the job
  // controller's replication default (orch/settings.cc) both ask this, never the keys.
  bool MemoryTierOn() const { return memory_every_steps > 0 || memory_every_seconds > 0; }
  // How long a resume retries checkpoint storage that cannot be read (I/O errors, files that
  // went missing) before the start gives up with exit 74 (train/checkpoint/resume.h). Nothing
  // unreadable is ever set aside. Operational: not in ConfigHash.
  double resume_retry_s = 300;
};

// Where the per-step metrics go besides RUN_DIR/metrics.jsonl, and what the derived ones
// need. None of it changes what is computed: excluded from ConfigHash.
struct MetricsSection {
  bool tensorboard = true;                   // RUN_DIR/tensorboard/events.out.tfevents.*
  std::string prometheus_dir;                // default RUN_DIR/prometheus; "off" = no .prom file
  double peak_tflops = 0;                    // per-device bf16 peak for mfu; 0 = from the GPU model
  double baseline_tokens_per_s_per_gpu = 0;  // single-GPU throughput: scaling_efficiency
  int64_t step_time_window = 100;            // steps in the step-time p50/p95
  int64_t rank_phases_every = 100;   // every N steps metrics.jsonl holds every rank's phases
  double straggler_threshold = 0.2;  // busy time above the median by more than this share
  int64_t straggler_window = 20;     // ... averaged over this many steps names a straggler
};

// [eval]: the held-out loss during training (train/eval/eval_loop.h), on the training engine.
// Changes nothing a run computes (not in ConfigHash): the training bits are the same with it
// on or off.
struct EvalSection {
  std::string path;         // packed directory or http(s):// URL of held-out data
  int64_t every_steps = 0;  // evaluate after every N-th step and after the last; 0 = off
  int64_t batches = 16;     // micro-batches of train.micro_batch rows, all ranks together
};

struct TrainConfig {
  LlamaConfig model;
  OptimSection train;
  DataSection data;
  DistSection dist;
  CkptSection ckpt;
  MetricsSection metrics;
  EvalSection eval;
  GuardSection guard;
  std::string run_dir;
  Config raw;  // what was read, for the resolved copy in the run directory

  // Reads every section; unknown keys and bad values fail with the key and its origin.
  static StatusOr<TrainConfig> Load(const Config& config);
  // The file at `path` with command-line overrides applied in order (`--section.key=value`,
  // the later wins), then Load: how `ftrain train` reads its config, and how the job controller
  // reads what the trainer it launches will run (orch/settings.h, TrainerConfig).
  static StatusOr<TrainConfig> LoadFile(const std::string& path,
                                        const std::vector<std::string>& overrides);
  // Hash of the settings that change the bits of a run (model, optimizer, schedule, seeds,
  // dtypes, threads, sharding); paths, checkpoint policy and metrics sinks are excluded.
  std::string ConfigHash() const;
};

}  // namespace ftrain::train
