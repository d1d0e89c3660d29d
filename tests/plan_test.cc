// Unit tests for the model-shape config (parameter counts, validation messages) and for
// `ftrain plan`: the seed case's numbers, the recommendation rule, Young/Daly, JSON, and the
// command line's exit codes. No LibTorch and no GPU: everything here is arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/store.h"
#include "ckpt_fixture.h"
#include "cli/commands.h"
#include "core/config.h"
#include "data/format/synthetic.h"
#include "formats/llama_config.h"
#include "plan/memory_fit.h"
#include "plan/planner.h"
#include "plan/sources.h"

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
  // The memory tier (issue 35), Young/Daly with its own stall: sqrt(2 x 0.5 s x 86400 s) =
  // 293.9 s; a failure restorable from memory loses about 2.4 min instead of 12.5.
  EXPECT_NEAR(r->memory_interval_s, 293.94, 0.01);
  EXPECT_NEAR(r->memory_work_lost_s, 146.97, 0.01);
  const std::string text = FormatPlanText(*r);
  EXPECT_NE(text.find("memory tier every 294 s"), std::string::npos) << text;
  EXPECT_NE(text.find("2.4 min instead of 12.5 min"), std::string::npos) << text;
  PlanInput bad = SeedCase();
  bad.memory_stall_s = 0;
  auto refused = MakePlan(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--memory-stall-s"), std::string::npos);
}

// The host-memory figure (issue 35): ckptd's 2 slots of a rank's snapshot plus the 2
// replicas (newest, previous) the next node holds of it. By hand from the shape of
// configs/llama-7b.cfg: embeddings and lm_head 32000 x 4096 each, 32 layers of
// 4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096, the final norm 4096.
TEST(PlanTest, HostMemoryCountsTheDaemonsSlotsAndTheBuddyReplicas) {
  PlanInput in;
  in.model = LoadModel("llama-7b.cfg");
  in.nodes = 2;
  in.gpus_per_node = 8;
  in.gpu_mem_gb = 80;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double layer = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 2.0 * 4096;
  const double params = 2.0 * 32000 * 4096 + 32 * layer + 4096;
  ASSERT_DOUBLE_EQ(params, 6738415616.0);
  // A snapshot is the rank's shard: fp32 master, m, v and its bf16 copy, 14 bytes a parameter.
  const double full_shard_snapshot = 14 * params / 16;  // sharded over all 16 GPUs
  const double hybrid_snapshot = 14 * params / 8;       // over the 8 GPUs of a node
  const auto& fs = Find(*r, "full_shard");
  EXPECT_NEAR(fs.snapshot_bytes, full_shard_snapshot, 1);
  // Every rank writes: its node holds 2 slots of it and 2 replicas of the previous node's rank.
  EXPECT_NEAR(fs.host_bytes_per_rank, (2 + 2) * full_shard_snapshot, 1);
  EXPECT_NEAR(fs.host_bytes_per_node, 8 * (2 + 2) * full_shard_snapshot, 8);
  // Replicated states are written by their first copy only (node 0 for hybrid, rank 0 for
  // ddp): node 0 holds the slots, node 1 the replicas, never one node both.
  const auto& hy = Find(*r, "hybrid_shard");
  EXPECT_NEAR(hy.host_bytes_per_rank, 2 * hybrid_snapshot, 1);
  EXPECT_NEAR(hy.host_bytes_per_node, 8 * 2 * hybrid_snapshot, 8);
  EXPECT_NEAR(Find(*r, "ddp").host_bytes_per_node, 2 * 14 * params, 1);
  ASSERT_EQ(Recommended(*r), "hybrid_shard");
  EXPECT_NEAR(r->host_bytes_per_rank, 2 * hybrid_snapshot, 1);
  EXPECT_NEAR(r->host_bytes_per_node, 16 * hybrid_snapshot, 8);
  const std::string text = FormatPlanText(*r);
  char want[128];
  std::snprintf(want, sizeof(want),
                "host memory (ckptd) per rank up to %.1f GB, per node up to %.1f GB",
                2 * hybrid_snapshot / 1e9, 16 * hybrid_snapshot / 1e9);
  EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  auto j = nlohmann::json::parse(FormatPlanJson(*r));
  EXPECT_NEAR(j["host_bytes_per_rank"].get<double>(), 2 * hybrid_snapshot, 1);
  EXPECT_NEAR(j["host_bytes_per_node"].get<double>(), 16 * hybrid_snapshot, 8);
  EXPECT_EQ(j["ckptd_slots_per_rank"].get<int>(), 2);
  EXPECT_EQ(j["buddy_replicas_per_rank"].get<int>(), 2);
  // One node: no buddy, no replicas.
  in.nodes = 1;
  auto one = MakePlan(in);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_NEAR(Find(*one, "full_shard").host_bytes_per_rank, 2 * 14 * params / 8, 1);
}

// Per token and layer, what ftrain's Llama layer keeps (bf16, fused attention): 12h + 4kv + 6i +
// 4a + 8 bytes; at 7B (h = kv = 4096, i = 11008, a = 32) 131,720 bytes, 32.2h.
constexpr double kSeedLayerBytesPerToken = 12.0 * 4096 + 4 * 4096 + 6 * 11008 + 4 * 32 + 8;

