// [eval] during training and the distributed `ftrain eval`, through the real binaries on 2 and
// 3 Gloo ranks (tiny model, real packed corpora: training text and a held-out licence packed
// with the training tokenizer).
//   - Turning eval on changes no training bit: every step's loss and the final checkpoint
//     (`ckptctl diff`) equal those of the same run without it.
//   - A run resumed from a checkpoint evaluates the steps after it to the same bits.
//   - `ftrain eval` of a checkpoint (1 rank, and 3 ranks: the last round padded) prints the
//     in-training held-out loss of that step exactly.
// One test runs the three trainings once (gtest_discover_tests runs each test in its own
// process, so separate tests would each pay for them).
//   - metrics.jsonl, Prometheus, TensorBoard and `ftrain report` carry it.
//   - A wrong [eval] (no path, a missing path, no batches, held-out data packed with another
//     tokenizer) is one line and exit 2 before the first step.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace ftrain::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// metrics.jsonl as step -> the raw value text of `key` ("" when the line has none): the text
// is %.9g of a float32, so equal text is equal bits.
std::map<int64_t, std::string> Column(const std::string& run, const std::string& key) {
  std::map<int64_t, std::string> out;
  std::istringstream in(ReadAll(run + "/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string tag = "\"" + key + "\":";
    const auto at = line.find(tag);
    std::string v;
    if (at != std::string::npos) {
      const auto start = at + tag.size();
      v = line.substr(start, line.find_first_of(",}", start) - start);
    }
    out[j["step"].get<int64_t>()] = v;
  }
  return out;
}

class TrainEvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = std::make_unique<TempDir>("ftrain-train-eval-test");
    const std::string root = tmp_->path();
    data_ = root + "/data";
    held_ = root + "/heldout";
    auto p = PackLicenses(data_, "--shard-rows 256");
    ASSERT_EQ(p.exit_code, 0) << p.output;
    auto h = RunCommand(Ftrain() + " pack --tokenizer " + data_ +
                            "/tokenizer.model --seq-len 32 --progress none --out " + held_ +
                            " /usr/share/common-licenses/MPL-2.0",
                        300);
    ASSERT_EQ(h.exit_code, 0) << h.output;
    with_ = root + "/with-eval";
    without_ = root + "/without-eval";
    resumed_ = root + "/resumed";
    auto a = Train(with_, EvalArgs());
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = Train(without_, "");
    ASSERT_EQ(b.exit_code, 0) << b.output;
    auto c =
        Train(resumed_, EvalArgs() + " --train.resume=" + with_ + "/checkpoints/step-00000004");
    ASSERT_EQ(c.exit_code, 0) << c.output;
  }
  static void TearDownTestSuite() { tmp_.reset(); }

  static std::string Config() { return std::string(FTRAIN_SOURCE_DIR) + "/configs/tiny.cfg"; }
  // Eval every 3 steps (and so at 3, 6, 9, 12), 5 batches over 2 ranks: the last round pads.
  static std::string EvalArgs() {
    return " --eval.path=" + held_ + " --eval.every_steps=3 --eval.batches=5";
  }
  static CommandResult Train(const std::string& run, const std::string& extra) {
    return RunCommand(Ftrain() + " launch --nproc 2 -- train --config " + Config() +
                          " --data.path=" + data_ + " --run.dir=" + run +
                          " --train.steps=12 --ckpt.every_steps=4 --ckpt.every_minutes=0 "
                          "--ckpt.keep=5 --ckpt.daemon=off" +
                          extra,
                      300);
  }
  // `ftrain eval ... --json` (under `launch --nproc N` for N > 1): the loss as printed.
  static std::string EvalLoss(const std::string& weights, int nproc) {
    const std::string eval = " eval --config " + Config() + " --data " + held_ + " --weights " +
                             weights + " --batches 5 --json";
    auto r = RunCommand(nproc == 1
                            ? Ftrain() + eval
                            : Ftrain() + " launch --nproc " + std::to_string(nproc) + " --" + eval,
                        120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto at = r.output.find("{\"loss\":");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no JSON line in:\n" << r.output;
      return "";
    }
    EXPECT_TRUE(Contains(r.output, "\"ranks\":" + std::to_string(nproc))) << r.output;
    return r.output.substr(at + 8, r.output.find(',', at) - at - 8);
  }

  static std::unique_ptr<TempDir> tmp_;
  static std::string data_, held_, with_, without_, resumed_;
};

std::unique_ptr<TempDir> TrainEvalTest::tmp_;
std::string TrainEvalTest::data_, TrainEvalTest::held_, TrainEvalTest::with_,
    TrainEvalTest::without_, TrainEvalTest::resumed_;

// The checks of one set of runs (one test: the three trainings are its cost, run once).
void CheckEvalChangesNoTrainingBit(const std::string& with, const std::string& without) {
  const auto with_eval = Column(with, "eval_loss");
  ASSERT_EQ(with_eval.size(), 12u);
  for (const auto& [step, v] : with_eval) {
    EXPECT_EQ(!v.empty(), step % 3 == 0) << "step " << step << ": eval_loss '" << v << "'";
  }
  EXPECT_NE(with_eval.at(3), with_eval.at(12)) << "the held-out loss must follow training";
  for (const auto& [step, v] : Column(without, "eval_loss")) EXPECT_EQ(v, "") << step;
  EXPECT_EQ(Column(with, "loss"), Column(without, "loss")) << "training losses differ";
  auto d = RunCommand(BinDir() + "/ckptctl diff " + with + "/checkpoints/step-00000012 " + without +
                          "/checkpoints/step-00000012",
                      120);
  EXPECT_EQ(d.exit_code, 0) << "final checkpoints differ:\n" << d.output;
}

