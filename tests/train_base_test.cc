// Unit tests of the training base (ftrain_train_base, no LibTorch): TrainConfig::Load's
// defaults and validation messages (each names the key and where its value came from), what
// ConfigHash leaves out, the warm-up + cosine LR schedule, and the metrics writer's truncation
// and resume line. Label: unit; runs in well under a second.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "records/json_lines.h"
#include "records/metrics_record.h"
#include "test_util.h"
#include "train/config/lr_schedule.h"
#include "train/config/train_config.h"
#include "train/telemetry/metrics.h"
#include "train/verdicts/resume_verdict.h"

namespace ftrain::train {
namespace {

using ::ftrain::records::AppendJsonLine;
using ::ftrain::records::FormatMetricsLine;
using ::ftrain::records::StepMetrics;
using ::ftrain::testing::Contains;
using ::ftrain::testing::TempDir;

// The smallest config Load accepts: a model, train.steps, data.path and run.dir.
constexpr char kMinimal[] = R"([model]
vocab_size = 512
hidden_size = 64
intermediate_size = 172
num_layers = 2
num_heads = 4
max_seq_len = 64
[train]
steps = 10
[data]
path = /data
[run]
dir = /run
)";

Config Minimal(const std::vector<std::string>& overrides = {}) {
  auto c = Config::Parse(kMinimal, "test.cfg");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& o : overrides) {
    const Status s = c->ApplyOverride(o);
    EXPECT_TRUE(s.ok()) << o << ": " << s.ToString();
  }
  return *c;
}

// The message Load fails with, or "" when it succeeds.
std::string LoadError(const std::vector<std::string>& overrides) {
  auto t = TrainConfig::Load(Minimal(overrides));
  if (t.ok()) return "";
  EXPECT_TRUE(t.status().IsInvalidArgument()) << t.status().ToString();
  return t.status().message();
}

TEST(TrainConfigLoad, DefaultsOfAMinimalConfig) {
  auto t = TrainConfig::Load(Minimal());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->train.steps, 10);
  EXPECT_EQ(t->train.micro_batch, 4);
  EXPECT_EQ(t->train.grad_accum, 1);
  EXPECT_DOUBLE_EQ(t->train.lr, 3e-4);
  EXPECT_DOUBLE_EQ(t->train.min_lr, 3e-5);  // lr / 10 when not given
  EXPECT_EQ(t->train.device, Device::kCpu);
  EXPECT_EQ(t->train.param_dtype, Precision::kFloat32);
  EXPECT_EQ(t->train.resume, "auto");
  EXPECT_EQ(t->dist.sharding, Sharding::kFullShard);
  EXPECT_EQ(t->dist.backend, "gloo");
  EXPECT_EQ(t->ckpt.root, "/run/checkpoints");
  EXPECT_EQ(t->ckpt.keep, 3);
  EXPECT_EQ(t->ckpt.daemon, DaemonMode::kAuto);
  EXPECT_EQ(t->model.num_kv_heads, 4);  // defaults to num_heads
  EXPECT_EQ(t->run_dir, "/run");
  EXPECT_EQ(t->data.path, "/data");
}

TEST(TrainConfigLoad, MemoryTierIsOffByDefaultAndReadsItsInterval) {
  auto off = TrainConfig::Load(Minimal());
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->ckpt.memory_every_steps, 0);
  auto on = TrainConfig::Load(Minimal({"--ckpt.memory_every_steps=5"}));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->ckpt.memory_every_steps, 5);
  EXPECT_EQ(off->ckpt.memory_every_seconds, 0);
  auto secs = TrainConfig::Load(Minimal({"--ckpt.memory_every_seconds=2.5"}));
  ASSERT_TRUE(secs.ok()) << secs.status().ToString();
  EXPECT_DOUBLE_EQ(secs->ckpt.memory_every_seconds, 2.5);
}

