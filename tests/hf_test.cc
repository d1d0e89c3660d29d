// Hugging Face model directories in and out, through the real binaries, with transformers as
// the oracle (tests/hf_interop.py under FTRAIN_HF_PYTHONPATH):
//  - train.init=DIR (sharded fp32 or bf16, saved by transformers) loads exactly, each of 4
//    ranks reading only the bytes of its own shards (together: every byte once);
//  - a restart never reads the base directory: it is moved away after a crash, and the run
//    still finishes bit-identical to an uninterrupted one;
//  - `ckptctl export --format hf` of a fine-tuned checkpoint loads with
//    AutoModelForCausalLM.from_pretrained and its loss on every packed row equals `ftrain
//    eval`'s on the checkpoint (1e-6 relative, fp32), with or without a Hugging Face base;
//  - bad base directories and exports: one line naming the file and tensor, exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "test_util.h"

namespace ftrain::testing {
namespace {

class HfTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("ftrain-hf-test");
    root_ = dir_->path();
    data_ = root_ + "/data";
    auto r = PackLicenses(data_, "--shard-rows 256");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // A sharded fp32 base with a tokenizer (the data's) and a sharded bf16 one.
    const std::string tokenizer = data_ + "/tokenizer.model";
    MakeBase("base32", "--dtype float32 --shard-kb 100 --tokenizer " + tokenizer,
             "--dtype float32 --shard-kb 100 --tokenizer " + ReadFile(tokenizer));
    MakeBase("base16", "--dtype bfloat16 --shard-kb 100 --seed 8",
             "--dtype bfloat16 --shard-kb 100 --seed 8");
  }
  // root_/NAME: a copy of what `hf_interop.py make-base DIR ARGS` writes, made once per
  // machine (CachedDir: ~10 s of python, and every test is a process of its own) and keyed
  // by the script, the library path and `key` (ARGS with the files they name read in).
  static void MakeBase(const std::string& name, const std::string& args, const std::string& key) {
    const std::string script = std::string(FTRAIN_SOURCE_DIR) + "/tests/hf_interop.py";
    CommandResult made;
    const std::string cached =
        CachedDir("hf-base-" + name, ReadFile(script) + FTRAIN_HF_PYTHONPATH + key,
                  [&](const std::string& dir) {
                    made = Python("make-base " + dir + "/base " + args, /*expect_ok=*/false);
                    return made.exit_code == 0;
                  });
    ASSERT_NE(cached, "") << "make-base " << args << "\n" << made.output;
    ASSERT_EQ(RunCommand("cp -r " + cached + "/base " + root_ + "/" + name, 30).exit_code, 0);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static CommandResult Python(const std::string& args, bool expect_ok = true) {
    auto r = RunCommand(std::string("PYTHONPATH=") + FTRAIN_HF_PYTHONPATH + " /usr/bin/python3 " +
                            FTRAIN_SOURCE_DIR + "/tests/hf_interop.py " + args + " 2>&1",
                        300);
    if (expect_ok) {
      EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    }
    return r;
  }

  // Several hf_interop.py commands in one python process (importing torch and transformers is
  // most of a call's time): each command's output, in order ("FAILED: why" in a failed one's).
  static std::vector<std::string> PythonAll(const std::vector<std::string>& commands) {
    std::string args;
    for (const auto& c : commands) args += (args.empty() ? "" : " -- ") + c;
    auto r = Python(args);
    std::vector<std::string> out;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("== ", 0) == 0) {
        out.emplace_back();
      } else if (!out.empty()) {
        out.back() += line + "\n";
      }
    }
    EXPECT_EQ(out.size(), commands.size()) << r.output;
    out.resize(commands.size());
    return out;
  }

  // 4 ranks on 2 simulated nodes, full_shard: every rank owns a distinct slice of the state.
  static std::string TrainCmd(const std::string& run, const std::string& extra) {
    return Ftrain() + " launch --nproc 4 --nodes 2 --grace-s 2 -- train --config " +
           FTRAIN_SOURCE_DIR + "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + run +
           " --train.steps=20 --ckpt.every_steps=5 --ckpt.every_minutes=0 "
           "--dist.sharding=full_shard " +
           extra;
  }

  // The uninterrupted fine-tune from base32 (its own copy of the base).
  static const std::string& Reference() {
    static std::string run;
    if (!run.empty()) return run;
    EXPECT_EQ(RunCommand("cp -r " + root_ + "/base32 " + root_ + "/base32-ref", 30).exit_code, 0);
    auto r = RunCommand(TrainCmd(root_ + "/ref", "--train.init=" + root_ + "/base32-ref"), 600);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return run = root_ + "/ref";
  }

  // `ftrain eval` of `weights` on every packed row, one row per batch.
  static std::string EvalLoss(const std::string& weights, int rows) {
    auto r =
        RunCommand(Ftrain() + " eval --config " + FTRAIN_SOURCE_DIR + "/configs/tiny.cfg --data " +
                       data_ + " --weights " + weights + " --batches " + std::to_string(rows) +
                       " --train.micro_batch=1 --json 2>/dev/null",
                   300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.rfind("{\"loss\"");
    return at == std::string::npos ? "{}" : r.output.substr(at);
  }

  // transformers' loss of an exported directory (`loss_output`: what `hf_interop.py loss DIR
  // data_` printed) equals ftrain eval's of the checkpoint.
  static void ExpectSameLoss(const std::string& loss_output, const std::string& checkpoint) {
    double hf_loss = 0;
    int rows = 0;
    std::istringstream(loss_output.substr(loss_output.rfind('\n', loss_output.size() - 2) + 1)) >>
        hf_loss >> rows;
    ASSERT_GT(rows, 0) << loss_output;
    const auto ev = nlohmann::json::parse(EvalLoss(checkpoint, rows));
    ASSERT_TRUE(ev.contains("loss")) << ev.dump();
    EXPECT_EQ(ev["tokens"].get<int64_t>(), int64_t{rows} * 32) << "every row once";
    const double ftrain_loss = ev["loss"].get<double>();
    EXPECT_LE(std::fabs(ftrain_loss - hf_loss), 1e-6 * std::fabs(hf_loss))
        << "ftrain eval " << ftrain_loss << " vs transformers " << hf_loss;
  }

  static std::unique_ptr<TempDir> dir_;
  static std::string root_, data_;
};