void CheckResumedRunEvaluatesTheSameBits(const std::string& with, const std::string& resumed) {
  const auto a = Column(with, "eval_loss"), c = Column(resumed, "eval_loss");
  const auto la = Column(with, "loss"), lc = Column(resumed, "loss");
  ASSERT_EQ(c.count(12), 1u);
  for (int64_t step = 5; step <= 12; ++step) {
    EXPECT_EQ(c.at(step), a.at(step)) << "eval_loss at step " << step;
    EXPECT_EQ(lc.at(step), la.at(step)) << "loss at step " << step;
  }
}

void CheckSinksAndReport(const std::string& with) {
  const std::string last = Column(with, "eval_loss").at(12);
  const double value = std::stod(last);
  // Prometheus: the newest evaluation, kept between evaluations.
  auto prom = RunCommand("cat " + with + "/prometheus/*.prom", 30);
  double prom_loss = -1, prom_step = -1;
  std::istringstream in(prom.output);
  for (std::string line; std::getline(in, line);) {
    const auto space = line.rfind(' ');
    if (line.rfind("ftrain_eval_loss{", 0) == 0) prom_loss = std::stod(line.substr(space));
    if (line.rfind("ftrain_eval_step{", 0) == 0) prom_step = std::stod(line.substr(space));
  }
  EXPECT_EQ(static_cast<float>(prom_loss), static_cast<float>(value)) << prom.output;
  EXPECT_EQ(prom_step, 12) << prom.output;
  auto tb = RunCommand("cat " + with + "/tensorboard/events.out.tfevents.*", 30);
  EXPECT_TRUE(Contains(tb.output, "eval/loss")) << "no eval/loss scalar in the event files";
  auto r = RunCommand(Ftrain() + " report " + with, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  char want[96];
  std::snprintf(want, sizeof(want), "held-out loss %.4f at step 12", value);
  EXPECT_TRUE(Contains(r.output, want)) << r.output;
  EXPECT_TRUE(Contains(r.output, "4 evaluations")) << r.output;
}

TEST_F(TrainEvalTest, EvalDuringTrainingAndFtrainEval) {
  {
    SCOPED_TRACE("eval on vs off: every training bit the same");
    CheckEvalChangesNoTrainingBit(with_, without_);
  }
  {
    SCOPED_TRACE("resumed from step 4: the same held-out losses");
    CheckResumedRunEvaluatesTheSameBits(with_, resumed_);
  }
  {
    SCOPED_TRACE("ftrain eval of the step-12 checkpoint on 1 and 3 ranks");
    const std::string in_training = Column(with_, "eval_loss").at(12);
    const std::string ckpt = with_ + "/checkpoints/step-00000012";
    EXPECT_EQ(EvalLoss(ckpt, 1), in_training) << "1 rank vs the 2-rank in-training eval";
    EXPECT_EQ(EvalLoss(ckpt, 3), in_training) << "3 ranks (padded last round)";
  }
  {
    SCOPED_TRACE("metrics sinks and ftrain report");
    CheckSinksAndReport(with_);
  }
}

TEST(TrainEvalConfigTest, WrongEvalSectionIsOneLineAndExit2) {
  TempDir tmp("ftrain-train-eval-config");
  const std::string data = tmp.path() + "/data";
  auto p = RunCommand(Ftrain() +
                          " pack --train-tokenizer --vocab-size 256 --seq-len 16 --progress none "
                          "--out " +
                          data + " /usr/share/common-licenses/MPL-2.0",
                      120);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::string other = tmp.path() + "/other-tokenizer";
  auto o = RunCommand(Ftrain() +
                          " pack --train-tokenizer --vocab-size 200 --seq-len 16 --progress none "
                          "--out " +
                          other + " /usr/share/common-licenses/Apache-2.0",
                      120);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string base = Ftrain() + " train --config " + std::string(FTRAIN_SOURCE_DIR) +
                           "/configs/tiny.cfg --data.path=" + data + " --run.dir=" + tmp.path() +
                           "/bad --train.steps=2 --ckpt.daemon=off";
  struct Case {
    std::string args, expect;
  } cases[] = {
      {" --eval.every_steps=2", "eval.path is not"},
      {" --eval.every_steps=2 --eval.path=/nonexistent/heldout", "/nonexistent/heldout"},
      {" --eval.every_steps=2 --eval.path=" + data + " --eval.batches=0", "eval.batches"},
      {" --eval.every_steps=2 --eval.path=" + other, "another tokenizer"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(base + c.args, 60);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.expect)) << c.args << "\n" << r.output;
    EXPECT_FALSE(Contains(r.output, "step 1/")) << "failed only after training began:\n"
                                                << r.output;
    int lines = 0;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) lines += !Contains(line, " INFO ");
    EXPECT_EQ(lines, 1) << "one line: " << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace ftrain::testing
