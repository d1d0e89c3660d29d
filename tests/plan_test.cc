// Unit tests for the model-shape config (parameter counts, validation messages) and for
// `ftrain plan`: the seed case's numbers, the recommendation rule, Young/Daly, JSON, and the
// command line's exit codes. No LibTorch and no GPU: everything here is arithmetic.
#include "train/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/config.h"
#include "model/llama_config.h"

namespace ftrain {
namespace {

std::string ConfigPath(const std::string& name) {
  return std::string(FTRAIN_SOURCE_DIR) + "/configs/" + name;
}

LlamaConfig LoadModel(const std::string& name) {
  auto config = Config::LoadFile(ConfigPath(name));
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto model = LlamaConfig::FromConfig(*config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return *model;
}

Status ModelError(const std::string& text) {
  auto config = Config::Parse(text, "bad.cfg");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return LlamaConfig::FromConfig(*config).status();
}

constexpr char kValid[] =
    "[model]\nvocab_size = 512\nhidden_size = 64\nintermediate_size = 172\nnum_layers = 2\n"
    "num_heads = 4\nmax_seq_len = 64\n";

// --- LlamaConfig -----------------------------------------------------------------------------

TEST(LlamaConfigTest, Llama7bCountMatchesHuggingFace) {
  LlamaConfig c = LoadModel("llama-7b.cfg");
  EXPECT_EQ(c.NumParameters(), 6738415616);  // LlamaForCausalLM(Llama-2-7b-hf).num_parameters()
  EXPECT_EQ(c.EmbeddingParameters(), 131072000);
  EXPECT_EQ(c.LayerParameters(), 202383360);
  EXPECT_EQ(c.HeadParameters(), 131072000);
  EXPECT_EQ(c.LargestUnitParameters(), 202383360);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.max_seq_len, 4096);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
}

TEST(LlamaConfigTest, TinyAndSmall) {
  LlamaConfig tiny = LoadModel("tiny.cfg");
  EXPECT_EQ(tiny.HeadDim(), 16);
  EXPECT_EQ(tiny.num_kv_heads, 2);
  // q 64x64, k,v 64x32, o 64x64, gate/up/down 64x172, two norms of 64.
  EXPECT_EQ(tiny.LayerParameters(), 4096 + 2 * 2048 + 4096 + 3 * 64 * 172 + 128);
  EXPECT_EQ(tiny.NumParameters(), 156480);

  LlamaConfig small = LoadModel("small.cfg");
  EXPECT_TRUE(small.tie_embeddings);
  EXPECT_EQ(small.HeadParameters(), 0);
  EXPECT_EQ(small.NumParameters(), 100092672);
  EXPECT_GT(small.NumParameters(), 90000000);
  EXPECT_LT(small.NumParameters(), 110000000);
  EXPECT_EQ(small.LargestUnitParameters(), small.EmbeddingParameters());
}

TEST(LlamaConfigTest, Defaults) {
  auto config = Config::Parse(kValid, "t.cfg");
  ASSERT_TRUE(config.ok());
  auto c = LlamaConfig::FromConfig(*config);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_kv_heads, 4);  // = num_heads
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_TRUE(config->CheckAllConsumed().ok());
}

TEST(LlamaConfigTest, ErrorsNameKeyAndOrigin) {
  Status s = ModelError(std::string(kValid) + "num_kv_heads = 3\n");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("model.num_kv_heads"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bad.cfg:8"), std::string::npos) << s.message();

  s = ModelError(
      "[model]\nvocab_size = 512\nhidden_size = 60\nintermediate_size = 1\n"
      "num_layers = 1\nnum_heads = 7\nmax_seq_len = 8\n");
  EXPECT_NE(s.message().find("bad.cfg:3: model.hidden_size = 60"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("model.num_heads = 7 (bad.cfg:6)"), std::string::npos) << s.message();

  s = ModelError(
      "[model]\nvocab_size = 512\nhidden_size = 0\nintermediate_size = 1\n"
      "num_layers = 1\nnum_heads = 1\nmax_seq_len = 8\n");
  EXPECT_NE(s.message().find("bad.cfg:3: model.hidden_size = 0 must be a positive"),
            std::string::npos)
      << s.message();

  s = ModelError("[model]\nhidden_size = 64\n");
  EXPECT_NE(s.message().find("'model.vocab_size' is not set"), std::string::npos) << s.message();

  s = ModelError(std::string(kValid) + "rms_norm_eps = -1\n");
  EXPECT_NE(s.message().find("bad.cfg:8: model.rms_norm_eps"), std::string::npos) << s.message();

  s = ModelError(std::string(kValid) + "tie_embeddings = maybe\n");
  EXPECT_NE(s.message().find("model.tie_embeddings"), std::string::npos) << s.message();

  // hidden 24 / 4 heads = 6 is fine; 20 / 4 = 5 is odd (RoPE needs pairs).
  s = ModelError(
      "[model]\nvocab_size = 8\nhidden_size = 20\nintermediate_size = 1\n"
      "num_layers = 1\nnum_heads = 4\nmax_seq_len = 8\n");
  EXPECT_NE(s.message().find("is odd"), std::string::npos) << s.message();
}

TEST(LlamaConfigTest, OverrideOriginIsCommandLine) {
  auto config = Config::Parse(kValid, "t.cfg");
  ASSERT_TRUE(config.ok());
  ASSERT_TRUE(config->ApplyOverride("--model.num_layers=-2").ok());
  Status s = LlamaConfig::FromConfig(*config).status();
  EXPECT_NE(s.message().find("command line: model.num_layers = -2"), std::string::npos)
      << s.message();
}

// --- the planner ------------------------------------------------------------------------------

PlanInput SeedCase() {
  PlanInput in;
  in.parameters = 7e9;
  in.nodes = 8;
  in.gpus_per_node = 8;
  in.gpu_mem_gb = 80;
  return in;
}

const StrategyPlan& Find(const PlanResult& r, const std::string& name) {
  for (const auto& s : r.strategies) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no strategy " << name;
  return r.strategies.front();
}

std::string Recommended(const PlanResult& r) {
  return r.recommended >= 0 ? r.strategies[r.recommended].name : "none";
}

TEST(PlanTest, SeedCase) {
  auto r = MakePlan(SeedCase());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& ddp = Find(*r, "ddp");
  EXPECT_DOUBLE_EQ(ddp.state_bytes, 112e9);  // 16 bytes x 7e9
  EXPECT_DOUBLE_EQ(ddp.weights_bytes, 14e9);
  EXPECT_DOUBLE_EQ(ddp.grads_bytes, 14e9);
  EXPECT_DOUBLE_EQ(ddp.master_bytes, 28e9);
  EXPECT_DOUBLE_EQ(ddp.moments_bytes, 56e9);
  EXPECT_FALSE(ddp.fits);
  const auto& hybrid = Find(*r, "hybrid_shard");
  EXPECT_DOUBLE_EQ(hybrid.state_bytes, 14e9);  // 112 GB over the 8 GPUs of a node
  EXPECT_TRUE(hybrid.fits);
  EXPECT_DOUBLE_EQ(Find(*r, "zero1").state_bytes, 28e9 + 12 * 7e9 / 64);
  EXPECT_DOUBLE_EQ(Find(*r, "zero2").state_bytes, 14e9 + 14 * 7e9 / 64);
  EXPECT_DOUBLE_EQ(Find(*r, "full_shard").state_bytes, 112e9 / 64);
  EXPECT_EQ(Recommended(*r), "hybrid_shard");

  // The shape is assumed from the 7B row, and the usable memory is 80 GB minus 10%.
  EXPECT_EQ(r->layers, 32);
  EXPECT_EQ(r->hidden, 4096);
  EXPECT_TRUE(r->layers_assumed && r->hidden_assumed);
  EXPECT_EQ(r->assumed_shape, "7B");
  EXPECT_DOUBLE_EQ(r->usable_bytes, 72e9);
  EXPECT_EQ(*r->input.seq_len, 4096);

  // Young/Daly: sqrt(2 x 13 s x 86400 s) = 1498.8 s, about 25 min; half of it lost per failure.
  EXPECT_NEAR(r->checkpoint_interval_s, 1498.8, 0.05);
  EXPECT_EQ(std::lround(r->checkpoint_interval_s), 1499);
  EXPECT_NEAR(r->work_lost_s, 749.4, 0.05);
}

TEST(PlanTest, ActivationFormulas) {
  const double sbh = 4096.0 * 1 * 4096;
  PlanInput in = SeedCase();
  auto fused = MakePlan(in);
  ASSERT_TRUE(fused.ok());
  EXPECT_DOUBLE_EQ(fused->activation_bytes, 32 * 34 * sbh);

  in.fused_attention = false;  // Korthikanti et al. with the 5as/h score term
  auto eager = MakePlan(in);
  ASSERT_TRUE(eager.ok());
  EXPECT_DOUBLE_EQ(eager->activation_bytes_per_layer, sbh * (34 + 5.0 * 32 * 4096 / 4096));
  EXPECT_DOUBLE_EQ(eager->activation_bytes, 32 * eager->activation_bytes_per_layer);
  EXPECT_EQ(Recommended(*eager), "none");  // 104 GB of activations fit nowhere

  in.act_ckpt = true;  // block inputs of every layer + one layer recomputed in full
  auto ckpt = MakePlan(in);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_DOUBLE_EQ(ckpt->activation_bytes, 32 * 2 * sbh + eager->activation_bytes_per_layer);
  EXPECT_EQ(Recommended(*ckpt), "hybrid_shard");

  in.micro_batch = 4;  // linear in the micro-batch
  auto b4 = MakePlan(in);
  ASSERT_TRUE(b4.ok());
  EXPECT_DOUBLE_EQ(b4->activation_bytes, 4 * ckpt->activation_bytes);
}

TEST(PlanTest, TrafficFollowsTheRingFormulas) {
  auto r = MakePlan(SeedCase());
  ASSERT_TRUE(r.ok());
  const double p2 = 2 * 7e9;  // bf16 gradients
  EXPECT_DOUBLE_EQ(Find(*r, "ddp").inter_node_bytes_per_step, 2.0 * 63 / 64 * p2);
  EXPECT_DOUBLE_EQ(Find(*r, "zero2").inter_node_bytes_per_step, 2.0 * 63 / 64 * p2);
  EXPECT_DOUBLE_EQ(Find(*r, "full_shard").inter_node_bytes_per_step, 1.5 * 2.0 * 63 / 64 * p2);
  const auto& hybrid = Find(*r, "hybrid_shard");
  EXPECT_DOUBLE_EQ(hybrid.inter_node_bytes_per_step, 2.0 * 7 / 8 * p2 / 8);
  EXPECT_DOUBLE_EQ(hybrid.intra_node_bytes_per_step, 1.5 * 2.0 * 7 / 8 * p2);
  // Gathered: the largest unit (7e9 / 32 layers) in bf16, twice.
  EXPECT_DOUBLE_EQ(hybrid.gathered_bytes, 2 * 2 * (7e9 / 32));
  EXPECT_DOUBLE_EQ(Find(*r, "ddp").gathered_bytes, 0);
}

TEST(PlanTest, SingleNodePrefersDdpWhenItFits) {
  PlanInput in;
  in.parameters = 1e9;  // 16 GB of state: fits a single 80 GB GPU unsharded
  in.nodes = 1;
  in.gpus_per_node = 8;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  for (const auto& s : r->strategies) EXPECT_EQ(s.inter_node_bytes_per_step, 0) << s.name;
  EXPECT_TRUE(Find(*r, "ddp").fits);
  EXPECT_EQ(Recommended(*r), "ddp");
  EXPECT_NE(r->reason.find("One node"), std::string::npos) << r->reason;

  in.nodes = 4;  // across nodes, hybrid's small inter-node share wins even though DDP fits
  r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Recommended(*r), "hybrid_shard");

  in.gpus_per_node = 1;  // one GPU per node: hybrid is DDP, ties go to the simpler one
  r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Recommended(*r), "ddp");
}

TEST(PlanTest, SingleNodeSevenBillionShards) {
  PlanInput in = SeedCase();
  in.nodes = 1;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(Find(*r, "ddp").fits);
  // zero1/zero2 move the fewest intra-node bytes among those that fit.
  EXPECT_EQ(Recommended(*r), "zero1");
}

TEST(PlanTest, NothingFitsIsAResultWithSuggestions) {
  PlanInput in;
  in.parameters = 65e9;
  in.nodes = 1;
  in.gpus_per_node = 1;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->recommended, -1);
  EXPECT_EQ(r->layers, 80);  // the 65B row
  ASSERT_FALSE(r->suggestions.empty());
  EXPECT_NE(r->suggestions[0].find("--act-ckpt"), std::string::npos);
  auto j = nlohmann::json::parse(FormatPlanJson(*r));
  EXPECT_TRUE(j["recommended"].is_null());
  EXPECT_NE(FormatPlanText(*r).find("recommended: none"), std::string::npos);
}

