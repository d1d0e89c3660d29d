// The metrics sinks (no LibTorch, no training): TensorBoard event files read back by the real
// `tensorboard` package (EventAccumulator) with exact steps and values, a resumed writer's
// events replacing a crashed one's; Prometheus textfiles parsed by prometheus_client and
// replaced atomically under a concurrent reader; NVML absent (fields omitted) and a stand-in
// NVML (fields present); MFU arithmetic, the peak table and step-time percentiles; the
// metrics.jsonl line with and without the optional fields; the metrics.* config keys.
#include "train/telemetry/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/config.h"
#include "core/prom_textfile.h"
#include "test_util.h"
#include "train/config/train_config.h"
#include "train/telemetry/gpu_health.h"
#include "train/telemetry/metrics_sinks.h"
#include "train/telemetry/tensorboard.h"

namespace ftrain::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using records::FormatMetricsLine;
using records::StepMetrics;
using testing::RunCommand;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/ftrain-metrics-test-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::unsetenv("SLURM_JOB_ID");  // the .prom file names and labels below assume none
  }
  void TearDown() override { fs::remove_all(dir_); }

  // {tag: [[step, value], ...]} as TensorBoard itself reads `logdir`.
  static json ReadTensorBoard(const std::string& logdir) {
    auto r = RunCommand(std::string("PYTHONPATH=") + FTRAIN_TENSORBOARD_PYTHONPATH +
                            " /usr/bin/python3 " + FTRAIN_SOURCE_DIR +
                            "/tests/read_tensorboard.py " + logdir + " 2>" + logdir + ".err",
                        120);
    EXPECT_EQ(r.exit_code, 0) << "tensorboard could not read " << logdir << " (is the "
                              << "tensorboard package in " << FTRAIN_TENSORBOARD_PYTHONPATH
                              << "? run scripts/install-deps.sh)\n"
                              << r.output << ReadAll(logdir + ".err");
    return r.exit_code == 0 ? json::parse(r.output) : json::object();
  }
  // The samples of a .prom file as prometheus_client parses them.
  static json ParseProm(const std::string& path) {
    auto r = RunCommand(
        "/usr/bin/python3 " + std::string(FTRAIN_SOURCE_DIR) + "/tests/parse_prom.py " + path, 60);
    EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << ReadAll(path);
    return r.exit_code == 0 ? json::parse(r.output) : json::array();
  }
  static const json* Sample(const json& samples, const std::string& name) {
    for (const json& s : samples) {
      if (s["name"] == name) return &s;
    }
    return nullptr;
  }

  std::string dir_;
};