TEST(PlanTest, ActivationFormulas) {
  const double sbh = 4096.0 * 1 * 4096;
  const double per_layer = 4096.0 * kSeedLayerBytesPerToken;
  PlanInput in = SeedCase();
  auto fused = MakePlan(in);
  ASSERT_TRUE(fused.ok());
  EXPECT_DOUBLE_EQ(fused->activation_bytes_per_layer, per_layer);
  EXPECT_DOUBLE_EQ(fused->activation_bytes, 32 * per_layer);

  in.fused_attention = false;  // plus Korthikanti et al.'s 5as/h score term
  auto eager = MakePlan(in);
  ASSERT_TRUE(eager.ok());
  EXPECT_DOUBLE_EQ(eager->activation_bytes_per_layer, per_layer + sbh * (5.0 * 32 * 4096 / 4096));
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

// Selective checkpointing by layer (--ac-every 2): layers 0, 2, ... keep only their input,
// the others their whole activations and (sharded) their gathered weights until the backward.
TEST(PlanTest, SelectiveCheckpointingSitsBetweenAllAndNone) {
  const double sbh = 4096.0 * 1 * 4096;
  PlanInput in = SeedCase();
  in.act_ckpt = true;
  auto all = MakePlan(in);
  in.ac_every = 2;
  auto half = MakePlan(in);
  in.act_ckpt = false;
  in.ac_every = 1;
  auto none = MakePlan(in);
  ASSERT_TRUE(all.ok() && half.ok() && none.ok());
  const double per_layer = 4096.0 * kSeedLayerBytesPerToken;
  EXPECT_DOUBLE_EQ(half->activation_bytes, 16 * 2 * sbh + 16 * per_layer + per_layer);
  EXPECT_LT(all->activation_bytes, half->activation_bytes);
  EXPECT_LT(half->activation_bytes, none->activation_bytes);
  const double root = 2.0 * 32000 * 4096 + 4096;
  const double layer = std::floor((7e9 - root) / 32);
  EXPECT_DOUBLE_EQ(Find(*all, "hybrid_shard").gathered_bytes, 2 * (root + 2 * layer));
  EXPECT_DOUBLE_EQ(Find(*half, "hybrid_shard").gathered_bytes, 2 * (root + 17 * layer));
  EXPECT_DOUBLE_EQ(Find(*none, "hybrid_shard").gathered_bytes, 2 * (root + 32 * layer))
      << "without checkpointing every layer's saved graph holds its gathered weights";
  EXPECT_DOUBLE_EQ(Find(*half, "ddp").gathered_bytes, 0);
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
  // Gathered in bf16: the root unit (an assumed untied 32000-token embedding and head, the
  // final norm) for the whole micro-batch, plus every layer (no activation checkpointing: each
  // layer's saved graph holds its weights until its backward; with it, SelectiveCheckpointing
  // above: the layer computed and the one prefetched).
  const double root = 2.0 * 32000 * 4096 + 4096;
  const double layer = std::floor((7e9 - root) / 32);
  EXPECT_DOUBLE_EQ(hybrid.gathered_bytes, 2 * (root + 32 * layer));
  EXPECT_TRUE(r->vocab_assumed);
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

// --- LoRA and QLoRA ---------------------------------------------------------------------------

PlanInput OneConsumerGpu() {  // the adapter seed case: 7B on one 24 GB GPU
  PlanInput in;
  in.parameters = 7e9;
  in.nodes = 1;
  in.gpus_per_node = 1;
  in.gpu_mem_gb = 24;
  return in;
}

const AdapterPlan& Adapter(const PlanResult& r, const std::string& name) {
  for (const auto& a : r.adapters) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no adapter row " << name;
  return r.adapters.front();
}

TEST(PlanAdapterTest, SevenBillionOnOneConsumerGpu) {
  PlanInput in = OneConsumerGpu();
  in.act_ckpt = true;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Recommended(*r), "none");  // full fine-tuning: 112 GB of state on 21.6 GB
  for (const auto& s : r->strategies) EXPECT_FALSE(s.fits) << s.name;

  // Assumed 7B shape: h 4096, I = 8h/3 rounded up to 256 = 11008, no GQA.
  EXPECT_EQ(r->intermediate, 11008);
  EXPECT_EQ(r->kv_dim, 4096);
  const double h = 4096, inter = 11008, l = 32;
  const double per_layer = 16 * (4 * (h + h) + 3 * (h + inter));  // q,k,v,o + gate,up,down
  const auto& lora = Adapter(*r, "lora");
  EXPECT_DOUBLE_EQ(lora.adapter_parameters, l * per_layer);  // 39,976,960
  EXPECT_DOUBLE_EQ(lora.adapter_bytes, 14 * l * per_layer);
  EXPECT_DOUBLE_EQ(lora.base_bytes, 2 * 7e9);
  EXPECT_DOUBLE_EQ(lora.dequant_bytes, 0);
  EXPECT_DOUBLE_EQ(lora.activation_bytes, r->activation_bytes);
  EXPECT_TRUE(lora.fits);  // 14.0 + 0.6 + 1.6 = 16.2 GB of 21.6

  const auto& qlora = Adapter(*r, "qlora");
  const double quantised = l * (4 * h * h + 3 * h * inter);
  EXPECT_DOUBLE_EQ(qlora.quantised_parameters, quantised);
  // 0.5 byte + (8/64 + 32/(64*256)) bits = 0.127 bits per quantised weight; the rest bf16.
  const double constants = (8.0 / 64 + 32.0 / (64 * 256)) / 8;
  EXPECT_NEAR(constants * 8, 0.127, 0.0005);
  EXPECT_DOUBLE_EQ(qlora.base_bytes, (0.5 + constants) * quantised + 2 * (7e9 - quantised));
  EXPECT_DOUBLE_EQ(qlora.dequant_bytes, 2 * h * inter);
  EXPECT_TRUE(qlora.fits);
  EXPECT_LT(qlora.total_bytes, 7e9);
  // Nothing fits for full fine-tuning, so the suggestions name the adapters.
  bool named = false;
  for (const auto& s : r->suggestions) named = named || s.find("qlora") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(PlanAdapterTest, ActivationsDecideLora) {
  PlanInput in = OneConsumerGpu();
  in.seq_len = 2048;  // 12.8 GB of activations without checkpointing
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(Adapter(*r, "lora").fits);  // 14.0 + 0.6 + 12.8 = 27.4 GB > 21.6
  EXPECT_TRUE(Adapter(*r, "qlora").fits);
  const std::string text = FormatPlanText(*r);
  EXPECT_NE(text.find("try: --act-ckpt"), std::string::npos) << text;
  EXPECT_NE(text.find("then lora and qlora fit"), std::string::npos) << text;

  in.seq_len = 4096;  // 25.5 GB of activations: neither fits
  r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(Adapter(*r, "lora").fits);
  EXPECT_FALSE(Adapter(*r, "qlora").fits);
}

TEST(PlanAdapterTest, RankTargetsAndGqaFromTheModel) {
  PlanInput in = OneConsumerGpu();
  in.parameters.reset();
  in.model = LoadModel("tiny.cfg");  // h 64, kv 2 heads x 16 = 32, I 172, 2 layers
  in.lora_rank = 8;
  in.lora_targets = {"q", "v", "q"};  // duplicates count once
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kv_dim, 32);
  EXPECT_DOUBLE_EQ(Adapter(*r, "lora").adapter_parameters, 2 * 8 * ((64 + 64) + (64 + 32)));
  // Every projection is quantised, targeted or not: exactly the layers' linear weights.
  EXPECT_DOUBLE_EQ(Adapter(*r, "qlora").quantised_parameters,
                   2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172));

  in.lora_rank = 33;  // larger than the 64 x 32 v projection allows
  auto bad = MakePlan(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--lora-rank 33"), std::string::npos)
      << bad.status().message();
}

TEST(PlanAdapterTest, JsonRows) {
  auto r = MakePlan(OneConsumerGpu());
  ASSERT_TRUE(r.ok());
  auto j = nlohmann::json::parse(FormatPlanJson(*r));
  ASSERT_EQ(j["adapters"].size(), 2u);
  EXPECT_EQ(j["adapters"][0]["name"], "lora");
  EXPECT_EQ(j["adapters"][1]["name"], "qlora");
  EXPECT_EQ(j["adapters"][0]["lora_rank"], 16);
  EXPECT_TRUE(j["adapters"][1]["total_bytes_per_gpu"].is_number_integer());
  EXPECT_EQ(j["strategies"].size(), 5u);  // the full fine-tune rows are unchanged
}

// --- time to train ------------------------------------------------------------------------------

PlanInput SeedTime() {  // 8 TB of text, 64 H100 SXM at 45 % MFU, one epoch in 5 days
  PlanInput in = SeedCase();
  in.text_bytes = 8e12;
  in.gpu = "h100-sxm";
  in.mfu = 0.45;
  in.deadline_days = 5;
  return in;
}

TEST(PlanTimeTest, SeedCase) {
  auto r = MakePlan(SeedTime());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TimePlan& t = r->time;
  EXPECT_DOUBLE_EQ(t.bytes_per_token, 4.0);
  EXPECT_NE(t.bytes_per_token_source.find("assumed"), std::string::npos);
  EXPECT_DOUBLE_EQ(t.tokens, 2e12);
  EXPECT_FALSE(t.attention_counted);  // the 7B shape is only assumed
  EXPECT_DOUBLE_EQ(t.flops_per_token, 6 * 7e9);
  EXPECT_DOUBLE_EQ(t.total_flops, 8.4e22);
  // 8.4e22 / (64 x 989e12 x 0.45) = 2.949e6 s = 34.1 days.
  const double days = 8.4e22 / (64 * 989e12 * 0.45) / 86400;
  EXPECT_NEAR(days, 34.13, 0.01);
  EXPECT_NEAR(t.epoch_seconds / 86400, days, 0.01 * days);
  EXPECT_NEAR(t.tokens_per_s, 64 * 989e12 * 0.45 / 4.2e10, 1e-6 * t.tokens_per_s);
  EXPECT_NEAR(t.disk_bytes_per_s_per_node, 2 * 8 * 989e12 * 0.45 / 4.2e10, 1e-3);
  EXPECT_NEAR(t.text_bytes_per_s_per_node, 4 * 8 * 989e12 * 0.45 / 4.2e10, 1e-3);
  EXPECT_GT(t.epoch_seconds_with_overhead, t.epoch_seconds);

  // The deadline: 5 days need 307 % MFU on 64 GPUs; 437 GPUs at 45 %.
  EXPECT_EQ(t.verdict, "impossible");
  EXPECT_NEAR(t.needed_mfu, 8.4e22 / (5 * 86400) / (64 * 989e12), 1e-9);
  EXPECT_NEAR(t.needed_mfu, 3.072, 0.001);
  EXPECT_EQ(t.gpus_needed, 437);
  EXPECT_EQ(t.nodes_needed, 55);
  EXPECT_NEAR(t.tokens_in_deadline, 64 * 989e12 * 0.45 / 4.2e10 * 5 * 86400, 1e3);
  EXPECT_NEAR(t.tokens_in_deadline / t.tokens, 0.1465, 0.0005);

  PlanInput a100 = SeedTime();
  a100.gpu = "a100-80gb";
  r = MakePlan(a100);
  ASSERT_TRUE(r.ok());
  const double a100_days = 8.4e22 / (64 * 312e12 * 0.45) / 86400;  // 108.2
  EXPECT_NEAR(r->time.epoch_seconds / 86400, a100_days, 0.01 * a100_days);

  const std::string text = FormatPlanText(*MakePlan(SeedTime()));
  EXPECT_NE(text.find("one epoch: 34.1 days"), std::string::npos) << text;
  EXPECT_NE(text.find("deadline 5 days: impossible"), std::string::npos) << text;
  EXPECT_NE(text.find("437 GPUs (55 nodes of 8)"), std::string::npos) << text;
}

TEST(PlanTimeTest, Verdicts) {
  PlanInput in = SeedTime();
  in.deadline_days = 40;  // 34.1 days at 45 %: possible
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->time.verdict, "possible");
  EXPECT_EQ(r->time.tokens_in_deadline, r->time.tokens);
  in.deadline_days = 30;  // needs 51 %
  EXPECT_EQ(MakePlan(in)->time.verdict, "needs a higher MFU");
  in.deadline_days = 20;  // needs 77 %
  EXPECT_EQ(MakePlan(in)->time.verdict, "unrealistic");
}