std::unique_ptr<TempDir> HfTest::dir_;
std::string HfTest::root_, HfTest::data_;

// lr 1e-30 changes no fp32 weight (every update is far below half an ulp), so the master
// weights after one step are the loaded ones: they must equal the base's, converted by torch.
TEST_F(HfTest, BaseLoadsExactlyAndEachRankReadsOnlyItsOwnShards) {
  const std::vector<std::string> bases = {"base32", "base16/model.safetensors.index.json"};
  std::vector<std::string> checks;  // same-weights of each base, run together below
  for (const std::string& base : bases) {
    const std::string run = root_ + "/exact-" + base.substr(0, 6);
    auto r = RunCommand(TrainCmd(run, "--train.init=" + root_ + "/" + base +
                                          " --train.steps=1 --ckpt.every_steps=1 "
                                          "--train.lr=1e-30 --train.min_lr=0"),
                        600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::regex line("train\\.init: rank ([0-9]+) read ([0-9]+) of ([0-9]+) bytes");
    uint64_t sum = 0, total = 0;
    int ranks = 0;
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it) {
      const uint64_t read = std::stoull((*it)[2]);
      total = std::stoull((*it)[3]);
      EXPECT_GT(read, 0u) << it->str();
      EXPECT_LT(read, total / 2) << "a rank read more than its quarter: " << it->str();
      sum += read;
      ++ranks;
    }
    EXPECT_EQ(ranks, 4) << r.output;
    EXPECT_EQ(sum, total) << "the 4 ranks together read every byte of the base exactly once";
    const std::string out = run + "/w.safetensors";
    auto x = RunCommand(BinDir() + "/ckptctl export " + run +
                            "/checkpoints --format safetensors --dtype fp32 -o " + out,
                        120);
    ASSERT_EQ(x.exit_code, 0) << x.output;
    const std::string dir = root_ + "/" + base.substr(0, base.find('/'));
    checks.push_back("same-weights " + dir + " " + out);
  }
  const auto results = PythonAll(checks);
  for (size_t i = 0; i < bases.size(); ++i) {
    EXPECT_TRUE(Contains(results[i], "identical")) << bases[i] << "\n" << results[i];
  }
}

