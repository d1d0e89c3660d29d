// Unit tests: rank discovery from each environment source, hostlists, node numbering, shard
// arithmetic, config parsing and overrides. No processes, no network.
#include "comm/world.h"

#include <gtest/gtest.h>

#include "comm/collectives.h"
#include "core/config.h"

namespace ftrain::comm {
namespace {

TEST(DiscoverFromEnv, NothingSetIsSingleProcess) {
  auto w = DiscoverFromEnv({});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->source, WorldSource::kSingle);
  EXPECT_EQ(w->world_size, 1);
  EXPECT_EQ(w->rank, 0);
}

TEST(DiscoverFromEnv, TorchrunStyle) {
  auto w = DiscoverFromEnv({{"RANK", "5"},
                            {"WORLD_SIZE", "8"},
                            {"LOCAL_RANK", "1"},
                            {"LOCAL_WORLD_SIZE", "4"},
                            {"MASTER_ADDR", "10.0.0.1"},
                            {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->source, WorldSource::kTorchrun);
  EXPECT_EQ(w->rank, 5);
  EXPECT_EQ(w->world_size, 8);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 4);
  EXPECT_EQ(w->node_rank, 1);
  EXPECT_EQ(w->num_nodes, 2);
  EXPECT_EQ(w->master_addr, "10.0.0.1");
  EXPECT_EQ(w->master_port, 29500);
}

TEST(DiscoverFromEnv, TorchrunMissingMasterAddrNamesVariable) {
  auto w = DiscoverFromEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}});
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(w.status().IsInvalidArgument());
  EXPECT_NE(w.status().message().find("MASTER_ADDR"), std::string::npos);
}