TEST(PlanTimeTest, AttentionTermWithAKnownShape) {
  PlanInput in = SeedTime();
  in.parameters.reset();
  in.model = LoadModel("llama-7b.cfg");
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->time.attention_counted);
  EXPECT_DOUBLE_EQ(r->time.attention_flops_per_token, 12.0 * 32 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(r->time.flops_per_token, 6.0 * 6738415616 + 12.0 * 32 * 4096 * 4096);

  in = SeedTime();
  in.layers = 32;
  in.hidden = 4096;
  in.seq_len = 2048;
  r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->time.flops_per_token, 6 * 7e9 + 12.0 * 32 * 4096 * 2048);
}

TEST(PlanTimeTest, TokensAndBytesFromAPackedDataset) {
  PlanInput in = SeedCase();
  in.gpu = "h100-sxm";
  DataFacts d;
  d.path = "packed";
  d.rows = 1000;
  d.seq_len = 4096;
  d.token_bytes = 2;
  d.text_bytes = 17000000;
  d.stream_tokens = 4250000;  // 4.0 bytes per token
  in.data = d;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->time.tokens, 1000.0 * 4096);
  EXPECT_DOUBLE_EQ(r->time.disk_bytes_per_token, 4097.0 * 2 / 4096);
  EXPECT_DOUBLE_EQ(r->time.bytes_per_token, 4.0);
  EXPECT_NE(r->time.bytes_per_token_source.find("measured"), std::string::npos);
  EXPECT_DOUBLE_EQ(r->time.mfu, 0.40);  // the default

  // --text-bytes with --data: the pack is a sample that measures bytes per token.
  in.data->text_bytes = 34000000;  // 8.0 bytes per token
  in.text_bytes = 8e12;
  r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->time.tokens, 1e12);
  in.bytes_per_token = 2.0;  // the flag wins over the measurement
  EXPECT_DOUBLE_EQ(MakePlan(in)->time.tokens, 4e12);
}

