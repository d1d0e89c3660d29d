// The controller's documents and scripts against its code: docs/operations.md's table of what
// the job script handles is the transition table's print (`ftrain job --table`), the bash left
// in slurm/ (local-cluster.sh and pack.sh aside) holds no decision logic, and the defaults
// slurm/train.sh documents are the controller's own. Reads files; milliseconds.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "orch/dry_run.h"
#include "orch/settings.h"
#include "records/exit_codes.h"
#include "test_util.h"

namespace ftrain::orch {
namespace {

using ftrain::testing::ReadFile;
using ftrain::testing::TempDir;

const std::string kRoot = FTRAIN_SOURCE_DIR;

TEST(Docs, OperationsListsTheTransitionTableAsItIs) {
  const std::string ops = ReadFile(kRoot + "/docs/operations.md");
  ASSERT_FALSE(ops.empty());
  EXPECT_NE(ops.find(HandledTable()), std::string::npos)
      << "docs/operations.md's table is not `ftrain job --table`; paste it:\n"
      << HandledTable();
}

TEST(Docs, DesignHoldsTheControllersMachineAsItIs) {
  const std::string design = ReadFile(kRoot + "/docs/design.md");
  ASSERT_FALSE(design.empty());
  EXPECT_NE(design.find(MachineTable()), std::string::npos)
      << "docs/design.md's machine is not `ftrain job --machine`; paste it:\n"
      << MachineTable();
}

// docs/operations.md's exit-code table names every code of the trainer that the controller
// acts on (records/exit_codes.h), in its `ftrain train` row.
TEST(Docs, OperationsListsEveryTrainerExitCode) {
  const std::string ops = ReadFile(kRoot + "/docs/operations.md");
  const size_t table = ops.find("## Exit codes");
  ASSERT_NE(table, std::string::npos);
  const size_t row = ops.find("| `ftrain train` |", table);
  ASSERT_NE(row, std::string::npos);
  const std::string line = ops.substr(row, ops.find('\n', row) - row);
  for (const auto& c : kTrainerExitCodes) {
    EXPECT_NE(line.find(std::to_string(c.code) + ":"), std::string::npos)
        << "docs/operations.md's `ftrain train` exit-code row does not list " << c.code << " ("
        << c.meaning << ")";
  }
}

// No `if`, `case`, loop or `&&`/`||` in the bash that drives a job: every decision is in
// src/orch, where a unit test can reach it.
TEST(Scripts, TheJobScriptsHoldNoDecisions) {
  for (const std::string script : {"slurm/train.sh", "slurm/agent.sh"}) {
    const std::string text = ReadFile(kRoot + "/" + script);
    ASSERT_FALSE(text.empty()) << script;
    std::istringstream in(text);
    int no = 0;
    for (std::string line; std::getline(in, line);) {
      ++no;
      const std::string code = line.substr(0, line.find('#'));
      const std::regex decision(
          "(^|[^A-Za-z0-9_])(if|then|elif|else|fi|case|esac|while|until|for|select)($|[^A-Za-z0-9_]"
          ")"
          "|&&|\\|\\||\\[\\[|\\btest\\b");
      EXPECT_FALSE(std::regex_search(code, decision)) << script << ":" << no << ": " << line;
    }
  }
  // detect.sh and resubmit.sh are gone (their knowledge lives in src/orch/*.h).
  EXPECT_TRUE(ReadFile(kRoot + "/slurm/detect.sh").empty());
  EXPECT_TRUE(ReadFile(kRoot + "/slurm/resubmit.sh").empty());
}

// Hole 3: nothing crosses hosts through a socket file. The job scripts never ask `ckptctl status`
// (a Unix socket is local to one kernel: on a real cluster the batch host cannot reach the other
// nodes' daemons), and in src/orch only the agent, on its own node, connects to its daemon.
TEST(Scripts, NoSocketFileIsReachedAcrossHosts) {
  for (const std::string script : {"slurm/train.sh", "slurm/agent.sh"}) {
    EXPECT_EQ(ReadFile(kRoot + "/" + script).find("ckptctl"), std::string::npos) << script;
  }
  for (const std::string f : {"job_runner.cc", "job_runner_nodes.cc", "agent_watch.cc", "probe.cc",
                              "slurm.cc", "lease.cc", "detect.cc"}) {
    const std::string text = ReadFile(kRoot + "/src/orch/" + f);
    ASSERT_FALSE(text.empty()) << f;
    EXPECT_EQ(text.find("SocketPath("), std::string::npos) << f << " reaches a daemon's socket";
  }
  const std::string agent = ReadFile(kRoot + "/src/orch/agent_runner.cc");
  EXPECT_NE(agent.find("ckpt::proto::SocketPath(s_.run_dir, s_.node)"), std::string::npos);
}

// train.sh's `export FTRAIN_X="${FTRAIN_X:-default}"` lines are what the controller assumes.
TEST(Scripts, TrainShDefaultsAreTheControllersDefaults) {
  const std::string text = ReadFile(kRoot + "/slurm/train.sh");
  std::map<std::string, std::string> defaults;
  const std::regex line("export (FTRAIN_[A-Z0-9_]+)=\"\\$\\{FTRAIN_[A-Z0-9_]+:-([^}\"$]*)\\}\"");
  for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
    defaults[(*it)[1]] = (*it)[2];
  }
  EXPECT_GE(defaults.size(), 25u);
  // The controller with train.sh's defaults set equals the controller with nothing set.
  std::map<std::string, std::string> env = {
      {"FTRAIN_CONFIG", "c"}, {"FTRAIN_RUN_DIR", "r"}, {"FTRAIN_DATA", "d"}};
  auto bare = LoadJobSettings(MapEnv(env));
  for (const auto& [k, v] : defaults) env[k] = v;
  auto set = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(bare.ok() && set.ok()) << set.status().message();
  EXPECT_EQ(bare->preflight, set->preflight);
  EXPECT_EQ(bare->preflight_timeout_s, set->preflight_timeout_s);
  EXPECT_EQ(bare->max_injob_restarts, set->max_injob_restarts);
  EXPECT_EQ(bare->max_failed_starts, set->max_failed_starts);
  EXPECT_EQ(bare->max_rollback_restarts, set->max_rollback_restarts);
  EXPECT_EQ(bare->max_node_requeues, set->max_node_requeues);
  EXPECT_EQ(bare->storage_outage_s, set->storage_outage_s);
  EXPECT_EQ(bare->restart_backoff_s, set->restart_backoff_s);
  EXPECT_EQ(bare->health_timeout_s, set->health_timeout_s);
  EXPECT_EQ(bare->health_wait_s, set->health_wait_s);
  EXPECT_EQ(bare->stop_timeout_s, set->stop_timeout_s);
  EXPECT_EQ(bare->usr1_lead_s, set->usr1_lead_s);
  EXPECT_EQ(bare->term_ask_s, set->term_ask_s);
  EXPECT_EQ(bare->requeue_retry_s, set->requeue_retry_s);
  EXPECT_EQ(bare->lease_retry_s, set->lease_retry_s);
  EXPECT_EQ(bare->ckptd, set->ckptd);
  EXPECT_EQ(bare->ckptd_start_timeout_s, set->ckptd_start_timeout_s);
  EXPECT_EQ(bare->spare_nodes, set->spare_nodes);
  EXPECT_EQ(bare->spare_check_s, set->spare_check_s);
  EXPECT_EQ(bare->replication, set->replication);
  EXPECT_EQ(bare->norespond_wait_s, set->norespond_wait_s);
  EXPECT_EQ(bare->max_resubmits, set->max_resubmits);
  EXPECT_EQ(bare->hang_repeat_window_s, set->hang_repeat_window_s);
  EXPECT_EQ(bare->faulty_keep_s, set->faulty_keep_s);
  EXPECT_EQ(bare->hang_quarantine_keep_s, set->hang_quarantine_keep_s);
  EXPECT_EQ(bare->detect.on, set->detect.on);
  EXPECT_EQ(bare->detect.heartbeat_timeout_s, set->detect.heartbeat_timeout_s);
  EXPECT_EQ(bare->detect.probe_timeout_s, set->detect.probe_timeout_s);
  EXPECT_EQ(bare->detect.hung_after_s, set->detect.hung_after_s);
  EXPECT_EQ(bare->detect.blip_s, set->detect.blip_s);
  EXPECT_EQ(bare->detect.heartbeat_period_s, set->detect.heartbeat_period_s);
  EXPECT_EQ(bare->detect.detect_period_s, set->detect.detect_period_s);
  // The USR1 lead the controller assumes when Slurm does not say is the #SBATCH line's; train.sh
  // leaves FTRAIN_USR1_LEAD_S unset (set, it overrides the job's EndTime and GraceTime).
  EXPECT_EQ(defaults.count("FTRAIN_USR1_LEAD_S"), 0u);
  EXPECT_FALSE(bare->usr1_lead_set);
  EXPECT_NE(text.find("#SBATCH --signal=B:USR1@" +
                      std::to_string(static_cast<int>(bare->usr1_lead_s)) + "\n"),
            std::string::npos);
}

TEST(Settings, ABadValueNamesTheVariable) {
  std::map<std::string, std::string> env = {{"FTRAIN_CONFIG", "c"},
                                            {"FTRAIN_RUN_DIR", "r"},
                                            {"FTRAIN_DATA", "d"},
                                            {"FTRAIN_STOP_TIMEOUT_S", "ninety"}};
  auto s = LoadJobSettings(MapEnv(env));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("FTRAIN_STOP_TIMEOUT_S='ninety'"), std::string::npos);
  auto missing = LoadJobSettings(MapEnv({}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("set FTRAIN_CONFIG"), std::string::npos);
}

// ckptd's replication cap reaches the agent as FTRAIN_REPLICATION_MBPS (passed on as
// --replication-mbps): 0 by default (unlimited), a bad value refused by name at the agent.
TEST(Settings, TheReplicationCapIsANumberOfMegabytesPerSecond) {
  std::map<std::string, std::string> env = {{"FTRAIN_RUN_DIR", "r"}};
  auto bare = LoadAgentSettings(MapEnv(env));
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  EXPECT_EQ(bare->replication_mbps, "0");  // unset or empty
  env["FTRAIN_REPLICATION_MBPS"] = "250";
  auto set = LoadAgentSettings(MapEnv(env));
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->replication_mbps, "250");
  for (const char* bad : {"fast", "-1", "5x", "nan"}) {
    env["FTRAIN_REPLICATION_MBPS"] = bad;
    auto s = LoadAgentSettings(MapEnv(env));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("FTRAIN_REPLICATION_MBPS"), std::string::npos) << bad;
  }
}