TEST(TrainConfigLoad, ResumeRetryDefaultsTo300SecondsAndRefusesNonsense) {
  auto def = TrainConfig::Load(Minimal());
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_DOUBLE_EQ(def->ckpt.resume_retry_s, 300);
  auto zero = TrainConfig::Load(Minimal({"--ckpt.resume_retry_s=0"}));
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_DOUBLE_EQ(zero->ckpt.resume_retry_s, 0);
  for (const std::string bad : {"-1", "1e9", "nan"}) {
    const std::string e = LoadError({"--ckpt.resume_retry_s=" + bad});
    EXPECT_NE(e.find("ckpt.resume_retry_s"), std::string::npos) << bad << ": " << e;
  }
}

// Issue 44, hole 1: an outage during resume (EIO, ESTALE, a file not found) is never damage.
TEST(ResumeVerdict, OnlyAVerifiedMismatchIsDamage) {
  EXPECT_EQ(ClassifyLoad(Status::Ok(), false), LoadOutcome::kLoaded);
  EXPECT_EQ(ClassifyLoad(Status::IOError("read: Input/output error"), true),
            LoadOutcome::kUnreadable);
  EXPECT_EQ(ClassifyLoad(Status::NotFound("shard-00001.h5"), true), LoadOutcome::kUnreadable);
  EXPECT_EQ(ClassifyLoad(Status::StorageUnavailable("root"), true), LoadOutcome::kUnreadable);
  // HDF5 reports an EIO while opening as a format error: damage only if it reads back in full.
  EXPECT_EQ(ClassifyLoad(Status::Corruption("HDF5 cannot open"), false), LoadOutcome::kUnreadable);
  EXPECT_EQ(ClassifyLoad(Status::Corruption("checksum mismatch"), true), LoadOutcome::kDamaged);
  EXPECT_EQ(ClassifyLoad(Status::InvalidArgument("config hash"), true), LoadOutcome::kRefused);
}

TEST(ResumeVerdict, AnOutageAnywhereIsRetriedNeverSetAsideAndGivesUpOnlyWhenExpired) {
  // damaged, unreadable, refused, expired, explicit path
  EXPECT_EQ(DecideResume(false, false, false, false, false), ResumeStep::kResume);
  EXPECT_EQ(DecideResume(true, false, false, false, false), ResumeStep::kFallBack);
  EXPECT_EQ(DecideResume(true, false, false, false, true), ResumeStep::kFail);
  // One rank saw damage, another could not read: nothing is set aside.
  EXPECT_EQ(DecideResume(true, true, false, false, false), ResumeStep::kRetry);
  EXPECT_EQ(DecideResume(false, true, false, false, true), ResumeStep::kRetry);
  EXPECT_EQ(DecideResume(false, true, false, true, false), ResumeStep::kGiveUp);
  EXPECT_EQ(DecideResume(true, true, false, true, false), ResumeStep::kGiveUp);
  EXPECT_EQ(DecideResume(false, true, true, false, false), ResumeStep::kFail);
}

TEST(ResumeVerdict, RetryWaitsDoubleToFifteenSecondsAndEndWithTheRetryTime) {
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(1, 300), 1);
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(2, 300), 2);
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(4, 300), 8);
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(5, 300), 15);
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(50, 300), 15);
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(5, 3.5), 3.5);
  EXPECT_DOUBLE_EQ(RetryWaitSeconds(5, -1), 0);
  const std::string m = GiveUpMessage("step-00000040/manifest.json: EIO", 301, 300);
  EXPECT_NE(m.find("ckpt.resume_retry_s = 300"), std::string::npos) << m;
  EXPECT_NE(m.find("nothing was moved aside"), std::string::npos) << m;
  EXPECT_NE(m.find("74"), std::string::npos) << m;
}

