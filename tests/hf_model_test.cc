// Hugging Face models in, checked against transformers itself: tests/hf_reference.py saves a
// tiny random model per architecture (Llama 3.1 rope scaling; Llama with linear scaling,
// head_dim, biases and tied embeddings; Mistral with a sliding window shorter than the rows;
// Qwen2 with q/k/v biases and a sliding layer; made once per machine, see Model), and `ftrain
// eval --weights DIR` (the model from DIR/config.json) must give transformers' loss on the same
// rows: fp32 to 1e-6 relative, bf16 within the bound justified at BF16Bound. Every refusal of a
// config.json is one line, exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/format/synthetic.h"
#include "test_util.h"

namespace ftrain::testing {
namespace {

constexpr int kRows = 8, kSeqLen = 32, kVocab = 256;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// Lines of `text` that are not the logger's.
std::vector<std::string> NonLogLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.find(" INFO ") == std::string::npos &&
        line.find(" WARN") == std::string::npos) {
      out.push_back(line);
    }
  }
  return out;
}

class HfModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = std::make_unique<TempDir>("ftrain-hf-test");
    data_ = tmp_->path() + "/data";
    data::SyntheticSpec spec;
    spec.num_rows = kRows;
    spec.seq_len = kSeqLen;
    spec.vocab = kVocab;
    auto x = data::WriteSyntheticDataset(data_, spec, Env::Default());
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    // The same rows for transformers (one batch of all rows: the order does not matter).
    nlohmann::json rows = nlohmann::json::array();
    for (uint64_t r = 0; r < kRows; ++r) {
      nlohmann::json row = nlohmann::json::array();
      for (uint64_t t = 0; t <= kSeqLen; ++t) row.push_back(data::SyntheticToken(r, t, kVocab));
      rows.push_back(row);
    }
    rows_ = tmp_->path() + "/rows.json";
    Spit(rows_, rows.dump());
  }
  static void TearDownTestSuite() {
    models_.clear();  // their directories go with tmp_
    tmp_.reset();
  }

  static std::string Python(const std::string& args) {
    return std::string("PYTHONPATH=") + FTRAIN_HF_PYTHONPATH + " python3 " + FTRAIN_SOURCE_DIR +
           "/tests/hf_reference.py " + args;
  }
  // A model saved by transformers, with transformers' losses. hf_reference.py make-all makes
  // every architecture in one python process (importing torch and transformers is most of
  // its ~15 s), once per machine (CachedDir: every test is a process of its own), keyed by
  // the script, the rows and the library path.
  struct Reference {
    std::string dir;
    double fp32 = NAN, bf16 = NAN;
  };
  static const Reference& Model(const std::string& arch) {
    auto it = models_.find(arch);
    if (it != models_.end()) return it->second;
    Reference& ref = models_[arch];
    const std::string script = std::string(FTRAIN_SOURCE_DIR) + "/tests/hf_reference.py";
    std::string made;  // the maker's output, for a failure message
    const std::string cached =
        CachedDir("hf-reference", ReadFile(script) + ReadFile(rows_) + FTRAIN_HF_PYTHONPATH,
                  [&](const std::string& dir) {
                    auto r = RunCommand(
                        Python("make-all " + dir + " " + rows_ + " > " + dir + "/losses.txt"), 600);
                    made = r.output + ReadFile(dir + "/losses.txt");
                    return r.exit_code == 0;
                  });
    EXPECT_NE(cached, "") << "hf_reference.py make-all failed:\n" << made;
    ref.dir = cached + "/" + arch;
    for (const auto& line : NonLogLines(ReadFile(cached + "/losses.txt"))) {
      if (line.rfind("{\"arch\":", 0) != 0) continue;
      auto j = nlohmann::json::parse(line);
      if (j["arch"] != arch) continue;
      ref.fp32 = j["fp32"];
      ref.bf16 = j["bf16"];
    }
    EXPECT_FALSE(std::isnan(ref.fp32)) << "no losses of " << arch << " in " << cached;
    return ref;
  }
  static std::string Eval(const std::string& args) {
    return Ftrain() + " eval --data " + data_ +
           " --batches 1 --train.micro_batch=" + std::to_string(kRows) + " " + args;
  }
  static double FtrainLoss(const std::string& args) {
    auto r = RunCommand(Eval(args + " --json"), 300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (const auto& line : NonLogLines(r.output)) {
      if (line.rfind("{\"loss\":", 0) == 0) {
        auto j = nlohmann::json::parse(line);
        EXPECT_EQ(j["tokens"], kRows * kSeqLen);
        return j["loss"];
      }
    }
    ADD_FAILURE() << "no loss from ftrain eval:\n" << r.output;
    return NAN;
  }
  // A copy of `arch`'s model directory whose config.json `edit` changes.
  static std::string Variant(const std::string& arch, const std::string& name,
                             const std::function<void(nlohmann::json&)>& edit) {
    const std::string src = Model(arch).dir, dir = tmp_->path() + "/" + name;
    auto r = RunCommand("rm -rf " + dir + " && mkdir " + dir + " && ln -s " + src +
                            "/model.safetensors " + dir + "/model.safetensors",
                        30);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(Slurp(src + "/config.json"));
    edit(j);
    Spit(dir + "/config.json", j.dump(2));
    return dir;
  }

  static std::unique_ptr<TempDir> tmp_;
  static std::string data_, rows_;
  static std::map<std::string, Reference> models_;
};

