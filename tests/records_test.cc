// RUN/restarts.jsonl's one schema (records/restarts.h), on real files: records are properly
// escaped JSON in the former layout, every host writes its own spool, the lease holder's merge
// is the time-ordered union (written by rename: never a torn file), and a reader skips and
// reports a torn or malformed line instead of failing (hole 9). Files in a temp dir.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "records/json_lines.h"
#include "records/launch_context.h"
#include "records/node_faults.h"
#include "records/restarts.h"
#include "test_util.h"

namespace ftrain::records {
namespace {

using ftrain::testing::ReadFile;
using ftrain::testing::TempDir;

RestartRecord Rec(double time, const std::string& event, std::vector<Field> f = {}) {
  RestartRecord r;
  r.time = time;
  r.job = "42";
  r.event = event;
  r.cause = "node_failure";
  r.fields = std::move(f);
  return r;
}

TEST(Encode, TheFormerLayoutWithEveryValueEscaped) {
  RestartRecord r =
      Rec(1700000000.25, "step_failed",
          {Str("node", "n1"), Bool("batch_host", true), Int("exit", 137), Num("lost_s", 12.3456, 3),
           Raw("probe_s", "0.01"), Str("evidence", "said \"no\"\\ at\nonce\x01")});
  const std::string line = EncodeLine(r);
  EXPECT_EQ(line,
            "{\"time\":1700000000.250000,\"job\":\"42\",\"restart_count\":0,"
            "\"event\":\"step_failed\",\"cause\":\"node_failure\",\"node\":\"n1\","
            "\"batch_host\":true,\"exit\":137,\"lost_s\":12.346,\"probe_s\":0.01,"
            "\"evidence\":\"said \\\"no\\\"\\\\ at\\nonce\\u0001\"}");
  auto j = nlohmann::json::parse(line);  // the real parser agrees
  EXPECT_EQ(j["evidence"], "said \"no\"\\ at\nonce\x01");
  EXPECT_EQ(Num("x", 1.0 / 0.0, 3).json, "null");
}

class Spools : public ::testing::Test {
 protected:
  TempDir tmp_;
  RunLayout layout_{tmp_.path()};
};

TEST_F(Spools, EveryHostWritesItsOwnSpoolAndTheMergeIsTheOrderedUnion) {
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(3, "restarted"))).ok());
  ASSERT_TRUE(AppendToSpool(layout_, "n2", EncodeLine(Rec(1, "step_failed"))).ok());
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(2, "heartbeat_late"))).ok());
  EXPECT_EQ(ReadFile(layout_.restarts()), "");  // nobody merged yet
  auto m = ReadMerged(layout_);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->lines.size(), 3u);  // a reader sees the spools all the same
  EXPECT_EQ(m->lines[0].json["event"], "step_failed");
  auto added = MergeSpools(layout_);
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(*added, 3);
  EXPECT_EQ(*MergeSpools(layout_), 0);  // nothing new: nothing rewritten
  const std::string merged = ReadFile(layout_.restarts());
  EXPECT_LT(merged.find("step_failed"), merged.find("heartbeat_late"));
  EXPECT_LT(merged.find("heartbeat_late"), merged.find("restarted"));
  // The merged file and the spools together: still three records, no duplicates.
  EXPECT_EQ(ReadMerged(layout_)->lines.size(), 3u);
  SpoolMerger merger(layout_);
  EXPECT_EQ(*merger.MaybeMerge(), 0);
  ASSERT_TRUE(AppendToSpool(layout_, "n3", EncodeLine(Rec(4, "resumed"))).ok());
  EXPECT_EQ(*merger.MaybeMerge(), 1);
}