TEST(PlanTest, ModelConfigAndOverridesChangeThePlan) {
  auto config = Config::LoadFile(ConfigPath("llama-7b.cfg"));
  ASSERT_TRUE(config.ok());
  PlanInput in = SeedCase();
  in.parameters.reset();
  in.model = *LlamaConfig::FromConfig(*config);
  in.model_source = "llama-7b.cfg";
  auto full = MakePlan(in);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->parameters, 6738415616);
  EXPECT_FALSE(full->layers_assumed);
  EXPECT_EQ(full->largest_unit_parameters, 202383360);
  EXPECT_EQ(Recommended(*full), "hybrid_shard");

  ASSERT_TRUE(config->ApplyOverride("--model.num_layers=16").ok());
  ASSERT_TRUE(config->ApplyOverride("--model.max_seq_len=2048").ok());
  in.model = *LlamaConfig::FromConfig(*config);
  auto half = MakePlan(in);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->parameters, 6738415616 - 16 * int64_t{202383360});
  EXPECT_EQ(*half->input.seq_len, 2048);  // seq-len defaults to the model's max_seq_len
  EXPECT_DOUBLE_EQ(half->activation_bytes, full->activation_bytes / 4);  // half the layers, s/2
  EXPECT_LT(Find(*half, "hybrid_shard").state_bytes, Find(*full, "hybrid_shard").state_bytes);
}

