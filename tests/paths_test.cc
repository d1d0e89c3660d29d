// The run directory's layout (core/run_layout.h) and `ftrain paths`, the real binary the Slurm
// scripts ask for it: the checkpoint root resolved from the run's resolved config, from the
// trainer's own arguments (config file and overrides), and what bad input gets.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/run_layout.h"
#include "test_util.h"

namespace ftrain {
namespace {

using ::ftrain::testing::Contains;
using ::ftrain::testing::Ftrain;
using ::ftrain::testing::RunCommand;
using ::ftrain::testing::TempDir;

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

testing::CommandResult Paths(const std::string& args) {
  return RunCommand(Ftrain() + " paths " + args + " 2>&1", 60);
}

TEST(RunLayout, NamesEveryFileUnderTheRunDirectory) {
  const RunLayout l("/runs/a");
  EXPECT_EQ(l.metrics(), "/runs/a/metrics.jsonl");
  EXPECT_EQ(l.restarts(), "/runs/a/restarts.jsonl");
  EXPECT_EQ(l.resolved_config(), "/runs/a/config.resolved.cfg");
  EXPECT_EQ(l.config_error(), "/runs/a/.config_error");
  EXPECT_EQ(l.last_stop(), "/runs/a/.last_stop");
  EXPECT_EQ(l.failed_starts(), "/runs/a/.failed_starts");
  EXPECT_EQ(l.daemon_dir("n1"), "/runs/a/ckptd-n1");
  EXPECT_EQ(l.daemon_log("n1"), "/runs/a/logs/ckptd-n1.log");
  EXPECT_EQ(l.default_checkpoint_root(), "/runs/a/checkpoints");
  EXPECT_EQ(RunLayout::NodeOfDaemonDir("ckptd-n1"), "n1");
  EXPECT_EQ(RunLayout::NodeOfDaemonDir("ckptd-"), "");
  EXPECT_EQ(RunLayout::NodeOfDaemonDir("logs"), "");
}

TEST(RunLayout, CheckpointRootComesFromTheResolvedConfig) {
  TempDir run("paths-test");
  const RunLayout l(run.path());
  auto root = l.CheckpointRoot();  // no resolved config yet: the default
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, run / "checkpoints");
  WriteFile(l.resolved_config(), "# resolved\n[ckpt]\nroot = /scratch/ckpts\nkeep = 3\n");
  root = l.CheckpointRoot();
  ASSERT_TRUE(root.ok()) << root.status().message();
  EXPECT_EQ(*root, "/scratch/ckpts");
  WriteFile(l.resolved_config(), "[ckpt]\nkeep = 3\n");  // no ckpt.root: the default
  root = l.CheckpointRoot();
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(*root, run / "checkpoints");
  WriteFile(l.resolved_config(), "this is not a config line\n");
  root = l.CheckpointRoot();
  ASSERT_FALSE(root.ok());
  EXPECT_TRUE(Contains(root.status().message(), "config.resolved.cfg")) << root.status().message();
}

TEST(FtrainPaths, PrintsTheLayoutAsTextJsonAndSinglePaths) {
  TempDir run("paths-test");
  auto r = Paths(run.path() + " --node n1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["checkpoints"], run / "checkpoints");
  EXPECT_EQ(j["checkpoints_from"], "default");
  EXPECT_EQ(j["metrics"], run / "metrics.jsonl");
  EXPECT_EQ(j["nodes"]["n1"]["ckptd_socket"], run / "ckptd-n1/sock");
  EXPECT_EQ(j["nodes"]["n1"]["ckptd_log"], run / "logs/ckptd-n1.log");
  EXPECT_EQ(j["nodes"]["n1"]["ckptd_buddy_addr"], run / "ckptd-n1/buddy-addr");
  EXPECT_EQ(j["job_nodes"], run / ".job-nodes");
  EXPECT_EQ(j["heartbeats"], run / ".heartbeats");
  EXPECT_EQ(j["submit"], run / ".submit");
  EXPECT_EQ(j["commcheck"], run / "commcheck.json");
  r = Paths(run.path() + " --get restarts");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, run / "restarts.jsonl\n");
  r = Paths(run.path() + " --node n2 --get ckptd_log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, run / "logs/ckptd-n2.log\n");
  r = Paths(run.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "checkpoints\t" + run / "checkpoints\t(default)")) << r.output;
}

TEST(FtrainPaths, ResolvesCkptRootLikeTheTrainer) {
  TempDir run("paths-test");
  const std::string cfg = run / "train.cfg";
  WriteFile(cfg, "[ckpt]\nroot = /from/the/config\n");
  // The config's key, then an override over it, then the run's resolved config without one.
  auto r = Paths(run.path() + " --config " + cfg + " --get checkpoints");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "/from/the/config\n");
  r = Paths(run.path() + " --config " + cfg + " --ckpt.root=/from/the/flag --train.steps=5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["checkpoints"], "/from/the/flag");
  EXPECT_EQ(j["checkpoints_from"], "config");
  WriteFile(RunLayout(run.path()).resolved_config(), "ckpt.root = /what/the/run/used\n");
  r = Paths(run.path() + " --get checkpoints");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "/what/the/run/used\n");
}

TEST(FtrainPaths, BadInputIsAUsageErrorThatSaysWhat) {
  TempDir run("paths-test");
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"", "give the run directory"},
      {run.path() + " --get nonsense", "unknown path 'nonsense'"},
      {run.path() + " --get ckptd_log", "needs exactly one --node"},
      {run.path() + " --json --get metrics", "exclude each other"},
      {run.path() + " --node ../etc", "not a node id"},
      {run.path() + " --config " + run / "missing.cfg", "missing.cfg"},
      {run.path() + " --config /dev/null --run.dir=/other/run", "is not the RUN_DIR argument"},
      {run.path() + " --bogus", "bogus"},
  };
  for (const auto& c : cases) {
    const auto r = Paths(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.output;
    EXPECT_TRUE(Contains(r.output, c.says)) << c.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace ftrain