TEST(PlanTimeTest, NoThroughputSourceStillGivesFlops) {
  PlanInput in = SeedCase();
  in.tokens = 2e12;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->time.have_peak);
  EXPECT_DOUBLE_EQ(r->time.total_flops, 8.4e22);
  EXPECT_NE(FormatPlanText(*r).find("give --gpu NAME or --peak-tflops"), std::string::npos);
  auto j = nlohmann::json::parse(FormatPlanJson(*r));
  EXPECT_TRUE(j["time"]["epoch_days"].is_null());
  EXPECT_EQ(j["time"]["total_flops"].get<double>(), 8.4e22);
}

TEST(PlanTimeTest, GpuTableAndMemory) {
  auto h100 = FindGpu("h100-sxm");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->bf16_dense_tflops, 989);
  EXPECT_EQ(FindGpu("a100-80gb")->bf16_dense_tflops, 312);
  EXPECT_EQ(FindGpu("h200")->bf16_dense_tflops, 989);
  EXPECT_EQ(FindGpu("b200")->bf16_dense_tflops, 2250);
  auto bad = FindGpu("h100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("known: a100-40gb"), std::string::npos);
  EXPECT_NE(bad.status().message().find("h100-sxm"), std::string::npos);

  PlanInput in = SeedCase();
  in.gpu = "h200";
  in.gpu_mem_given = false;  // --gpu-mem-gb absent: the GPU's 141 GB
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->usable_bytes, 141e9 * 0.9);
  in.gpu_mem_given = true;  // an explicit --gpu-mem-gb stays
  EXPECT_DOUBLE_EQ(MakePlan(in)->usable_bytes, 72e9);
}