std::unique_ptr<TempDir> HfModelTest::tmp_;
std::string HfModelTest::data_, HfModelTest::rows_;
std::map<std::string, HfModelTest::Reference> HfModelTest::models_;

// bf16: ftrain and transformers round weights and activations to bfloat16 at the same points
// (the weights once, each layer's inputs and outputs); they differ only inside kernels
// (ftrain's fused attention keeps the scores in float32, transformers' eager path rounds the
// probabilities to bf16), so their distance is of the size of one implementation's bf16
// error: at most twice transformers' own bf16 error against its fp32 loss, and never less
// than one bf16 rounding of the loss (2^-8 relative).
double BF16Bound(double hf_fp32, double hf_bf16) {
  return std::max(2 * std::fabs(hf_bf16 - hf_fp32), std::ldexp(std::fabs(hf_fp32), -8));
}

class HfArchTest : public HfModelTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(HfArchTest, EvalLossEqualsTransformers) {
  const Reference& ref = Model(GetParam());
  const double hf = ref.fp32, ours = FtrainLoss("--weights " + ref.dir);
  EXPECT_LE(std::fabs(ours - hf), 1e-6 * std::fabs(hf)) << "fp32: ftrain " << ours << " vs "
                                                        << "transformers " << hf;
  const double hf_bf16 = ref.bf16, ours_bf16 = FtrainLoss("--weights " + ref.dir + " --dtype bf16");
  EXPECT_LE(std::fabs(ours_bf16 - hf_bf16), BF16Bound(hf, hf_bf16))
      << "bf16: ftrain " << ours_bf16 << " vs transformers " << hf_bf16 << " (fp32 " << hf << ")";
  EXPECT_NE(ours_bf16, ours) << "--dtype bf16 must compute in bfloat16";
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfArchTest,
                         ::testing::Values("llama3", "llama_linear", "mistral", "qwen2"));

// The test models are sensitive to what they test: the same weights without the rope scaling
// or the window give another loss (so an implementation ignoring them would fail above).
TEST_F(HfModelTest, PositionsMatterInTheTestModels) {
  const double llama3 = FtrainLoss("--weights " + Model("llama3").dir);
  const double unscaled =
      FtrainLoss("--weights " + Variant("llama3", "llama3-unscaled", [](nlohmann::json& j) {
                   j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
                 }));
  EXPECT_GT(std::fabs(llama3 - unscaled), 1e-3 * llama3);
  const double mistral = FtrainLoss("--weights " + Model("mistral").dir);
  const double full =
      FtrainLoss("--weights " + Variant("mistral", "mistral-full",
                                        [](nlohmann::json& j) { j["sliding_window"] = nullptr; }));
  EXPECT_GT(std::fabs(mistral - full), 1e-3 * mistral);
}