// A config the trainer accepts (the controller reads it as the trainer does:
// orch::TrainerConfig), with `extra` appended.
void WriteTrainerConfig(const std::string& path, const std::string& extra) {
  std::ofstream(path) << "[model]\nvocab_size = 512\nhidden_size = 64\nintermediate_size = 172\n"
                         "num_layers = 2\nnum_heads = 4\nnum_kv_heads = 2\nmax_seq_len = 64\n"
                         "[train]\nsteps = 9\n"
                      << extra;
}

// The health probe asks each node for the GPUs of its ranks only when the job trains on GPUs.
TEST(Settings, TheHealthProbeWantsTheRanksGpusOnlyForACudaRun) {
  TempDir tmp;
  const std::string cfg = tmp.path() + "/run.cfg";
  WriteTrainerConfig(cfg, "device = cpu\n");
  std::map<std::string, std::string> env = {{"FTRAIN_CONFIG", cfg},
                                            {"FTRAIN_RUN_DIR", "r"},
                                            {"FTRAIN_DATA", "d"},
                                            {"FTRAIN_RANKS_PER_NODE", "4"}};
  auto cpu = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->health_gpus, 0);
  env["FTRAIN_ARGS"] = "--train.device=cuda --dist.backend=nccl";
  auto cuda = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  EXPECT_EQ(cuda->health_gpus, 4);
}