TEST_F(HfTest, RestartNeverReadsTheBaseDirectory) {
  const std::string& ref = Reference();
  const std::string run = root_ + "/moved", base = root_ + "/base32-moved";
  ASSERT_EQ(RunCommand("cp -r " + root_ + "/base32 " + base, 30).exit_code, 0);
  // Rank 0 dies inside the second checkpoint (op 38 of its file-system steps: 24 per
  // checkpoint), after the first one (step 5) was committed.
  auto crash = RunCommand(
      "FTRAIN_CRASH_RANK=0 FTRAIN_CRASH_AT=38 " + TrainCmd(run, "--train.init=" + base), 600);
  ASSERT_EQ(crash.exit_code, 137) << crash.output;
  EXPECT_TRUE(Contains(crash.output, "train.init: rank 0 read")) << crash.output;
  auto latest = RunCommand(BinDir() + "/ckptctl latest " + run + "/checkpoints", 30);
  ASSERT_EQ(latest.exit_code, 0) << "no committed checkpoint before the crash\n" << crash.output;
  ASSERT_EQ(RunCommand("mv " + base + " " + base + ".gone", 30).exit_code, 0);
  auto again = RunCommand(TrainCmd(run, "--train.init=" + base), 600);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(Contains(again.output, "resume: restored step")) << again.output;
  EXPECT_FALSE(Contains(again.output, "train.init: rank")) << again.output;
  ExpectSameBits(StepDir(ref, 20), StepDir(run, 20), ref, run);
  // The restarted run's checkpoints still carry the base's files (from the checkpoint).
  const auto doc = nlohmann::json::parse(
      RunCommand(BinDir() + "/ckptctl inspect " + run + "/checkpoints/step-00000020 --json", 60)
          .output);
  EXPECT_TRUE(doc["layout"]["hf_files"].contains("tokenizer.model")) << doc["layout"].dump();
}

// With model.hf the model itself comes from the base's config.json: a restart after the base
// moved takes it from the copy the first start kept in the run directory, and the result is
// still the uninterrupted run's.
TEST_F(HfTest, RestartWithModelHfAfterTheBaseMovedUsesTheKeptConfig) {
  const std::string& ref = Reference();
  const std::string run = root_ + "/moved-hf", base = root_ + "/base32-moved-hf";
  ASSERT_EQ(RunCommand("cp -r " + root_ + "/base32 " + base, 30).exit_code, 0);
  const std::string args = "--train.init=" + base + " --model.hf=" + base;
  auto crash = RunCommand("FTRAIN_CRASH_RANK=0 FTRAIN_CRASH_AT=38 " + TrainCmd(run, args), 600);
  ASSERT_EQ(crash.exit_code, 137) << crash.output;
  ASSERT_EQ(RunCommand(BinDir() + "/ckptctl latest " + run + "/checkpoints", 30).exit_code, 0)
      << "no committed checkpoint before the crash\n"
      << crash.output;
  ASSERT_EQ(RunCommand("mv " + base + " " + base + ".gone", 30).exit_code, 0);
  auto again = RunCommand(TrainCmd(run, args), 600);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(Contains(again.output, "is gone; the model comes from the copy")) << again.output;
  EXPECT_TRUE(Contains(again.output, "resume: restored step")) << again.output;
  ExpectSameBits(StepDir(ref, 20), StepDir(run, 20), ref, run);
  // A fresh run with the base gone is still an error naming model.hf (no copy to take).
  auto fresh = RunCommand(TrainCmd(root_ + "/fresh-hf", args), 120);
  EXPECT_EQ(fresh.exit_code, 2) << fresh.output;
  EXPECT_TRUE(Contains(fresh.output, "model.hf")) << fresh.output;
}

TEST_F(HfTest, ExportedDirectoryLoadsInTransformersWithEvalsLoss) {
  const std::string ckpt = Reference() + "/checkpoints/step-00000020";
  const std::string out32 = root_ + "/export32", out16 = root_ + "/export16";
  auto x = RunCommand(BinDir() + "/ckptctl export " + ckpt + " --format hf --dtype fp32 " +
                          "--shard-gb 0.0001 -o " + out32,
                      120);
  ASSERT_EQ(x.exit_code, 0) << x.output;
  EXPECT_TRUE(Contains(x.output, "file(s)")) << x.output;
  // bf16: loads too, and says so in config.json.
  x = RunCommand(BinDir() + "/ckptctl export " + ckpt + " --format hf -o " + out16, 120);
  ASSERT_EQ(x.exit_code, 0) << x.output;
  const auto py = PythonAll({"check-export " + out32 + " " + root_ + "/base32 float32",
                             "loss " + out32 + " " + data_,
                             "check-export " + out16 + " " + root_ + "/base32 bfloat16"});
  EXPECT_TRUE(Contains(py[0], "export ok")) << py[0];
  EXPECT_FALSE(Contains(py[0], "export ok: 1 weight files")) << "--shard-gb must split";
  ExpectSameLoss(py[1], ckpt);
  EXPECT_TRUE(Contains(py[2], "export ok")) << py[2];
  // The same directory again: refused (not empty), one line, exit 2.
  x = RunCommand(BinDir() + "/ckptctl export " + ckpt + " --format hf -o " + out16, 120);
  EXPECT_EQ(x.exit_code, 2) << x.output;
  EXPECT_TRUE(Contains(x.output, "is not empty")) << x.output;
  x = RunCommand(BinDir() + "/ckptctl export " + ckpt + " --format hf --dtype fp16 -o " + root_ +
                     "/export-fp16",
                 120);
  EXPECT_EQ(x.exit_code, 2) << x.output;
  EXPECT_TRUE(Contains(x.output, "--dtype must be bf16 or fp32")) << x.output;
}