TEST_F(HfModelTest, RefusalsNameTheKeyAndExit2) {
  struct Case {
    std::string name, arch;
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"yarn", "llama3",
       [](nlohmann::json& j) {
         j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1e4}};
       },
       "rope_parameters.rope_type = 'yarn' is not supported"},
      {"dynamic", "llama3",
       [](nlohmann::json& j) {
         j.erase("rope_parameters");
         j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
       },
       "rope_scaling.rope_type = 'dynamic' is not supported"},
      {"arch", "llama3",
       [](nlohmann::json& j) {
         j["model_type"] = "qwen3";
         j["architectures"] = {"Qwen3ForCausalLM"};
       },
       "model_type = 'qwen3' is not supported"},
      {"classifier", "llama3",
       [](nlohmann::json& j) { j["architectures"] = {"LlamaForSequenceClassification"}; },
       "architectures"},
      {"unknown", "mistral",
       [](nlohmann::json& j) {
         j["quantization_config"] = {{"bits", 4}};
       },
       "quantization_config is not a key ftrain knows for MistralForCausalLM"},
      {"act", "qwen2", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
      {"dropout", "llama3", [](nlohmann::json& j) { j["attention_dropout"] = 0.1; },
       "attention_dropout"},
      {"partial", "llama3", [](nlohmann::json& j) { j["partial_rotary_factor"] = 0.5; },
       "partial_rotary_factor"},
      {"llama-window", "llama3", [](nlohmann::json& j) { j["sliding_window"] = 8; },
       "sliding_window is not a key ftrain knows for LlamaForCausalLM"},
      {"no-window", "qwen2", [](nlohmann::json& j) { j["use_sliding_window"] = false; },
       "layer_types has sliding_attention layers but the sliding window is not set"},
  };
  for (const Case& c : cases) {
    const std::string dir = Variant(c.arch, "refuse-" + c.name, c.edit);
    auto r = RunCommand(Eval("--weights " + dir), 120);
    EXPECT_EQ(r.exit_code, 2) << c.name << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.expect)) << c.name << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, dir + "/config.json")) << c.name << "\n" << r.output;
    EXPECT_EQ(NonLogLines(r.output).size(), 1u) << "one line: " << c.name << "\n" << r.output;
  }
  // A [model] key that contradicts config.json, and one that agrees with it.
  const std::string llama = Model("llama3").dir;
  auto r = RunCommand(
      Eval("--weights " + llama + " --model.hf=" + llama + " --model.hidden_size=128"), 120);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "model.hidden_size = 128 contradicts hidden_size = 64 in " +
                                     llama + "/config.json"))
      << r.output;
  r = RunCommand(Eval("--weights " + llama + " --model.hf=" + llama + " --model.num_layers=2"),
                 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// `ftrain plan --model DIR` takes the shapes from config.json: the shipped configs/hf copies of
// Llama-3.1-8B, Mistral-7B-v0.3 and Qwen2.5-7B give their published parameter counts, directly
// and through the fine-tuning configs that name them.
TEST_F(HfModelTest, PlanReadsTheDirectory) {
  struct Case {
    std::string dir;
    double params;
  } cases[] = {
      {std::string(FTRAIN_SOURCE_DIR) + "/configs/hf/llama-3.1-8b", 8030261248.0},
      {std::string(FTRAIN_SOURCE_DIR) + "/configs/hf/mistral-7b-v0.3", 7248023552.0},
      {std::string(FTRAIN_SOURCE_DIR) + "/configs/hf/qwen2.5-7b", 7615616512.0},
      // The fine-tuning examples name those directories (relative to the checkout).
      {"configs/llama-3.1-8b.cfg", 8030261248.0},
      {"configs/mistral-7b.cfg", 7248023552.0},
      {"configs/qwen2.5-7b.cfg", 7615616512.0},
  };
  for (const auto& c : cases) {
    auto r =
        RunCommand(std::string("cd ") + FTRAIN_SOURCE_DIR + " && " + Ftrain() + " plan --model " +
                       c.dir + " --nodes 1 --gpus-per-node 8 --json 2>/dev/null",
                   120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.output;
    EXPECT_EQ(j["parameters"].get<double>(), c.params) << c.dir;
  }
}

}  // namespace
}  // namespace ftrain::testing