TEST(PlanTest, BadInputNamesTheFlag) {
  auto expect_error = [](const PlanInput& in, const std::string& flag) {
    auto r = MakePlan(in);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status().message();
  };
  PlanInput in = SeedCase();
  in.nodes = 0;
  expect_error(in, "--nodes");
  in = SeedCase();
  in.gpus_per_node = -8;
  expect_error(in, "--gpus-per-node");
  in = SeedCase();
  in.gpu_mem_gb = 0;
  expect_error(in, "--gpu-mem-gb");
  in = SeedCase();
  in.parameters = -7e9;
  expect_error(in, "--params");
  in = SeedCase();
  in.layers = 0;
  expect_error(in, "--layers");
  in = SeedCase();
  in.ckpt_stall_s = 0;
  expect_error(in, "--ckpt-stall-s");
  in = SeedCase();
  in.mtbf_hours = -1;
  expect_error(in, "--mtbf-hours");
  in = SeedCase();
  in.parameters.reset();
  expect_error(in, "--params");
  in = SeedCase();
  in.model = LoadModel("tiny.cfg");
  expect_error(in, "--model");
  in.parameters.reset();
  in.seq_len = 65;
  expect_error(in, "--seq-len");
}

TEST(PlanTest, JsonShape) {
  auto r = MakePlan(SeedCase());
  ASSERT_TRUE(r.ok());
  auto j = nlohmann::json::parse(FormatPlanJson(*r));
  ASSERT_EQ(j["strategies"].size(), 5u);
  std::vector<std::string> names;
  for (const auto& s : j["strategies"]) {
    names.push_back(s["name"]);
    EXPECT_TRUE(s["state_bytes_per_gpu"].is_number_integer());
    EXPECT_TRUE(s["total_bytes_per_gpu"].is_number_integer());
    EXPECT_TRUE(s["fits"].is_boolean());
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"ddp", "zero1", "zero2", "full_shard", "hybrid_shard"}));
  EXPECT_EQ(j["strategies"][0]["state_bytes_per_gpu"], int64_t{112000000000});
  EXPECT_EQ(j["strategies"][4]["state_bytes_per_gpu"], int64_t{14000000000});
  EXPECT_EQ(j["recommended"], "hybrid_shard");
  EXPECT_NEAR(j["checkpoint_interval_s"].get<double>(), 1498.8, 0.05);
}