// train.ac_every: selective checkpointing by layer; meaningless without checkpointing.
TEST(TrainConfigLoad, AcEveryIsSelectiveCheckpointingAndNeedsCheckpointing) {
  auto def = TrainConfig::Load(Minimal());
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->train.ac_every, 1);
  auto two = TrainConfig::Load(Minimal({"--train.ac_every=2"}));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->train.ac_every, 2);
  for (const auto& [args, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--train.ac_every=0"}, "train.ac_every must be in [1, 1000]"},
           {{"--train.activation_checkpointing=false", "--train.ac_every=2"},
            "train.ac_every is set but train.activation_checkpointing = false"}}) {
    auto bad = TrainConfig::Load(Minimal(args));
    ASSERT_FALSE(bad.ok()) << args[0];
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
  }
}

TEST(TrainConfigLoad, OverridesWinAndCkptRootFollowsTheKey) {
  auto t = TrainConfig::Load(Minimal({"--train.min_lr=0.5", "--ckpt.root=/elsewhere"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_DOUBLE_EQ(t->train.min_lr, 0.5);
  EXPECT_EQ(t->ckpt.root, "/elsewhere");
}

TEST(TrainConfigLoad, MessagesNameTheKeyAndItsOrigin) {
  struct Case {
    std::vector<std::string> overrides;
    std::vector<std::string> want;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {{"--train.micro_batch=0"}, {"command line", "train.micro_batch must be > 0, got 0"}},
      {{"--train.grad_accum=-2"}, {"train.grad_accum must be > 0"}},
      {{"--train.threads=0"}, {"train.threads must be > 0"}},
      {{"--train.lr=0"}, {"train.lr must be > 0"}},
      {{"--train.warmup_steps=-1"}, {"train.warmup_steps must be >= 0"}},
      {{"--train.beta1=1"}, {"train.beta1/beta2 must be in [0, 1)"}},
      {{"--train.param_dtype=fp16"},
       {"train.param_dtype = 'fp16' is not one of float32, bfloat16"}},
      {{"--train.device=tpu"}, {"train.device = 'tpu' is not one of cpu, cuda"}},
      {{"--dist.sharding=zero3"}, {"dist.sharding = 'zero3'", "hybrid_shard"}},
      {{"--train.device=cuda"}, {"train.device = cuda needs dist.backend = nccl"}},
      {{"--dist.backend=nccl"}, {"dist.backend = nccl needs train.device = cuda"}},
      {{"--ckpt.daemon=sometimes"}, {"ckpt.daemon = 'sometimes' is not one of off, auto, require"}},
      {{"--ckpt.flush_timeout_s=0"}, {"command line", "ckpt.flush_timeout_s must be > 0 seconds"}},
      {{"--ckpt.keep=0"}, {"keep >= 1"}},
      {{"--ckpt.zstd_level=23"}, {"zstd_level in [0, 22]"}},
      {{"--ckpt.memory_every_steps=-1"},
       {"command line", "ckpt.memory_every_steps must be in [0, 100000000]", "got -1"}},
      {{"--ckpt.memory_every_steps=x"}, {"ckpt.memory_every_steps"}},
      {{"--ckpt.memory_every_seconds=-1"},
       {"command line", "ckpt.memory_every_seconds must be in [0, 1e9]", "got -1"}},
      {{"--ckpt.memory_every_seconds=soon"}, {"ckpt.memory_every_seconds"}},
      {{"--ckpt.memory_every_seconds=nan"}, {"ckpt.memory_every_seconds"}},
      {{"--train.steps=x"}, {"train.steps"}},
      {{"--train.resume="}, {"train.resume must be auto, none or a path"}},
      {{"--data.prefetch_depth=-1"}, {"data.prefetch_depth must be >= 0"}},
      {{"--train.stepz=3"}, {"train.stepz"}},  // unknown keys are refused by name
  };
  for (const auto& c : cases) {
    const std::string m = LoadError(c.overrides);
    ASSERT_FALSE(m.empty()) << c.overrides[0] << " was accepted";
    for (const auto& w : c.want) EXPECT_TRUE(Contains(m, w)) << c.overrides[0] << ": " << m;
  }
}

// dist.sharding is parsed once, at load: each spelling reads as its strategy and prints back
// as written (logs and checkpoint layouts print it), and a bad one gets the same message, to the
// byte, as every other key with a fixed set of values.
TEST(TrainConfigLoad, ShardingIsParsedOnceAndPrintsAsWritten) {
  for (const char* name : {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard"}) {
    auto t = TrainConfig::Load(Minimal({std::string("--dist.sharding=") + name}));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_STREQ(ShardingName(t->dist.sharding), name);
    auto parsed = ParseSharding(name);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, t->dist.sharding);
  }
  EXPECT_EQ(LoadError({"--dist.sharding=zero3"}),
            "command line: dist.sharding = 'zero3' is not one of full_shard, shard_grad_op, "
            "no_shard, hybrid_shard");
  auto file = Config::Parse(std::string(kMinimal) + "[dist]\nsharding = ddp\n", "test.cfg");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto t = TrainConfig::Load(*file);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "test.cfg:15: dist.sharding = 'ddp' is not one of full_shard, shard_grad_op, "
            "no_shard, hybrid_shard");
}

TEST(TrainConfigLoad, RequiredKeysAreNamed) {
  auto c = Config::Parse(
      "[model]\nvocab_size = 512\nhidden_size = 64\nintermediate_size = 172\n"
      "num_layers = 2\nnum_heads = 4\nmax_seq_len = 64\n[data]\npath = /d\n"
      "[run]\ndir = /r\n",
      "no-steps.cfg");
  ASSERT_TRUE(c.ok());
  auto t = TrainConfig::Load(*c);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "'train.steps' is required")) << t.status().message();
  for (const char* key : {"data.path", "run.dir"}) {
    auto without = Config::Parse(kMinimal, "test.cfg");
    ASSERT_TRUE(without.ok());
    Config partial;
    for (const auto& [k, e] : without->entries()) {
      if (k != key) partial.Set(k, e.value, e.origin);
    }
    auto r = TrainConfig::Load(partial);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_TRUE(Contains(r.status().message(), key)) << r.status().message();
  }
}