// Hole 9: a torn line (a crash mid-append) or garbage is skipped and reported, never fatal.
TEST_F(Spools, ATornOrMalformedLineIsSkippedAndReported) {
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(1, "started"))).ok());
  {
    std::ofstream out(layout_.restarts_spool("n1"), std::ios::app);
    out << "{\"time\":2,\"event\":\"step_fai\n"
        << EncodeLine(Rec(3, "restarted")) << "\n"
        << "{\"time\":4,\"eve";  // cut mid-append
  }
  auto m = ReadMerged(layout_);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->lines.size(), 2u);
  ASSERT_EQ(m->warnings.size(), 2u);
  EXPECT_NE(m->warnings[0].find("restarts-n1.jsonl:2: not a record"), std::string::npos)
      << m->warnings[0];
  EXPECT_NE(m->warnings[1].find("restarts-n1.jsonl:4: incomplete last line"), std::string::npos);
  ASSERT_TRUE(MergeSpools(layout_).ok());
  EXPECT_EQ(ReadFile(layout_.restarts()).find("step_fai"), std::string::npos);
}

// A LaunchContext as a main would read it from `vars` (NAME=VALUE).
LaunchContext Launch(std::map<std::string, std::string> vars) {
  return LaunchContext::FromLookup([vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST_F(Spools, UnderTheControllerTheTrainerWritesItsNodesSpool) {
  const LaunchContext under_job =
      Launch({{"FTRAIN_RECORDS_SPOOL", "1"}, {"SLURMD_NODENAME", "n7.cluster"}});
  ASSERT_TRUE(AppendForThisProcess(layout_, under_job, EncodeLine(Rec(1, "resumed"))).ok());
  const LaunchContext alone = Launch({{"SLURMD_NODENAME", "n7"}});
  ASSERT_TRUE(AppendForThisProcess(layout_, alone, EncodeLine(Rec(2, "fell_back"))).ok());
  EXPECT_NE(ReadFile(layout_.restarts_spool("n7")).find("resumed"), std::string::npos);
  EXPECT_NE(ReadFile(layout_.restarts()).find("fell_back"), std::string::npos);  // on its own
}

TEST_F(Spools, ALinkInPlaceOfASpoolIsNotFollowed) {
  const std::string victim = tmp_.path() + "/victim";
  std::ofstream(victim) << "keep\n";
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(1, "started"))).ok());
  ASSERT_EQ(unlink(layout_.restarts_spool("n1").c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), layout_.restarts_spool("n1").c_str()), 0);
  Status s = AppendToSpool(layout_, "n1", EncodeLine(Rec(2, "restarted")));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ReadFile(victim), "keep\n");
}

// metrics.jsonl and restarts.jsonl are appended by the same call: a link someone put in the
// shared run directory in place of either is refused, not written through (hole 8).
TEST_F(Spools, ALinkInPlaceOfARecordFileIsNotFollowed) {
  const std::string victim = tmp_.path() + "/victim";
  std::ofstream(victim) << "keep\n";
  ASSERT_EQ(symlink(victim.c_str(), layout_.metrics().c_str()), 0);
  Status s = AppendJsonLine(layout_.metrics(), "{\"step\":1}");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.message();
  EXPECT_EQ(ReadFile(victim), "keep\n");
}

// Issue 44, hole 14: the Env's file creation (temp files of every durable write, the
// heartbeats' and the progress files' writers) never truncates through a planted link.
TEST_F(Spools, TheEnvCreatesNoFileThroughALink) {
  const std::string victim = tmp_.path() + "/victim";
  const std::string link = tmp_.path() + "/planted.tmp";
  std::ofstream(victim) << "keep\n";
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  auto f = Env::Default()->NewWritableFile(link);
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(ReadFile(victim), "keep\n");
  // A durable write replaces the link itself (rename), never its target.
  ASSERT_TRUE(WriteFileDurably(Env::Default(), link, "new\n").ok());
  EXPECT_EQ(ReadFile(victim), "keep\n");
  EXPECT_EQ(ReadFile(link), "new\n");
}