TEST(PlanTest, TextReport) {
  auto r = MakePlan(SeedCase());
  ASSERT_TRUE(r.ok());
  std::string text = FormatPlanText(*r);
  EXPECT_NE(text.find("1 GB = 1e9 bytes"), std::string::npos);
  EXPECT_NE(text.find("(assumed)"), std::string::npos);
  EXPECT_NE(text.find("recommended: hybrid_shard"), std::string::npos);
  EXPECT_NE(text.find("checkpoint every 25.0 min (1499 s) = sqrt(2 x 13 s x 24 h)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("expected work lost per failure 12.5 min"), std::string::npos);
}

// --- the command line ---------------------------------------------------------------------------

struct CliResult {
  int code;
  std::string out;
  std::string err;
};

CliResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), "plan");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int code = cli::RunPlan(static_cast<int>(argv.size()), argv.data());
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  return {code, out, err};
}

TEST(PlanCliTest, SeedCaseJson) {
  auto r = RunCli(
      {"--params", "7e9", "--nodes", "8", "--gpus-per-node", "8", "--gpu-mem-gb", "80", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["recommended"], "hybrid_shard");
  EXPECT_FALSE(j["strategies"][0]["fits"].get<bool>());
}

TEST(PlanCliTest, ModelWithOverride) {
  auto r = RunCli(
      {"--model", ConfigPath("llama-7b.cfg"), "--model.num_layers=16", "--nodes", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["parameters"], int64_t{6738415616 - 16 * int64_t{202383360}});
  EXPECT_EQ(j["layers"], 16);
}

TEST(PlanCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCli({"--help"}).code, 0);
  EXPECT_NE(RunCli({"--help"}).out.find("--gpus-per-node"), std::string::npos);

  auto r = RunCli({"--nodes", "8"});  // neither --params nor --model
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--params"), std::string::npos) << r.err;

  r = RunCli({"--params", "7e9", "--bogus"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;

  r = RunCli({"--params"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("params"), std::string::npos) << r.err;

  r = RunCli({"--params", "7e9", "--nodes", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--nodes"), std::string::npos) << r.err;

  r = RunCli({"--params", "7e9", "--nodes=-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--nodes"), std::string::npos) << r.err;

  r = RunCli({"--params", "seven"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--params"), std::string::npos) << r.err;

  r = RunCli({"--params", "7e9", "--model.num_layers=3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;

  // One line on stderr, nothing on stdout.
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(PlanCliTest, BadConfigFileNamesFileAndLine) {
  const std::string path = testing::TempDir() + "/plan_test_bad.cfg";
  {
    std::ofstream f(path);
    f << "[model]\nvocab_size = 512\nhidden_size 64\n";
  }
  auto r = RunCli({"--model", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":3"), std::string::npos) << r.err;

  {
    std::ofstream f(path);
    f << "[model]\nvocab_size = 512\nhidden_size = 64\nintermediate_size = 172\n"
         "num_layers = 2\nnum_heads = 4\nmax_seq_len = 64\nnum_layer = 3\n[train]\nlr = 1\n";
  }
  r = RunCli({"--model", path});  // a typo in [model] is caught; [train] is not plan's business
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path + ":8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.num_layer"), std::string::npos) << r.err;

  {
    std::ofstream f(path);
    f << "[model]\nhidden_size = 64\n";
  }
  r = RunCli({"--model", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.vocab_size"), std::string::npos) << r.err;

  r = RunCli({"--model", path + ".missing"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(".missing"), std::string::npos) << r.err;
}

TEST(PlanCliTest, NothingFitsStillExitsZero) {
  auto r = RunCli({"--params", "65e9", "--nodes", "1", "--gpus-per-node", "1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recommended: none"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ftrain