// FTRAIN_ELASTIC=auto is on exactly when the config (with FTRAIN_ARGS) reduces exactly.
TEST(Settings, ExactReductionTurnsAutoElasticOnAndBadValuesAreNamed) {
  TempDir tmp;
  const std::string cfg = tmp.path() + "/run.cfg";
  WriteTrainerConfig(cfg, "[dist]\nsharding = full_shard\n");
  std::map<std::string, std::string> env = {
      {"FTRAIN_CONFIG", cfg}, {"FTRAIN_RUN_DIR", "r"}, {"FTRAIN_DATA", "d"}};
  auto off = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->elastic);
  env["FTRAIN_ARGS"] = "--dist.reduce=exact --train.global_batch=8";
  auto on = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->elastic);
  EXPECT_EQ(on->elastic_min_nodes, 1);
  env["FTRAIN_ELASTIC"] = "0";  // the user's word wins
  EXPECT_FALSE(LoadJobSettings(MapEnv(env))->elastic);
  env.erase("FTRAIN_ARGS");
  env["FTRAIN_ELASTIC"] = "1";
  EXPECT_TRUE(LoadJobSettings(MapEnv(env))->elastic);
  env["FTRAIN_ELASTIC"] = "yes";
  auto bad = LoadJobSettings(MapEnv(env));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("FTRAIN_ELASTIC='yes'"), std::string::npos);
  env["FTRAIN_ELASTIC"] = "1";
  env["FTRAIN_ELASTIC_MIN_NODES"] = "0";
  auto zero = LoadJobSettings(MapEnv(env));
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("FTRAIN_ELASTIC_MIN_NODES"), std::string::npos);
}