// RUN/node_faults.jsonl: the rank's line names its host, node and rank from the launcher's
// environment and the reason; appended (not rewritten) by each failing rank; nothing is
// written where no run directory exists, and a link in place of the file is refused.
TEST_F(Spools, ANodeFaultLineNamesTheHostNodeAndRank) {
  std::map<std::string, std::string> env = {
      {"SLURMD_NODENAME", "n3"}, {"SLURM_NODEID", "2"}, {"SLURM_PROCID", "5"}};
  ASSERT_TRUE(RecordNodeFault(tmp_.path(), Launch(env), "no usable GPU \"here\"").ok());
  env["RANK"] = "4";
  ASSERT_TRUE(RecordNodeFault(tmp_.path(), Launch(env), "second").ok());
  std::vector<std::pair<int, nlohmann::json>> lines;
  std::vector<std::string> warnings;
  ASSERT_TRUE(ReadJsonLines(layout_.node_faults(), &lines, &warnings).ok());
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json& j = lines[0].second;
  EXPECT_EQ(j["host"], "n3");
  EXPECT_EQ(j["node"], 2);
  EXPECT_EQ(j["rank"], 5);
  EXPECT_EQ(j["reason"], "no usable GPU \"here\"");
  EXPECT_GT(j["time"].get<double>(), 1.7e9);
  EXPECT_EQ(lines[1].second["rank"], 4);  // RANK (ftrain launch) before SLURM_PROCID
  NodeFaultWho nobody;
  nobody.host = "h";
  EXPECT_EQ(EncodeNodeFault(1.5, nobody, "x"), "{\"time\":1.5,\"host\":\"h\",\"reason\":\"x\"}");
  EXPECT_TRUE(RecordNodeFault(tmp_.path() + "/missing", Launch(env), "x").ok());  // nothing to tell
  EXPECT_FALSE(std::ifstream(tmp_.path() + "/missing/node_faults.jsonl").good());
  const std::string victim = tmp_.path() + "/victim";
  std::ofstream(victim) << "keep\n";
  ASSERT_EQ(unlink(layout_.node_faults().c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), layout_.node_faults().c_str()), 0);
  EXPECT_FALSE(RecordNodeFault(tmp_.path(), Launch(env), "x").ok());
  EXPECT_EQ(ReadFile(victim), "keep\n");
}

// The launch facts are read once, by the lookup a main gives; malformed numbers are unknown,
// never a wrong rank or epoch.
TEST(LaunchContextTest, ReadsTheLaunchFactsOnceAndRefusesMalformedNumbers) {
  const LaunchContext c = Launch({{"SLURM_JOB_ID", "812"},
                                  {"SLURMD_NODENAME", "gpu-a17.rack3"},
                                  {"SLURM_NODEID", "3"},
                                  {"RANK", "12"},
                                  {"SLURM_PROCID", "9"},
                                  {"FTRAIN_FENCE_EPOCH", "42"},
                                  {"FTRAIN_RECORDS_SPOOL", "1"}});
  EXPECT_EQ(c.job_id, "812");
  EXPECT_EQ(c.node_name, "gpu-a17.rack3");
  EXPECT_EQ(c.short_host, "gpu-a17");
  EXPECT_EQ(c.node_index, 3);
  EXPECT_EQ(c.rank, 12);  // RANK (ftrain launch, torchrun) before SLURM_PROCID
  EXPECT_EQ(c.fence_epoch, 42);
  EXPECT_TRUE(c.records_spool);
  EXPECT_EQ(c.CkptdNodeId(), "gpu-a17.rack3");
  const LaunchContext bad = Launch({{"SLURMD_NODENAME", "n1"},
                                    {"SLURM_NODEID", "x"},
                                    {"RANK", "-1"},
                                    {"SLURM_PROCID", "7"},
                                    {"FTRAIN_FENCE_EPOCH", "12x"},
                                    {"FTRAIN_CKPTD_NODE", "d1"}});
  EXPECT_EQ(bad.node_index, -1);
  EXPECT_EQ(bad.rank, 7);
  EXPECT_EQ(bad.fence_epoch, 0);
  EXPECT_FALSE(bad.records_spool);
  EXPECT_EQ(bad.CkptdNodeId(), "d1");
  EXPECT_FALSE(Launch({}).node_name.empty());  // the host name
}

}  // namespace
}  // namespace ftrain::records