TEST(DiscoverFromEnv, RankNotBelowWorldSizeIsRejected) {
  auto w = DiscoverFromEnv(
      {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("rank is not below"), std::string::npos);
}

TEST(DiscoverFromEnv, GarbageNumberNamesVariable) {
  auto w = DiscoverFromEnv({{"RANK", "x1"}, {"WORLD_SIZE", "4"}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("RANK='x1'"), std::string::npos);
}

TEST(DiscoverFromEnv, SlurmStep) {
  auto w = DiscoverFromEnv({{"SLURM_STEP_ID", "0"},
                            {"SLURM_PROCID", "3"},
                            {"SLURM_STEP_NUM_TASKS", "4"},
                            {"SLURM_LOCALID", "1"},
                            {"SLURM_NODEID", "1"},
                            {"SLURM_STEP_NUM_NODES", "2"},
                            {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                            {"SLURM_STEP_NODELIST", "node[1-2]"},
                            {"SLURM_JOB_ID", "1234"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->source, WorldSource::kSlurm);
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->world_size, 4);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 2);
  EXPECT_EQ(w->node_rank, 1);
  EXPECT_EQ(w->num_nodes, 2);
  EXPECT_EQ(w->master_addr, "node1");
  EXPECT_EQ(w->master_port, 29500 + 1234);
  EXPECT_EQ(w->job_id, "1234");
}

TEST(DiscoverFromEnv, SlurmUnevenTasksPerNode) {
  auto w = DiscoverFromEnv({{"SLURM_STEP_ID", "0"},
                            {"SLURM_PROCID", "4"},
                            {"SLURM_STEP_NUM_TASKS", "5"},
                            {"SLURM_LOCALID", "0"},
                            {"SLURM_NODEID", "2"},
                            {"SLURM_STEP_NUM_NODES", "3"},
                            {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                            {"MASTER_ADDR", "a"},
                            {"MASTER_PORT", "7"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->local_world_size, 1);
  EXPECT_EQ(w->master_addr, "a");
  EXPECT_EQ(w->master_port, 7);
}

TEST(DiscoverFromEnv, BatchScriptWithoutStepIsNotMultiRank) {
  // In the sbatch script itself SLURM_PROCID=0 and SLURM_NTASKS=4 but there is no step.
  auto w = DiscoverFromEnv({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "9"}});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->source, WorldSource::kSingle);
}

TEST(DiscoverFromEnv, TorchrunVariablesWinOverSlurmStep) {
  // `ftrain launch` inside an allocation sets RANK; those ranks are not the step's.
  auto w = DiscoverFromEnv({{"SLURM_STEP_ID", "0"},
                            {"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "1"},
                            {"RANK", "1"},
                            {"WORLD_SIZE", "2"},
                            {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", "5"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->source, WorldSource::kTorchrun);
  EXPECT_EQ(w->rank, 1);
}

TEST(DiscoverFromEnv, PmixEnvIsDetected) {
  EXPECT_TRUE(HasPmixEnv({{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "slurm.pmix.1.0"}}));
  EXPECT_FALSE(HasPmixEnv({{"PMIX_RANK", "0"}}));
}

TEST(ExpandHostlist, Forms) {
  auto h = ExpandHostlist("node[1-3,07],gpu-a,x[09-10]y");
  ASSERT_TRUE(h.ok());
  std::vector<std::string> want = {"node1", "node2", "node3", "node07", "gpu-a", "x09y", "x10y"};
  EXPECT_EQ(*h, want);
  EXPECT_FALSE(ExpandHostlist("node[1-").ok());
  EXPECT_FALSE(ExpandHostlist("node[3-1]").ok());
}

TEST(NodesByLowestRank, BlockLayoutIsUnchanged) {
  // 3 nodes x 2 ranks as srun's block distribution lays them out.
  const std::vector<int> block = {0, 0, 1, 1, 2, 2};
  EXPECT_EQ(NodesByLowestRank(block), block);
  EXPECT_EQ(NodesByLowestRank({0}), std::vector<int>({0}));
  EXPECT_EQ(NodesByLowestRank({}), std::vector<int>());
}

TEST(NodesByLowestRank, SpareKeepsTheDeadNodesPlace) {
  // Nodes {n1, n2} ran ranks {0,1}, {2,3}; n1 died and spare n3 took ranks 0,1. Slurm numbers
  // the relaunched step's nodes by host name (n2 = 0, n3 = 1), so the ranks see node ids
  // {1,1,0,0}; by lowest rank n3 is node 0 again and n2 node 1, as before the failure.
  EXPECT_EQ(NodesByLowestRank({1, 1, 0, 0}), std::vector<int>({0, 0, 1, 1}));
  // The middle node of three replaced by a spare that sorts last.
  EXPECT_EQ(NodesByLowestRank({0, 0, 2, 2, 1, 1}), std::vector<int>({0, 0, 1, 1, 2, 2}));
  // Launcher ids need not be dense.
  EXPECT_EQ(NodesByLowestRank({7, 3, 7, 3}), std::vector<int>({0, 1, 0, 1}));
}

TEST(ShardOf, CoversEveryElementOnceForUnevenSizes) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t n : {0, 1, 5, 7, 1001, 4096}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        ShardSpan s = ShardOf(n, world, r);
        EXPECT_EQ(s.offset, next) << "n=" << n << " world=" << world << " rank=" << r;
        EXPECT_GE(s.length, 0);
        EXPECT_LE(s.length, ShardChunk(n, world));
        next = s.offset + s.length;
      }
      EXPECT_EQ(next, n);
    }
  }
}

}  // namespace
}  // namespace ftrain::comm

namespace ftrain {
namespace {

TEST(Config, ParsesSectionsAndReportsOrigins) {
  auto c = Config::Parse("# comment\n[model]\nhidden_size = 64\n\n[train]\nlr=0.1 # x\n", "t.cfg");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  int64_t h = 0;
  double lr = 0;
  ASSERT_TRUE(c->GetInt("model.hidden_size", &h).ok());
  ASSERT_TRUE(c->GetDouble("train.lr", &lr).ok());
  EXPECT_EQ(h, 64);
  EXPECT_DOUBLE_EQ(lr, 0.1);
  EXPECT_EQ(c->entries().at("train.lr").origin, "t.cfg:6");
}

TEST(Config, OverrideWinsAndBadValueNamesOrigin) {
  auto c = Config::Parse("[model]\nnum_layers = 2\n", "t.cfg");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->ApplyOverride("--model.num_layers=abc").ok());
  int64_t v = 0;
  Status s = c->GetInt("model.num_layers", &v);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("command line: model.num_layers = 'abc' is not an integer"),
            std::string::npos);
}

TEST(Config, ErrorsNameFileAndLine) {
  auto c = Config::Parse("[model]\nhidden_size 64\n", "bad.cfg");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.cfg:2"), std::string::npos);
  auto d = Config::Parse("key = 1\n", "d.cfg");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("outside any [section]"), std::string::npos);
  auto e = Config::Parse("[a]\nx=1\nx=2\n", "e.cfg");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("set twice"), std::string::npos);
}

TEST(Config, UnknownKeysAreReported) {
  auto c = Config::Parse("[model]\nhidden_size = 64\nhiden = 3\n", "t.cfg");
  ASSERT_TRUE(c.ok());
  int64_t h;
  ASSERT_TRUE(c->GetInt("model.hidden_size", &h).ok());
  Status s = c->CheckAllConsumed();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.hiden"), std::string::npos);
  EXPECT_NE(s.message().find("t.cfg:3"), std::string::npos);
}

TEST(Config, MalformedOverrideIsRejected) {
  Config c;
  EXPECT_FALSE(c.ApplyOverride("--nodot=1").ok());
  EXPECT_FALSE(c.ApplyOverride("--model.x").ok());
  EXPECT_TRUE(c.ApplyOverride("--model.x=1").ok());
}

}  // namespace
}  // namespace ftrain