CalibrationRun SyntheticRun(int steps, double tps) {
  CalibrationRun run;
  run.run_dir = "runs/x";
  for (int i = 1; i <= steps; ++i) {
    CalibrationStep s;
    s.step = i;
    s.tokens_per_s = i <= 10 ? tps / 10 : tps + (i % 3);  // slow warm-up, then steady
    run.steps.push_back(s);
  }
  run.gpus = 8;
  run.gpus_source = "--calibrate-gpus";
  return run;
}

TEST(PlanTimeTest, CalibrateTakesTheMedianAfterWarmUp) {
  PlanInput in = SeedCase();
  in.layers = 32;
  in.hidden = 4096;  // a known shape: the attention term counts, for the run too
  in.gpu = "h100-sxm";
  in.tokens = 2e12;
  CalibrationRun run = SyntheticRun(25, 8000);  // steady steps 11..25: 8000 + i % 3
  run.steps[14].ckpt_stall_s = 3;               // step 15 wrote a checkpoint: skipped
  run.model = LoadModel("llama-7b.cfg");
  run.seq_len = 2048;
  in.calibrate = run;
  auto r = MakePlan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Steps 11..25 without 15: i % 3 over {11..14, 16..25} -> 4x 0, 5x 1, 5x 2: median 8001.
  EXPECT_EQ(r->time.calibration_steps, 14);
  EXPECT_DOUBLE_EQ(r->time.calibration_tokens_per_s, 8001);
  const double run_flops = 6.0 * 6738415616 + 12.0 * 32 * 4096 * 2048;
  const double mfu = run_flops * 8001 / (8 * 989e12);
  EXPECT_NEAR(r->time.mfu, mfu, 1e-12);
  EXPECT_NEAR(r->time.tokens_per_s, 64 * 989e12 * mfu / r->time.flops_per_token, 1e-6);
  EXPECT_NE(r->time.mfu_source.find("median 8001 tokens/s over 14 steps on 8 GPUs"),
            std::string::npos)
      << r->time.mfu_source;

  // A restart starts a new warm-up: its first 10 steps are skipped too.
  run = SyntheticRun(25, 8000);
  for (int i = 15; i < 25; ++i) run.steps[i].restart_count = 1;
  in.calibrate = run;
  auto few = MakePlan(in);
  ASSERT_FALSE(few.ok());
  // Steps 11..15 count; 16..25 are the restarted run's warm-up.
  EXPECT_NE(few.status().message().find("5 usable steps"), std::string::npos)
      << few.status().message();
  EXPECT_NE(few.status().message().find("needs at least 10"), std::string::npos);
  EXPECT_NE(few.status().message().find("5 more steps"), std::string::npos);

  in.calibrate = SyntheticRun(12, 8000);  // 2 usable steps
  few = MakePlan(in);
  ASSERT_FALSE(few.ok());
  EXPECT_TRUE(few.status().IsInvalidArgument());
  EXPECT_NE(few.status().message().find("needs at least 10"), std::string::npos);
  in.calibrate_skip = 0;  // every step counts
  EXPECT_TRUE(MakePlan(in).ok());

  in.calibrate_skip = 10;
  run = SyntheticRun(30, 8000);
  run.gpus = 0;  // unknown: no checkpoint, no flag
  in.calibrate = run;
  auto unknown = MakePlan(in);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("--calibrate-gpus"), std::string::npos);

  run = SyntheticRun(30, 1e9);  // more than the peak
  in.calibrate = run;
  auto above = MakePlan(in);
  ASSERT_FALSE(above.ok());
  EXPECT_NE(above.status().message().find("above the peak"), std::string::npos);
}