TEST_F(MetricsTest, TfRecordFramingMatchesKnownCrc32c) {
  // CRC-32C("123456789") = 0xE3069283, the standard check value; masked as TFRecord does.
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(MaskedCrc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  const std::string rec = FrameTfRecord("abc");
  ASSERT_EQ(rec.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(static_cast<unsigned char>(rec[0]), 3);
  EXPECT_EQ(rec.substr(12, 3), "abc");
}

TEST_F(MetricsTest, TensorBoardReadsExactScalarsAndAResumeReplacesOrphanedSteps) {
  const std::string logdir = dir_ + "/tb";
  // First process: steps 1..5, then "crashes" (its last checkpoint was step 3).
  {
    auto w = TensorBoardWriter::Open(logdir, 1, 1700000000.0);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int step = 1; step <= 5; ++step) {
      ASSERT_TRUE((*w)->WriteScalars(step, 1700000000.0 + step,
                                     {{"train/loss", 0.5f * step}, {"perf/tokens_per_s", 1024.0f}})
                      .ok());
    }
  }
  // The resumed process: a new file, starting at step 4 with other values.
  {
    auto w = TensorBoardWriter::Open(logdir, 4, 1700000100.0);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_NE((*w)->path().find("/events.out.tfevents.1700000100."), std::string::npos);
    for (int step = 4; step <= 6; ++step) {
      ASSERT_TRUE(
          (*w)->WriteScalars(step, 1700000100.0 + step,
                             {{"train/loss", 10.0f + 0.25f * step}, {"perf/tokens_per_s", 2048.0f}})
              .ok());
    }
  }
  const json tb = ReadTensorBoard(logdir);
  const json want_loss =
      json::array({{1, 0.5}, {2, 1.0}, {3, 1.5}, {4, 11.0}, {5, 11.25}, {6, 11.5}});
  EXPECT_EQ(tb["train/loss"], want_loss) << tb.dump();
  const json want_tps =
      json::array({{1, 1024.0}, {2, 1024.0}, {3, 1024.0}, {4, 2048.0}, {5, 2048.0}, {6, 2048.0}});
  EXPECT_EQ(tb["perf/tokens_per_s"], want_tps) << tb.dump();
}

TEST_F(MetricsTest, PromTextParsesWithHelpTypeLabelsAndValues) {
  auto p = PromTextfile::Open(dir_ + "/prom/sub", "x.prom",
                              {{"slurm_job_id", "42"}, {"node", "n\"0\\"}, {"rank", "0"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->Write({{"ftrain_step", "Steps done.", false, 17},
                           {"ftrain_tokens_total", "Tokens.", true, 123456789},
                           {"ftrain_loss", "Loss with \"quotes\".", false, 2.718281828459045}})
                  .ok());
  const std::string text = ReadAll((*p)->path());
  EXPECT_NE(text.find("# HELP ftrain_step Steps done."), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE ftrain_step gauge"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE ftrain_tokens_total counter"), std::string::npos) << text;
  const json samples = ParseProm((*p)->path());
  ASSERT_EQ(samples.size(), 3u) << samples.dump();
  const json labels = {{"slurm_job_id", "42"}, {"node", "n\"0\\"}, {"rank", "0"}};
  const json* step = Sample(samples, "ftrain_step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ((*step)["type"], "gauge");
  EXPECT_EQ((*step)["value"], 17.0);
  EXPECT_EQ((*step)["labels"], labels);
  const json* tokens = Sample(samples, "ftrain_tokens_total");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ((*tokens)["type"], "counter");
  EXPECT_EQ((*tokens)["value"], 123456789.0);
  const json* loss = Sample(samples, "ftrain_loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ((*loss)["value"], 2.718281828459045);
  EXPECT_EQ((*loss)["help"], "Loss with \"quotes\".");
  // Bad names, and HELP text that prometheus-cpp 1.0 would not escape, are refused.
  EXPECT_FALSE((*p)->Write({{"ftrain step", "", false, 1}}).ok());
  EXPECT_FALSE((*p)->Write({{"ftrain_x", "two\nlines", false, 1}}).ok());
  EXPECT_FALSE((*p)->Write({{"ftrain_x", "back\\slash", false, 1}}).ok());
  EXPECT_EQ(ParseProm((*p)->path()).size(), 3u);  // the refused writes left the file alone
  EXPECT_FALSE(PromTextfile::Open(dir_, "x.txt", {}).ok());
  EXPECT_FALSE(PromTextfile::Open(dir_, "x.prom", {{"bad-label", "v"}}).ok());
}

TEST_F(MetricsTest, PromWriteIsAtomicUnderAConcurrentReader) {
  auto p = PromTextfile::Open(dir_, "a.prom", {{"node", "n0"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // Two contents of different lengths (the long one spans several pages).
  std::vector<PromSample> small = {{"ftrain_step", "Steps.", false, 1}};
  std::vector<PromSample> big;
  for (int i = 0; i < 400; ++i) {
    big.push_back({"ftrain_m" + std::to_string(i), std::string(40, 'h'), false, 1.0 * i});
  }
  const std::string small_text = SerializePromText({{"node", "n0"}}, small);
  const std::string big_text = SerializePromText({{"node", "n0"}}, big);
  ASSERT_TRUE((*p)->Write(small).ok());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE((*p)->Write(i % 2 ? small : big).ok());
    }
    done = true;
  });
  int reads = 0, torn = 0;
  while (!done) {
    const std::string got = ReadAll((*p)->path());
    ++reads;
    if (got != small_text && got != big_text) ++torn;
  }
  writer.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_GT(reads, 10);
  // Only the .prom file is left: no temp files for node_exporter to trip over.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"a.prom"});
}

TEST_F(MetricsTest, NoNvmlMeansNoGpuFields) {
  std::string why;
  auto gpu = NvmlGpu::Open(0, NvmlGpu::kLibrary, &why);
  if (gpu != nullptr) GTEST_SKIP() << "this machine has NVML (" << gpu->name() << ")";
  EXPECT_NE(why.find("libnvidia-ml.so.1"), std::string::npos) << why;
  EXPECT_EQ(NvmlGpu::Open(0, dir_ + "/no-such-nvml.so", &why), nullptr);
}

TEST_F(MetricsTest, StandInNvmlGivesUtilisationMemoryAndName) {
  std::string why;
  auto gpu = NvmlGpu::Open(0, FTRAIN_FAKE_NVML, &why);
  ASSERT_NE(gpu, nullptr) << why;
  EXPECT_EQ(gpu->name(), "NVIDIA H100 80GB HBM3");
  auto s = gpu->Sample();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->util_percent, 37);
  EXPECT_EQ(s->mem_used_gib, 12.5);
  EXPECT_EQ(NvmlGpu::Open(3, FTRAIN_FAKE_NVML, &why), nullptr);  // no such device
  EXPECT_NE(why.find("CUDA device 3"), std::string::npos) << why;
}

TEST_F(MetricsTest, MfuPeaksAndPercentiles) {
  // 7B parameters at 3000 tokens/s on 8 GPUs of 989 TFLOP/s.
  EXPECT_DOUBLE_EQ(Mfu(6 * 7e9, 3000, 8, 989), 6.0 * 7e9 * 3000 / (8 * 989e12));
  EXPECT_NEAR(Mfu(6 * 7e9, 3000, 8, 989), 0.01592, 1e-5);
  EXPECT_EQ(Mfu(6 * 7e9, 3000, 8, 0), 0);  // unknown peak: no MFU
  EXPECT_EQ(PeakBf16Tflops("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(PeakBf16Tflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(PeakBf16Tflops("NVIDIA H200"), 989);
  EXPECT_EQ(PeakBf16Tflops("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(PeakBf16Tflops("NVIDIA A10"), 125);
  EXPECT_EQ(PeakBf16Tflops("NVIDIA L40S"), 362);
  EXPECT_EQ(PeakBf16Tflops("NVIDIA GB200"), 2500);
  EXPECT_EQ(PeakBf16Tflops("Tesla V100-SXM2-16GB"), 0);

  StepTimeWindow w(20);
  EXPECT_EQ(w.Percentile(0.5), 0);
  for (int i = 20; i >= 1; --i) w.Add(i);  // order does not matter
  EXPECT_EQ(w.Percentile(0.50), 10);
  EXPECT_EQ(w.Percentile(0.95), 19);
  EXPECT_EQ(w.Percentile(1.0), 20);
  StepTimeWindow last5(5);
  for (int i = 1; i <= 10; ++i) last5.Add(i);  // keeps 6..10
  EXPECT_EQ(last5.size(), 5u);
  EXPECT_EQ(last5.Percentile(0.50), 8);
  EXPECT_EQ(last5.Percentile(0.95), 10);
}

StepMetrics SomeStep() {
  StepMetrics m;
  m.step = 7;
  m.loss = 3.25f;
  m.lr = 1e-4;
  m.grad_norm = 0.5;
  m.step_time_s = 2;
  m.tokens_per_s = 4096;
  m.data_wait_s = 0.125;
  m.comm_s = 0.25;
  m.ckpt_stall_s = 0.5;
  m.restart_count = 1;
  m.tokens = 28672;
  m.unix_time = 1700000000.5;
  return m;
}

TEST_F(MetricsTest, MetricsLineUnchangedWithoutOptionalFields) {
  // The line format that metrics.jsonl readers (and checkpoints) already hold.
  EXPECT_EQ(FormatMetricsLine(SomeStep()),
            "{\"step\":7,\"loss\":3.25,\"lr\":0.0001,\"grad_norm\":0.5,\"step_time_s\":2.000000,"
            "\"tokens_per_s\":4096.0,\"data_wait_s\":0.125000,\"comm_s\":0.250000,"
            "\"ckpt_stall_s\":0.500000,\"restart_count\":1,\"tokens\":28672,"
            "\"time\":1700000000.500}");
}

// configs/tiny.cfg with run.dir = `run` and "--metrics.key=value" overrides.
StatusOr<TrainConfig> LoadConfig(const std::string& run, const std::vector<std::string>& extra) {
  auto c = Config::LoadFile(std::string(FTRAIN_SOURCE_DIR) + "/configs/tiny.cfg");
  if (!c.ok()) return c.status();
  std::vector<std::string> overrides = {"--data.path=/nonexistent", "--run.dir=" + run};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  for (const std::string& o : overrides) FT_RETURN_IF_ERROR(c->ApplyOverride(o));
  return TrainConfig::Load(*c);
}

TEST_F(MetricsTest, ConfigKeysValidateAndStayOutOfTheConfigHash) {
  auto plain = LoadConfig(dir_, {});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(plain->metrics.tensorboard);
  EXPECT_EQ(plain->metrics.prometheus_dir, dir_ + "/prometheus");
  auto tuned =
      LoadConfig(dir_, {"--metrics.tensorboard=false", "--metrics.prometheus_dir=off",
                        "--metrics.peak_tflops=989", "--metrics.baseline_tokens_per_s_per_gpu=5000",
                        "--metrics.step_time_window=50"});
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  EXPECT_FALSE(tuned->metrics.tensorboard);
  EXPECT_EQ(tuned->metrics.peak_tflops, 989);
  // Resuming with the sinks toggled must find the same config hash.
  EXPECT_EQ(plain->ConfigHash(), tuned->ConfigHash());
  for (const std::string bad :
       {"peak_tflops=-1", "baseline_tokens_per_s_per_gpu=-5", "step_time_window=0",
        "prometheus_dir=", "tensorboard=maybe", "bogus=1"}) {
    auto r = LoadConfig(dir_, {"--metrics." + bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("metrics."), std::string::npos) << r.status().message();
  }
}

// A run's sinks as the trainer drives them: CPU (no GPU fields) and a stand-in GPU.
TEST_F(MetricsTest, SinksOnCpuOmitGpuFieldsAndPublishEverywhere) {
  auto cfg = LoadConfig(dir_, {"--metrics.baseline_tokens_per_s_per_gpu=2048"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  SinkContext ctx;
  ctx.env = Env::Default();
  ctx.world_size = 2;
  ctx.num_params = 1000000;
  ctx.resume_step = 6;
  ctx.node = "n0";
  auto sinks = MetricsSinks::Open(*cfg, ctx);
  ASSERT_TRUE(sinks.ok()) << sinks.status().ToString();
  StepMetrics m = SomeStep();
  (*sinks)->AddHealth(&m);
  EXPECT_FALSE(m.gpu_util || m.gpu_mem_gb || m.tokens_per_s_per_gpu || m.mfu);
  ASSERT_TRUE(m.scaling_efficiency.has_value());
  EXPECT_EQ(*m.scaling_efficiency, 1.0);  // 4096 tokens/s over 2 ranks = the baseline
  const std::string line = FormatMetricsLine(m);
  EXPECT_EQ(line.find("gpu_"), std::string::npos) << line;
  EXPECT_EQ(line.find("mfu"), std::string::npos) << line;
  EXPECT_NE(line.find(",\"scaling_efficiency\":1.0000}"), std::string::npos) << line;
  (*sinks)->NoteCheckpoint(7, /*committed=*/false);  // handed to ckptd, not committed yet
  (*sinks)->Publish(m);

  const json samples = ParseProm(dir_ + "/prometheus/ftrain-rank0.prom");
  auto value = [&](const std::string& name) {
    const json* s = Sample(samples, name);
    EXPECT_NE(s, nullptr) << name << " missing in " << samples.dump();
    return s ? (*s)["value"].get<double>() : -999.0;
  };
  EXPECT_EQ(value("ftrain_step"), 7);
  EXPECT_EQ(value("ftrain_tokens_per_second"), 4096);
  EXPECT_EQ(value("ftrain_step_seconds"), 2);
  EXPECT_EQ(value("ftrain_step_seconds_p50"), 1.5);  // without the 0.5 s checkpoint stall
  EXPECT_EQ(value("ftrain_loss"), 3.25);
  EXPECT_EQ(value("ftrain_checkpoint_stall_seconds"), 0.5);
  EXPECT_EQ(value("ftrain_last_checkpoint_step"), 6);  // the resumed step; 7 is not committed
  EXPECT_EQ(value("ftrain_tokens_total"), 28672);
  EXPECT_EQ(value("ftrain_scaling_efficiency_ratio"), 1.0);
  EXPECT_EQ(Sample(samples, "ftrain_gpu_utilization_ratio"), nullptr);
  EXPECT_EQ(Sample(samples, "ftrain_mfu_ratio"), nullptr);
  EXPECT_EQ((*Sample(samples, "ftrain_step"))["labels"], json({{"node", "n0"}, {"rank", "0"}}));

  // Step 7's directory appears (the commit's rename): the next publish reports it.
  fs::create_directories(cfg->ckpt.root + "/step-00000007");
  m.step = 8;
  (*sinks)->Publish(m);
  EXPECT_EQ((*sinks)->last_committed_step(), 7);
  // The file is replaced at most once a second; closing the sinks writes the last step.
  sinks->reset();
  const json after = ParseProm(dir_ + "/prometheus/ftrain-rank0.prom");
  EXPECT_EQ((*Sample(after, "ftrain_step"))["value"], 8.0) << after.dump();
  EXPECT_EQ((*Sample(after, "ftrain_last_checkpoint_step"))["value"], 7.0) << after.dump();

  const json tb = ReadTensorBoard(dir_ + "/tensorboard");
  EXPECT_EQ(tb["train/loss"], json::array({{7, 3.25}, {8, 3.25}})) << tb.dump();
  EXPECT_EQ(tb["perf/ckpt_stall_s"], json::array({{7, 0.5}, {8, 0.5}}));
  EXPECT_EQ(tb["perf/scaling_efficiency"], json::array({{7, 1.0}, {8, 1.0}}));
  for (const char* tag : {"train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/step_time_s",
                          "perf/step_time_p95_s", "perf/data_wait_s", "perf/comm_wait_s"}) {
    EXPECT_TRUE(tb.contains(tag)) << tag << " in " << tb.dump();
  }
  EXPECT_FALSE(tb.contains("gpu/util_percent"));
}

TEST_F(MetricsTest, SinksOnAGpuAddUtilisationMemoryMfuAndPerGpuThroughput) {
  auto cfg = LoadConfig(dir_, {"--metrics.tensorboard=false", "--metrics.prometheus_dir=off"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  SinkContext ctx;
  ctx.env = Env::Default();
  ctx.world_size = 8;
  ctx.cuda_index = 0;
  ctx.num_params = 7000000000;
  ctx.attention_flops_per_token = 12.0 * 32 * 4096 * 4096;  // Llama-2 7B at seq 4096
  ctx.nvml_library = FTRAIN_FAKE_NVML;
  auto sinks = MetricsSinks::Open(*cfg, ctx);
  ASSERT_TRUE(sinks.ok()) << sinks.status().ToString();
  StepMetrics m = SomeStep();
  m.tokens_per_s = 3000;
  (*sinks)->AddHealth(&m);
  ASSERT_TRUE(m.gpu_util && m.gpu_mem_gb && m.tokens_per_s_per_gpu && m.mfu);
  EXPECT_EQ(*m.gpu_util, 37);
  EXPECT_EQ(*m.gpu_mem_gb, 12.5);
  EXPECT_EQ(*m.tokens_per_s_per_gpu, 375);
  EXPECT_DOUBLE_EQ(*m.mfu, 6.0 * 7e9 * 3000 / (8 * 989e12));  // the H100's peak from the table
  ASSERT_TRUE(m.mfu_attn.has_value());  // attention adds 6.44e9 FLOPs per token to 4.2e10
  EXPECT_DOUBLE_EQ(*m.mfu_attn, (6.0 * 7e9 + 12.0 * 32 * 4096 * 4096) * 3000 / (8 * 989e12));
  EXPECT_FALSE(m.scaling_efficiency.has_value());  // no baseline given
  const json line = json::parse(FormatMetricsLine(m));
  EXPECT_EQ(line["gpu_util"], 37);
  EXPECT_EQ(line["gpu_mem_gb"], 12.5);
  EXPECT_EQ(line["tokens_per_s_per_gpu"], 375.0);
  EXPECT_EQ(line["mfu"], 0.0159);
  EXPECT_EQ(line["mfu_attn"], 0.0184);
  EXPECT_EQ(line["loss"], 3.25);
  EXPECT_FALSE(fs::exists(dir_ + "/tensorboard"));
  EXPECT_FALSE(fs::exists(dir_ + "/prometheus"));

  // metrics.peak_tflops overrides the table.
  auto cfg2 = LoadConfig(dir_, {"--metrics.tensorboard=false", "--metrics.prometheus_dir=off",
                                "--metrics.peak_tflops=500"});
  ASSERT_TRUE(cfg2.ok());
  auto sinks2 = MetricsSinks::Open(*cfg2, ctx);
  ASSERT_TRUE(sinks2.ok());
  StepMetrics m2 = SomeStep();
  m2.tokens_per_s = 3000;
  (*sinks2)->AddHealth(&m2);
  EXPECT_DOUBLE_EQ(*m2.mfu, 6.0 * 7e9 * 3000 / (8 * 500e12));
}

TEST_F(MetricsTest, UnwritablePrometheusDirIsAConfigError) {
  fs::create_directories(dir_ + "/ro");
  std::ofstream(dir_ + "/ro/file") << "x";
  auto cfg = LoadConfig(
      dir_, {"--metrics.tensorboard=false", "--metrics.prometheus_dir=" + dir_ + "/ro/file/sub"});
  ASSERT_TRUE(cfg.ok());
  SinkContext ctx;
  ctx.env = Env::Default();
  auto sinks = MetricsSinks::Open(*cfg, ctx);
  ASSERT_FALSE(sinks.ok());
  EXPECT_TRUE(sinks.status().IsInvalidArgument());
  EXPECT_NE(sinks.status().message().find("metrics.prometheus_dir"), std::string::npos)
      << sinks.status().message();
}

}  // namespace
}  // namespace ftrain::train