// A run without a Hugging Face base: config.json is made from [model], the tokenizer is the
// dataset's, and transformers loads the export with ftrain eval's loss.
TEST_F(HfTest, ExportWithoutABaseMakesALlamaConfig) {
  const std::string run = root_ + "/scratch", out = root_ + "/export-scratch";
  auto r = RunCommand(Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                          "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + run +
                          " --train.steps=5 --ckpt.every_steps=5 --ckpt.every_minutes=0",
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto x = RunCommand(
      BinDir() + "/ckptctl export " + run + "/checkpoints --format hf --dtype fp32 -o " + out, 120);
  ASSERT_EQ(x.exit_code, 0) << x.output;
  const auto py = PythonAll({"check-export " + out + " - float32", "loss " + out + " " + data_});
  EXPECT_TRUE(Contains(py[0], "export ok")) << py[0];
  EXPECT_EQ(ReadFile(out + "/tokenizer.model"), ReadFile(data_ + "/tokenizer.model"));
  const auto config = nlohmann::json::parse(ReadFile(out + "/config.json"));
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM") << config.dump();
  ExpectSameLoss(py[1], run + "/checkpoints/step-00000005");
}

TEST_F(HfTest, BadBaseDirectoryIsOneLineNamingFileAndTensorExit2) {
  const std::string base = root_ + "/base32";
  auto index = nlohmann::json::parse(ReadFile(base + "/model.safetensors.index.json"));
  const std::string tensor = "model.layers.1.mlp.down_proj.weight";
  const std::string file = index["weight_map"][tensor];
  auto variant = [&](const std::string& name, const std::string& edit) {
    const std::string d = root_ + "/bad-" + name;
    EXPECT_EQ(RunCommand(
                  "rm -rf " + d + " && cp -r " + base + " " + d + " && cd " + d + " && " + edit, 30)
                  .exit_code,
              0)
        << edit;
    return d;
  };
  auto dropped = index;
  dropped["weight_map"].erase(tensor);
  std::ofstream(root_ + "/dropped.json") << dropped.dump();
  struct Case {
    std::string dir;
    std::vector<std::string> expect;
  } cases[] = {
      {variant("index", "cp " + root_ + "/dropped.json model.safetensors.index.json"),
       {file, tensor, "does not list it"}},
      {variant("shard", "rm " + file), {file, "cannot open", "tensor '"}},
      {variant("dtype", "PYTHONPATH=" + std::string(FTRAIN_HF_PYTHONPATH) +
                            " /usr/bin/python3 -c \"from safetensors.torch import load_file, "
                            "save_file; t = load_file('" +
                            file + "'); t['" + tensor + "'] = t['" + tensor +
                            "'].double(); save_file(t, '" + file + "', {'format': 'pt'})\""),
       {file, tensor, "F64"}},
      {variant("cut", "truncate -s -100 " + file), {file, "outside the data section"}},
      {variant("empty", "rm -f *.safetensors *.json"),
       {"neither model.safetensors.index.json nor model.safetensors"}},
      {root_ + "/no-such-base", {root_ + "/no-such-base", "does not exist"}},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                            "/configs/tiny.cfg --data.path=" + data_ + " --run.dir=" + c.dir +
                            "-run --train.steps=2 --train.init=" + c.dir,
                        120);
    EXPECT_EQ(r.exit_code, 2) << c.dir << "\n" << r.output;
    const size_t at = r.output.find("ftrain train: ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    for (const auto& e : c.expect) EXPECT_TRUE(Contains(line, e)) << e << " not in: " << line;
  }
}

}  // namespace
}  // namespace ftrain::testing