TEST(TrainConfigLoad, BadFileValueNamesFileAndLine) {
  auto c = Config::Parse(std::string(kMinimal) + "[ckpt]\nkeep = 0\n", "run.cfg");
  ASSERT_TRUE(c.ok());
  auto t = TrainConfig::Load(*c);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "keep >= 1")) << t.status().message();
  auto d = Config::Parse(std::string(kMinimal) + "[ckpt]\nflush_timeout_s = -1\n", "run.cfg");
  ASSERT_TRUE(d.ok());
  auto u = TrainConfig::Load(*d);
  ASSERT_FALSE(u.ok());
  EXPECT_TRUE(Contains(u.status().message(), "run.cfg:15: ckpt.flush_timeout_s"))
      << u.status().message();
}

// train.stop_after ends a start early with the schedule of train.steps; past the end or
// negative is refused naming the key, and how to train longer instead.
TEST(TrainConfigLoad, StopAfterEndsTheStartEarlyAndIsAtMostSteps) {
  auto t = TrainConfig::Load(Minimal({"--train.stop_after=4"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->train.LastStep(), 4);
  EXPECT_EQ(t->train.steps, 10);
  EXPECT_EQ(TrainConfig::Load(Minimal({}))->train.LastStep(), 10);
  for (const char* bad : {"--train.stop_after=11", "--train.stop_after=-1"}) {
    const std::string e = LoadError({bad});
    EXPECT_TRUE(Contains(e, "train.stop_after")) << bad << ": " << e;
    EXPECT_TRUE(Contains(e, "raise train.steps")) << bad << ": " << e;
  }
}

std::string HashOf(const std::vector<std::string>& overrides) {
  auto t = TrainConfig::Load(Minimal(overrides));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? t->ConfigHash() : "";
}

TEST(TrainConfigHash, PathsPolicyAndDeviceAreExcluded) {
  const std::string base = HashOf({});
  EXPECT_EQ(base.size(), 16u);
  for (const char* o :
       {"--run.dir=/other", "--ckpt.keep=9", "--ckpt.every_steps=5", "--ckpt.root=/r2",
        "--train.resume=none", "--train.allow_resume_mismatch=true", "--train.log_every=7",
        "--data.path=/d2", "--data.prefetch_depth=1", "--dist.rdzv_timeout_s=9",
        "--train.init=/w.safetensors", "--ckpt.memory_every_steps=5", "--ckpt.memory_every_steps=0",
        "--ckpt.memory_every_seconds=7", "--train.stop_after=4"}) {
    EXPECT_EQ(HashOf({o}), base) << o << " changed the config hash";
  }
}

TEST(TrainConfigHash, WhatChangesTheBitsIsIncluded) {
  const std::string base = HashOf({});
  for (const char* o :
       {"--train.lr=0.001", "--train.seed=7", "--train.threads=2", "--train.micro_batch=2",
        "--train.param_dtype=bfloat16", "--dist.sharding=no_shard", "--model.rope_theta=500000",
        "--train.warmup_steps=3", "--train.steps=4"}) {
    EXPECT_NE(HashOf({o}), base) << o << " did not change the config hash";
  }
  EXPECT_EQ(HashOf({}), base);  // a pure function of the config
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  LrSchedule s;
  s.peak_lr = 1.0;
  s.min_lr = 0.1;
  s.warmup_steps = 4;
  s.total_steps = 14;
  EXPECT_DOUBLE_EQ(s.At(0), 0.25);  // the first update already has a non-zero rate
  EXPECT_DOUBLE_EQ(s.At(1), 0.5);
  EXPECT_DOUBLE_EQ(s.At(3), 1.0);
  EXPECT_DOUBLE_EQ(s.At(4), 1.0);                                        // decay starts at the peak
  EXPECT_NEAR(s.At(9), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.5)), 1e-15);  // half way
  EXPECT_DOUBLE_EQ(s.At(14), 0.1);
  EXPECT_DOUBLE_EQ(s.At(1000), 0.1);  // past the end: stays at min_lr
  for (int64_t i = 4; i < 14; ++i) EXPECT_GE(s.At(i), s.At(i + 1)) << i;
}