TEST(PlanTimeTest, BadInputNamesTheFlag) {
  auto expect_error = [](const PlanInput& in, const std::string& text) {
    auto r = MakePlan(in);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();
  };
  PlanInput in = SeedTime();
  in.text_bytes.reset();
  expect_error(in, "--deadline-days needs a token count");
  in = SeedTime();
  in.gpu.clear();
  expect_error(in, "--deadline-days needs a throughput");
  in = SeedTime();
  in.mfu = 0;
  expect_error(in, "--mfu must be a fraction in (0, 1]");
  in.mfu = -0.4;
  expect_error(in, "--mfu must be a fraction in (0, 1]");
  in.mfu = 45;
  expect_error(in, "give --mfu 0.45");
  in = SeedTime();
  in.mfu = 1.0;  // the bound itself is allowed
  EXPECT_TRUE(MakePlan(in).ok());
  in = SeedTime();
  in.text_bytes.reset();
  in.tokens = 2e12;
  in.data = DataFacts{"packed", 10, 16, 2, 0, 0};
  expect_error(in, "--tokens and --data");
  in.data.reset();
  in.text_bytes = 8e12;
  expect_error(in, "--tokens and --text-bytes");
  in = SeedTime();
  in.gpu = "h100";
  expect_error(in, "known:");
  in = SeedTime();
  in.peak_tflops = 989;
  expect_error(in, "give one of --gpu and --peak-tflops");
  in = SeedTime();
  in.deadline_days = 0;
  expect_error(in, "--deadline-days");
  in = SeedTime();
  in.tokens = 2e12;
  in.text_bytes.reset();
  in.tokens = -1;
  expect_error(in, "--tokens");
  in = SeedTime();
  in.calibrate = SyntheticRun(30, 8000);
  expect_error(in, "--mfu and --calibrate");
  in.mfu.reset();
  in.gpu.clear();
  in.deadline_days.reset();
  expect_error(in, "--calibrate needs the peak");
  in = SeedCase();
  in.lora_rank = 0;
  expect_error(in, "--lora-rank must be a positive integer");
  in.lora_rank = -4;
  expect_error(in, "--lora-rank");
  in = SeedCase();
  in.lora_targets = {"q", "attn"};
  expect_error(in, "unknown projection 'attn'; known: q,k,v,o,gate,up,down");
  in.lora_targets = {};
  expect_error(in, "--lora-targets is empty");
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
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = cli::RunPlan(static_cast<int>(argv.size()), argv.data());
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
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
  const std::string path = ::testing::TempDir() + "/plan_test_bad.cfg";
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

// The exact seed commands of docs/plan.md.
TEST(PlanCliTest, SeedTimeToTrain) {
  auto r = RunCli({"--params", "7e9", "--nodes", "8", "--gpus-per-node", "8", "--gpu", "h100-sxm",
                   "--mfu", "0.45", "--text-bytes", "8e12", "--deadline-days", "5", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["recommended"], "hybrid_shard");          // existing keys unchanged
  EXPECT_EQ(j["gpu_mem_bytes"], int64_t{80000000000});  // from --gpu h100-sxm
  const auto& t = j["time"];
  EXPECT_EQ(t["tokens"].get<double>(), 2e12);
  EXPECT_NEAR(t["epoch_days"].get<double>(), 34.13, 0.01 * 34.13);
  EXPECT_EQ(t["deadline"]["verdict"], "impossible");
  EXPECT_EQ(t["deadline"]["gpus_needed"].get<double>(), 437);

  r = RunCli({"--params", "7e9", "--nodes", "8", "--gpus-per-node", "8", "--gpu", "a100-80gb",
              "--mfu", "0.45", "--text-bytes", "8e12", "--deadline-days", "5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("one epoch: 108.2 days"), std::string::npos) << r.out;
}

TEST(PlanCliTest, SeedAdapters) {
  auto r = RunCli({"--params", "7e9", "--nodes", "1", "--gpus-per-node", "1", "--gpu-mem-gb", "24",
                   "--act-ckpt"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recommended: none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("LoRA rank 16 on q,k,v,o,gate,up,down"), std::string::npos) << r.out;

  r = RunCli({"--params", "7e9", "--nodes", "1", "--gpus-per-node", "1", "--gpu-mem-gb", "24",
              "--lora-rank", "8", "--lora-targets", "q,v", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["adapters"][0]["lora_targets"], (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(j["adapters"][0]["adapter_parameters"], 32 * 8 * 2 * (4096 + 4096));
}

TEST(PlanCliTest, DataDirectory) {
  const std::string dir = ::testing::TempDir() + "/plan_test_data";
  std::filesystem::remove_all(dir);
  data::SyntheticSpec spec;
  spec.num_rows = 100;
  spec.seq_len = 15;
  ASSERT_TRUE(data::WriteSyntheticDataset(dir, spec, Env::Default()).ok());
  auto r = RunCli({"--params", "7e9", "--nodes", "8", "--data", dir, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["time"]["tokens"].get<double>(), 100.0 * 15);
  EXPECT_DOUBLE_EQ(j["time"]["disk_bytes_per_token"].get<double>(), 16.0 * 2 / 15);

  r = RunCli({"--params", "7e9", "--data", dir, "--tokens", "1e9"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tokens and --data"), std::string::npos) << r.err;
  r = RunCli({"--params", "7e9", "--data", dir + "/missing"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--data"), std::string::npos) << r.err;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

TEST(PlanCliTest, CalibrateFromARunDirectory) {
  const std::string run = ::testing::TempDir() + "/plan_test_run";
  std::filesystem::remove_all(run);
  std::filesystem::create_directories(run);
  std::string metrics;
  for (int i = 1; i <= 30; ++i) {
    metrics += "{\"step\":" + std::to_string(i) +
               ",\"loss\":5,\"tokens_per_s\":" + std::to_string(i <= 10 ? 100 : 1000) +
               ".0,\"ckpt_stall_s\":0.000000,\"restart_count\":0,\"tokens\":1}\n";
  }
  WriteFile(run + "/metrics.jsonl", metrics + "{\"step\":31,\"lo");  // a torn last line
  WriteFile(run + "/config.resolved.cfg",
            "# resolved by ftrain test\nmodel.hidden_size = 64\nmodel.intermediate_size = 172\n"
            "model.max_seq_len = 64\nmodel.num_heads = 4\nmodel.num_kv_heads = 2\n"
            "model.num_layers = 2\nmodel.vocab_size = 512\ndata.path = /nonexistent\n"
            "run.dir = " +
                run + "\n");
  // The tiny model: 6P + 12 L h s = 6 x 156480 + 12 x 2 x 64 x 64 (s = max_seq_len: the data
  // path is gone); 1000 tokens/s on 2 GPUs of 0.01 TFLOP/s.
  const double mfu = (6.0 * 156480 + 12.0 * 2 * 64 * 64) * 1000 / (2 * 1e10);
  auto r = RunCli({"--model", ConfigPath("tiny.cfg"), "--nodes", "1", "--gpus-per-node", "2",
                   "--peak-tflops", "0.01", "--calibrate", run, "--calibrate-gpus", "2", "--tokens",
                   "1e9", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["time"]["mfu"].get<double>(), mfu, 1e-12);
  EXPECT_EQ(j["time"]["calibration_steps"], 20);
  // Same model, same GPUs: the plan predicts the run's own throughput.
  EXPECT_NEAR(j["time"]["tokens_per_s"].get<double>(), 1000, 1e-6);

  // Without --calibrate-gpus the count comes from a checkpoint; there is none.
  r = RunCli({"--params", "7e9", "--peak-tflops", "0.01", "--calibrate", run});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("give --calibrate-gpus N"), std::string::npos) << r.err;

  WriteFile(run + "/metrics.jsonl", metrics.substr(0, metrics.find("{\"step\":16")));
  r = RunCli(
      {"--params", "7e9", "--peak-tflops", "0.01", "--calibrate", run, "--calibrate-gpus", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("5 usable steps"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("needs at least 10"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = RunCli({"--params", "7e9", "--peak-tflops", "0.01", "--calibrate", run + "/nope"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no metrics.jsonl"), std::string::npos) << r.err;
  r = RunCli({"--params", "7e9", "--calibrate-gpus", "2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--calibrate RUN_DIR, which is not given"), std::string::npos) << r.err;
  r = RunCli({"--params", "7e9", "--gpu", "h100-sxm", "--mfu", "0.4", "--calibrate", run});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--mfu and --calibrate"), std::string::npos) << r.err;
}

// The run's GPU count from its newest checkpoint, its sequence length from its data index.
TEST(PlanCliTest, CalibrateReadsCheckpointAndData) {
  const std::string run = ::testing::TempDir() + "/plan_test_run_ckpt";
  std::filesystem::remove_all(run);
  std::filesystem::create_directories(run);
  std::string metrics;
  for (int i = 1; i <= 20; ++i) {
    metrics += "{\"step\":" + std::to_string(i) + ",\"tokens_per_s\":500.0}\n";
  }
  WriteFile(run + "/metrics.jsonl", metrics);
  data::SyntheticSpec spec;
  spec.num_rows = 64;
  spec.seq_len = 15;
  ASSERT_TRUE(data::WriteSyntheticDataset(run + "/data", spec, Env::Default()).ok());
  WriteFile(run + "/config.resolved.cfg",
            "model.hidden_size = 64\nmodel.intermediate_size = 172\nmodel.max_seq_len = 64\n"
            "model.num_heads = 4\nmodel.num_kv_heads = 2\nmodel.num_layers = 2\n"
            "model.vocab_size = 512\ndata.path = " +
                run + "/data\n");
  ckpt::CheckpointStore store(run + "/checkpoints", Env::Default());
  ASSERT_TRUE(ftrain::testing::SaveFixture(&store, 5, 4).ok());

  auto facts = ReadCalibrationRun(run, std::nullopt, Env::Default());
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  EXPECT_EQ(facts->gpus, 4);
  EXPECT_NE(facts->gpus_source.find("step-00000005"), std::string::npos) << facts->gpus_source;
  EXPECT_EQ(facts->seq_len, 15);
  EXPECT_EQ(facts->steps.size(), 20u);

  auto r = RunCli(
      {"--model", ConfigPath("tiny.cfg"), "--peak-tflops", "0.01", "--calibrate", run, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const double mfu = (6.0 * 156480 + 12.0 * 2 * 64 * 15) * 500 / (4 * 1e10);
  EXPECT_NEAR(j["time"]["mfu"].get<double>(), mfu, 1e-12);
  EXPECT_EQ(j["time"]["calibration_steps"], 10);
}

TEST(PlanCliTest, TimeAndAdapterUsageErrorsExitTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--gpu", "h100"}, "known: a100-40gb"},
      {{"--deadline-days", "5", "--gpu", "h100-sxm"}, "needs a token count"},
      {{"--deadline-days", "5", "--tokens", "2e12"}, "needs a throughput"},
      {{"--mfu", "0"}, "--mfu must be a fraction"},
      {{"--mfu", "1.5"}, "--mfu must be a fraction"},
      {{"--mfu", "-0.3"}, "--mfu must be a fraction"},
      {{"--mfu", "forty"}, "--mfu 'forty' is not a number"},
      {{"--tokens", "2e12", "--text-bytes", "8e12"}, "--tokens and --text-bytes"},
      {{"--lora-rank", "0"}, "--lora-rank must be a positive integer"},
      {{"--lora-targets", "q,attn"}, "unknown projection 'attn'"},
      {{"--lora-targets", ","}, "--lora-targets is empty"},
      {{"--text-bytes", "0"}, "--text-bytes must be a positive number"},
      {{"--gpu", "rtx4090", "--gpu-mem-gb", "80"}, "is more than a rtx4090 has (24 GB)"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"--params", "7e9"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = RunCli(args);
    EXPECT_EQ(r.code, 2) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(PlanCliTest, NothingFitsStillExitsZero) {
  auto r = RunCli({"--params", "65e9", "--nodes", "1", "--gpus-per-node", "1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recommended: none"), std::string::npos) << r.out;
}

// --- The memory check before step 1 (plan/memory_fit.h) ---------------------------------------

// The trainer's plan input for 7B at seq 4096 on 80 GB GPUs, checkpointing every layer.
PlanInput SevenB(int64_t nodes, int64_t per_node) {
  PlanInput in;
  in.model = LoadModel("llama-7b.cfg");
  in.nodes = nodes;
  in.gpus_per_node = per_node;
  in.gpu_mem_gb = 80;
  in.seq_len = 4096;
  in.micro_batch = 1;
  in.act_ckpt = true;
  return in;
}

TEST(MemoryFit, EachShardingHasItsRowInThePlan) {
  auto p = MakePlan(SevenB(1, 8));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::vector<std::pair<Sharding, std::string>> want = {
      {Sharding::kFullShard, "full_shard"},
      {Sharding::kShardGradOp, "zero2"},
      {Sharding::kNoShard, "ddp"},
      {Sharding::kHybridShard, "hybrid_shard"}};
  for (const auto& [sharding, row] : want) {
    EXPECT_EQ(PlanRowName(sharding), row) << ShardingName(sharding);
    bool found = false;
    for (const auto& s : p->strategies) found = found || s.name == row;
    EXPECT_TRUE(found) << row << " is not a row of the plan";
  }
}

TEST(MemoryFit, TheSeedCaseFits) {
  EXPECT_TRUE(CheckMemoryFit(SevenB(8, 8), Sharding::kHybridShard, "cuda:0").ok());
  EXPECT_TRUE(CheckMemoryFit(SevenB(8, 8), Sharding::kFullShard, "cuda:0").ok());
  PlanInput unknown = SevenB(1, 1);
  unknown.gpu_mem_gb = 0;  // the device's memory could not be read: nothing is refused
  EXPECT_TRUE(CheckMemoryFit(unknown, Sharding::kNoShard, "cuda:0").ok());
}

TEST(MemoryFit, ReplicatedStateIsRefusedNamingTheFiguresAndWhatFits) {
  // 7B unsharded: 16 bytes x 6.7e9 = 108 GB of state on every 80 GB GPU.
  Status s = CheckMemoryFit(SevenB(1, 8), Sharding::kNoShard, "cuda:0");
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  for (const char* want : {"dist.sharding = no_shard needs", "state 10", "cuda:0 has 72.0 GB",
                           "dist.sharding = full_shard", "ftrain plan --model CONFIG --nodes 1",
                           "FTRAIN_SKIP_MEMORY_CHECK=1"}) {
    EXPECT_NE(s.message().find(want), std::string::npos) << want << "\n" << s.message();
  }
}

TEST(MemoryFit, EachSuggestionIsCheckedByThePlanner) {
  // Activations without checkpointing at seq 4096 x micro-batch 8 do not fit; checkpointing or
  // a smaller micro-batch does.
  PlanInput in = SevenB(8, 8);
  in.act_ckpt = false;
  in.micro_batch = 8;
  Status s = CheckMemoryFit(in, Sharding::kFullShard, "cuda:0");
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("train.activation_checkpointing = true"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("train.micro_batch = "), std::string::npos) << s.message();
  // One 80 GB GPU cannot hold 7B's sharded state; 4 or more can.
  s = CheckMemoryFit(SevenB(1, 1), Sharding::kFullShard, "cuda:0");
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("full_shard on 2 nodes"), std::string::npos) << s.message();
  // Nothing data-parallel fits a 1 GB device at seq 4096: said so.
  in = SevenB(1, 8);
  in.gpu_mem_gb = 1;
  s = CheckMemoryFit(in, Sharding::kFullShard, "cuda:0");
  ASSERT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("nothing fits, not even full_shard"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace ftrain
