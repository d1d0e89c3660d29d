// `ftrain eval` through the real binary: train the tiny model for a few steps on a real packed
// corpus, then evaluate its checkpoints. The loss of a checkpoint equals, bit for bit, the loss
// of the same checkpoint exported to fp32 safetensors (`ckptctl export`); it is close to the
// last training losses and below an earlier checkpoint's. Bad input: one line, exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace ftrain::testing {
namespace {

// Non-empty lines of `text` that do not come from the logger (which writes to stderr).
std::vector<std::string> NonLogLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.find(" INFO ") == std::string::npos) out.push_back(line);
  }
  return out;
}

class EvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = std::make_unique<TempDir>("ftrain-eval-test");
    root_ = tmp_->path();
    data_ = root_ + "/data";
    run_ = root_ + "/run";
    auto p = PackLicenses(data_, "--shard-rows 256");
    ASSERT_EQ(p.exit_code, 0) << p.output;
    auto t = RunCommand(Ftrain() + " launch --nproc 2 -- train --config " + Config() +
                            " --data.path=" + data_ + " --run.dir=" + run_ +
                            " --train.steps=30 --ckpt.every_steps=10 --ckpt.every_minutes=0 "
                            "--ckpt.keep=5",
                        300);
    ASSERT_EQ(t.exit_code, 0) << t.output;
  }
  static void TearDownTestSuite() { tmp_.reset(); }

  static std::string Config() { return std::string(FTRAIN_SOURCE_DIR) + "/configs/tiny.cfg"; }
  static std::string Eval(const std::string& args) {
    return Ftrain() + " eval --config " + Config() + " --data " + data_ + " " + args;
  }
  // Runs `ftrain eval ... --json` and returns the parsed result (and the loss text as printed).
  static nlohmann::json EvalJson(const std::string& args, std::string* loss_text = nullptr) {
    auto r = RunCommand(Eval(args + " --json"), 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (const auto& line : NonLogLines(r.output)) {
      if (line.rfind("{\"loss\":", 0) != 0) continue;
      if (loss_text) *loss_text = line.substr(8, line.find(',') - 8);
      return nlohmann::json::parse(line);
    }
    ADD_FAILURE() << "no JSON line in:\n" << r.output;
    return nlohmann::json::object();
  }

  static std::unique_ptr<TempDir> tmp_;
  static std::string root_, data_, run_;
};

std::unique_ptr<TempDir> EvalTest::tmp_;
std::string EvalTest::root_, EvalTest::data_, EvalTest::run_;

TEST_F(EvalTest, CheckpointEqualsItsFp32ExportBitForBit) {
  std::string from_root, from_dir, from_export;
  auto a = EvalJson("--weights " + run_ + "/checkpoints", &from_root);
  auto b = EvalJson("--weights " + run_ + "/checkpoints/step-00000030", &from_dir);
  const std::string st = root_ + "/step30.safetensors";
  auto x = RunCommand(BinDir() + "/ckptctl export " + run_ +
                          "/checkpoints/step-00000030 --format safetensors --dtype fp32 -o " + st,
                      120);
  ASSERT_EQ(x.exit_code, 0) << x.output;
  auto c = EvalJson("--weights " + st, &from_export);
  EXPECT_EQ(a["step"], 30) << "a checkpoint root must resolve to its newest checkpoint";
  EXPECT_EQ(from_root, from_dir);
  EXPECT_EQ(from_dir, from_export) << "checkpoint master weights vs their fp32 export";
  EXPECT_EQ(a["batches"], 16);
  EXPECT_EQ(a["tokens"], 16 * 4 * 32);  // batches x train.micro_batch x seq_len
  EXPECT_NEAR(a["perplexity"].get<double>(), std::exp(a["loss"].get<double>()),
              1e-6 * a["perplexity"].get<double>());
  // Deterministic: the same evaluation twice gives the same text.
  std::string again;
  EvalJson("--weights " + st, &again);
  EXPECT_EQ(again, from_export);
}

TEST_F(EvalTest, LossTracksTraining) {
  // The last five training losses (metrics.jsonl, one line per step).
  std::ifstream in(run_ + "/metrics.jsonl");
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line))
    losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  ASSERT_EQ(losses.size(), 30u);
  double tail = 0;
  for (size_t i = losses.size() - 5; i < losses.size(); ++i) tail += losses[i] / 5;
  const double final_loss = EvalJson("--weights " + run_ + "/checkpoints")["loss"].get<double>();
  const double early =
      EvalJson("--weights " + run_ + "/checkpoints/step-00000010")["loss"].get<double>();
  EXPECT_NEAR(final_loss, tail, 0.10 * tail) << "eval loss vs the mean of the last 5 train losses";
  EXPECT_LT(final_loss, early) << "step 30 must evaluate better than step 10";
  EXPECT_LT(final_loss, std::log(512.0) - 0.5) << "well below a uniform guess over 512 tokens";
  // More batches: a different mean, same machinery.
  auto more = EvalJson("--weights " + run_ + "/checkpoints --batches 3");
  EXPECT_EQ(more["batches"], 3);
}

TEST_F(EvalTest, BadInputIsOneClearLineAndExit2) {
  struct Case {
    std::string args;
    std::string expect;
  } cases[] = {
      {"--weights " + root_ + "/nope.safetensors", "does not exist"},
      {"--weights " + root_, "neither a checkpoint nor a root"},
      {"--weights " + run_ + "/checkpoints --model.hidden_size=32", "shape"},
      {"--weights " + run_ + "/checkpoints --model.num_layers=3",
       "no master tensor model.layers.2"},
      {"--weights " + run_ + "/checkpoints --model.num_layers=1", "does not have"},
      {"--weights " + std::string(FTRAIN_SOURCE_DIR) +
           "/tests/fixtures/llama_golden.safetensors --model.intermediate_size=64",
       "shape"},
      {"--weights " + run_ + "/checkpoints --data /nonexistent/data", "/nonexistent/data"},
      {"--weights " + run_ + "/checkpoints --batches -3", "--batches"},
      {"--weights " + run_ + "/checkpoints --train.stepz=3", "unknown config key 'train.stepz'"},
      {"--weights " + run_ + "/checkpoints --model.max_seq_len=16", "max_seq_len"},
      {"", "--weights PATH is required"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(Eval(c.args), 120);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.expect)) << c.args << "\n" << r.output;
    EXPECT_EQ(NonLogLines(r.output).size(), 1u) << "one line: " << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace ftrain::testing