TEST(Settings, TheMemoryTierTurnsAutoReplicationOn) {
  TempDir tmp;
  const std::string cfg = tmp.path() + "/run.cfg";
  WriteTrainerConfig(cfg, "[ckpt]\nevery_minutes = 25\n");
  std::map<std::string, std::string> env = {
      {"FTRAIN_CONFIG", cfg}, {"FTRAIN_RUN_DIR", "r"}, {"FTRAIN_DATA", "d"}};
  auto off = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->replication, "auto");  // no spares, no memory tier: the policy decides (off)
  env["FTRAIN_ARGS"] = "--ckpt.memory_every_steps=5";
  auto on = LoadJobSettings(MapEnv(env));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->replication, "1");
  WriteTrainerConfig(cfg, "[ckpt]\nmemory_every_steps = 3\n");
  env.erase("FTRAIN_ARGS");
  EXPECT_EQ(LoadJobSettings(MapEnv(env))->replication, "1");
  env["FTRAIN_REPLICATION"] = "0";  // the user's word wins
  EXPECT_EQ(LoadJobSettings(MapEnv(env))->replication, "0");
  env["FTRAIN_REPLICATION"] = "auto";
  env["FTRAIN_ARGS"] = "--ckpt.memory_every_steps=0";
  EXPECT_EQ(LoadJobSettings(MapEnv(env))->replication, "auto");
  env["FTRAIN_ARGS"] = "--ckpt.memory_every_steps=0 --ckpt.memory_every_seconds=30";
  EXPECT_EQ(LoadJobSettings(MapEnv(env))->replication, "1");  // the time interval too
}

}  // namespace
}  // namespace ftrain::orch