TEST(LrSchedule, NoWarmupAndDegenerateLengths) {
  LrSchedule s;
  s.peak_lr = 2.0;
  s.min_lr = 0.0;
  s.warmup_steps = 0;
  s.total_steps = 1;
  EXPECT_DOUBLE_EQ(s.At(0), 2.0);
  EXPECT_DOUBLE_EQ(s.At(1), 0.0);
  s.warmup_steps = 5;
  s.total_steps = 3;  // warm-up longer than the run: decay length clamps to 1
  EXPECT_DOUBLE_EQ(s.At(4), 2.0);
  EXPECT_DOUBLE_EQ(s.At(5), 2.0);
  EXPECT_DOUBLE_EQ(s.At(6), 0.0);
}

TEST(LrSchedule, LinearScaling) {
  EXPECT_DOUBLE_EQ(ScaleLrLinearly(3e-4, 512, 256), 6e-4);
  EXPECT_DOUBLE_EQ(ScaleLrLinearly(3e-4, 128, 256), 1.5e-4);
  EXPECT_DOUBLE_EQ(ScaleLrLinearly(3e-4, 512, 0), 3e-4);  // base 0: unchanged
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

StepMetrics Step(int64_t step, float loss) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.lr = 1e-3;
  return m;
}

TEST(MetricsLine, LossRoundTripsExactly) {
  const float loss = 6.2383413f;  // not a short decimal
  const std::string line = FormatMetricsLine(Step(3, loss));
  EXPECT_EQ(line.front(), '{');
  EXPECT_EQ(line.back(), '}');
  EXPECT_TRUE(Contains(line, "\"step\":3,")) << line;
  const auto pos = line.find("\"loss\":");
  ASSERT_NE(pos, std::string::npos);
  EXPECT_EQ(std::strtof(line.c_str() + pos + 7, nullptr), loss) << line;
  for (const char* key : {"lr", "grad_norm", "step_time_s", "tokens_per_s", "data_wait_s", "comm_s",
                          "ckpt_stall_s", "restart_count", "tokens", "time"}) {
    EXPECT_TRUE(Contains(line, std::string("\"") + key + "\":")) << key << " in " << line;
  }
}

TEST(MetricsWriter, AppendsOneLinePerStep) {
  TempDir tmp;
  const std::string path = tmp / "metrics.jsonl";
  auto w = MetricsWriter::Open(path, 0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int64_t s = 1; s <= 3; ++s) ASSERT_TRUE((*w)->Append(Step(s, 1.0f * s)).ok());
  const auto lines = Lines(ReadAll(path));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], FormatMetricsLine(Step(3, 3.0f)));
}

TEST(MetricsWriter, ResumeDropsLinesPastTheCheckpointAndTornLines) {
  TempDir tmp;
  const std::string path = tmp / "metrics.jsonl";
  {
    std::ofstream out(path);
    for (int64_t s = 1; s <= 5; ++s) out << FormatMetricsLine(Step(s, 1.0f)) << "\n";
    out << "{\"step\":6,\"loss\":1";  // torn by a crash mid-write
  }
  auto w = MetricsWriter::Open(path, 3);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Append(Step(4, 2.0f)).ok());
  const auto lines = Lines(ReadAll(path));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2], FormatMetricsLine(Step(3, 1.0f)));
  EXPECT_EQ(lines[3], FormatMetricsLine(Step(4, 2.0f)));  // the resumed run's step 4
}

TEST(MetricsWriter, ResumeLineFillsTheStepTheDeadRunNeverAppended) {
  TempDir tmp;
  const std::string path = tmp / "metrics.jsonl";
  {
    std::ofstream out(path);
    for (int64_t s = 1; s <= 2; ++s) out << FormatMetricsLine(Step(s, 1.0f)) << "\n";
  }
  const std::string saved = FormatMetricsLine(Step(3, 7.0f));  // from the checkpoint
  auto w = MetricsWriter::Open(path, 3, saved);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto lines = Lines(ReadAll(path));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], saved);
  // When the file already has that step, the saved line is not added a second time.
  w->reset();
  auto again = MetricsWriter::Open(path, 3, saved);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Lines(ReadAll(path)).size(), 3u);
}

TEST(MetricsWriter, NewFileAndUnwritableDirectory) {
  TempDir tmp;
  auto fresh = MetricsWriter::Open(tmp / "m.jsonl", 0, "");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(ReadAll(tmp / "m.jsonl"), "");
  auto bad = MetricsWriter::Open(tmp / "no/such/dir/m.jsonl", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kIOError);
  EXPECT_TRUE(Contains(bad.status().message(), "no/such/dir/m.jsonl")) << bad.status().message();
}

TEST(AppendJsonLine, AppendsWholeLines) {
  TempDir tmp;
  const std::string path = tmp / "restarts.jsonl";
  ASSERT_TRUE(AppendJsonLine(path, "{\"a\":1}").ok());
  ASSERT_TRUE(AppendJsonLine(path, "{\"b\":2}").ok());
  EXPECT_EQ(ReadAll(path), "{\"a\":1}\n{\"b\":2}\n");
  const Status s = AppendJsonLine(tmp / "missing/x.jsonl", "{}");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "missing/x.jsonl")) << s.message();
}

}  // namespace
}  // namespace ftrain::train
