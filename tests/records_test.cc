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
#include "records/hangs.h"
#include "records/json_lines.h"
#include "records/launch_context.h"
#include "records/node_faults.h"
#include "records/progress.h"
#include "records/quarantine.h"
#include "records/restarts.h"
#include "records/rollbacks.h"
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
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(3, "restarted")), Env::Default()).ok());
  ASSERT_TRUE(AppendToSpool(layout_, "n2", EncodeLine(Rec(1, "step_failed")), Env::Default()).ok());
  ASSERT_TRUE(
      AppendToSpool(layout_, "n1", EncodeLine(Rec(2, "heartbeat_late")), Env::Default()).ok());
  EXPECT_EQ(ReadFile(layout_.restarts()), "");  // nobody merged yet
  auto m = ReadMerged(layout_, Env::Default());
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->lines.size(), 3u);  // a reader sees the spools all the same
  EXPECT_EQ(m->lines[0].json["event"], "step_failed");
  auto added = MergeSpools(layout_, Env::Default());
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(*added, 3);
  EXPECT_EQ(*MergeSpools(layout_, Env::Default()), 0);  // nothing new: nothing rewritten
  const std::string merged = ReadFile(layout_.restarts());
  EXPECT_LT(merged.find("step_failed"), merged.find("heartbeat_late"));
  EXPECT_LT(merged.find("heartbeat_late"), merged.find("restarted"));
  // The merged file and the spools together: still three records, no duplicates.
  EXPECT_EQ(ReadMerged(layout_, Env::Default())->lines.size(), 3u);
  SpoolMerger merger(layout_, Env::Default());
  EXPECT_EQ(*merger.MaybeMerge(), 0);
  ASSERT_TRUE(AppendToSpool(layout_, "n3", EncodeLine(Rec(4, "resumed")), Env::Default()).ok());
  EXPECT_EQ(*merger.MaybeMerge(), 1);
}

// Hole 9: a torn line (a crash mid-append) or garbage is skipped and reported, never fatal.
TEST_F(Spools, ATornOrMalformedLineIsSkippedAndReported) {
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(1, "started")), Env::Default()).ok());
  {
    std::ofstream out(layout_.restarts_spool("n1"), std::ios::app);
    out << "{\"time\":2,\"event\":\"step_fai\n"
        << EncodeLine(Rec(3, "restarted")) << "\n"
        << "{\"time\":4,\"eve";  // cut mid-append
  }
  auto m = ReadMerged(layout_, Env::Default());
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->lines.size(), 2u);
  ASSERT_EQ(m->warnings.size(), 2u);
  EXPECT_NE(m->warnings[0].find("restarts-n1.jsonl:2: not a record"), std::string::npos)
      << m->warnings[0];
  EXPECT_NE(m->warnings[1].find("restarts-n1.jsonl:4: incomplete last line"), std::string::npos);
  ASSERT_TRUE(MergeSpools(layout_, Env::Default()).ok());
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
  ASSERT_TRUE(
      AppendForThisProcess(layout_, under_job, EncodeLine(Rec(1, "resumed")), Env::Default()).ok());
  const LaunchContext alone = Launch({{"SLURMD_NODENAME", "n7"}});
  ASSERT_TRUE(
      AppendForThisProcess(layout_, alone, EncodeLine(Rec(2, "fell_back")), Env::Default()).ok());
  EXPECT_NE(ReadFile(layout_.restarts_spool("n7")).find("resumed"), std::string::npos);
  EXPECT_NE(ReadFile(layout_.restarts()).find("fell_back"), std::string::npos);  // on its own
}

TEST_F(Spools, ALinkInPlaceOfASpoolIsNotFollowed) {
  const std::string victim = tmp_.path() + "/victim";
  std::ofstream(victim) << "keep\n";
  ASSERT_TRUE(AppendToSpool(layout_, "n1", EncodeLine(Rec(1, "started")), Env::Default()).ok());
  ASSERT_EQ(unlink(layout_.restarts_spool("n1").c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), layout_.restarts_spool("n1").c_str()), 0);
  Status s = AppendToSpool(layout_, "n1", EncodeLine(Rec(2, "restarted")), Env::Default());
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
  ASSERT_TRUE(
      RecordNodeFault(tmp_.path(), Launch(env), "no usable GPU \"here\"", Env::Default()).ok());
  env["RANK"] = "4";
  ASSERT_TRUE(RecordNodeFault(tmp_.path(), Launch(env), "second", Env::Default()).ok());
  std::vector<std::pair<int, nlohmann::json>> lines;
  std::vector<std::string> warnings;
  ASSERT_TRUE(ReadJsonLines(layout_.node_faults(), &lines, &warnings, Env::Default()).ok());
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
  EXPECT_TRUE(RecordNodeFault(tmp_.path() + "/missing", Launch(env), "x", Env::Default())
                  .ok());  // nothing to tell
  EXPECT_FALSE(std::ifstream(tmp_.path() + "/missing/node_faults.jsonl").good());
  const std::string victim = tmp_.path() + "/victim";
  std::ofstream(victim) << "keep\n";
  ASSERT_EQ(unlink(layout_.node_faults().c_str()), 0);
  ASSERT_EQ(symlink(victim.c_str(), layout_.node_faults().c_str()), 0);
  EXPECT_FALSE(RecordNodeFault(tmp_.path(), Launch(env), "x", Env::Default()).ok());
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

// The file: version 2 lines written, read back in order; version 1 lines (no "v", no "kind")
// still read as rollbacks; a newer version, an unknown kind or a bad range is Corruption
// naming file:line and the field.
TEST(Rollbacks, TheFileRoundTripsReadsTheOldFormAndRejectsWhatItCannotRead) {
  TempDir dir("ftrain-rollbacks");
  const std::string file = dir.path() + "/rollbacks.jsonl";
  ASSERT_TRUE(AppendRollback(dir.path(), {12, "spike", 10}, 3.5).ok());
  RollbackRecord applied;
  applied.kind = RollbackKind::kApplied;
  applied.step = 12;
  applied.first = 11;
  applied.last = 12;
  applied.resumed_from = 10;
  ASSERT_TRUE(AppendAppliedRollback(dir.path(), applied).ok());
  auto r = ReadRollbacks(dir.path(), Env::Default());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].kind, RollbackKind::kRollback);
  EXPECT_EQ((*r)[0].version, 2);
  EXPECT_EQ((*r)[0].grad_norm, 3.5);
  EXPECT_EQ((*r)[1].kind, RollbackKind::kApplied);
  EXPECT_EQ((*r)[1].first, 11);
  EXPECT_EQ((*r)[1].last, 12);
  EXPECT_EQ((*r)[1].resumed_from, 10);
  EXPECT_TRUE(ftrain::testing::Contains(ReadFile(file), "\"v\":2")) << ReadFile(file);

  ASSERT_TRUE(
      WriteFileDurably(Env::Default(), file,
                       "{\"time\":1,\"step\":50,\"reason\":\"spike\",\"resumed_from\":20}\n")
          .ok());
  r = ReadRollbacks(dir.path(), Env::Default());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].version, 1);
  EXPECT_EQ((*r)[0].kind, RollbackKind::kRollback);
  EXPECT_EQ((*r)[0].step, 50);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"v\":3,\"kind\":\"rollback\",\"step\":5,\"reason\":\"spike\"}",
       "rollbacks.jsonl:1: field 'v' is 3; this ftrain reads versions 1 to 2"},
      {"{\"v\":2,\"kind\":\"undo\",\"step\":5}", "field 'kind' is 'undo'"},
      {"{\"v\":2,\"step\":5,\"reason\":\"spike\"}", "field 'kind' is missing"},
      {"{\"v\":2,\"kind\":\"applied\",\"step\":5,\"first\":6,\"last\":5}",
       "must name a range 1 <= first <= last"},
      {"{\"v\":2,\"kind\":\"applied\",\"step\":5,\"first\":2}", "field 'last' is missing"},
  };
  for (const auto& [line, want] : bad) {
    ASSERT_TRUE(WriteFileDurably(Env::Default(), file, line + "\n").ok());
    auto b = ReadRollbacks(dir.path(), Env::Default());
    ASSERT_FALSE(b.ok()) << line;
    EXPECT_TRUE(ftrain::testing::Contains(b.status().message(), want)) << b.status().message();
  }
}

// RUN/quarantine.jsonl and RUN/hangs.jsonl have one definition each (issue 45): the writers'
// bytes are the former ones (sorted keys; the sdc line and the controller's line), the strict
// reader names file:line of a bad line, the lenient one skips and counts it.
TEST(QuarantineRecords, TheWrittenLinesAreTheFormerBytesAndBothReadersReadThem) {
  QuarantineRecord sdc;
  sdc.time = 1733500000.5;
  sdc.host = "gpu-b";
  sdc.node = 1;
  sdc.rank = 3;
  sdc.shard = 1;
  sdc.step = 9;
  sdc.cause = "sdc";
  sdc.by_majority = true;
  sdc.job = "77";
  EXPECT_EQ(EncodeQuarantine(sdc),
            "{\"by_majority\":true,\"cause\":\"sdc\",\"host\":\"gpu-b\",\"job\":\"77\",\"node\":1,"
            "\"rank\":3,\"shard\":1,\"step\":9,\"time\":1733500000.5}");
  QuarantineRecord hang;  // the controller's: its numbers come as the action's fields
  hang.time = 1733500100;
  hang.host = "gpu-a";
  hang.cause = "hang";
  hang.fields = {Int("node", 0), Int("rank", 1), Int("step", 14), Int("hangs", 2)};
  EXPECT_EQ(EncodeQuarantine(hang),
            "{\"by_majority\":false,\"cause\":\"hang\",\"hangs\":2,\"host\":\"gpu-a\",\"node\":0,"
            "\"rank\":1,\"step\":14,\"time\":1733500100.0}");
  TempDir dir("records_quarantine");
  const std::string path = dir.path() + "/quarantine.jsonl";
  ASSERT_TRUE(AppendQuarantine(path, sdc).ok());
  ASSERT_TRUE(AppendQuarantine(path, hang).ok());
  std::vector<std::string> warnings;
  auto strict = ReadQuarantineFile(path, &warnings, Env::Default());
  ASSERT_TRUE(strict.ok()) << strict.status().message();
  ASSERT_EQ(strict->size(), 2u);
  EXPECT_EQ((*strict)[0].shard, 1);
  EXPECT_EQ((*strict)[1].rank, 1);
  EXPECT_EQ((*strict)[1].cause, "hang");
  int skipped = 0;
  const auto lenient = ParseQuarantineText(
      ReadFile(path) + "not json\n{\"host\":\"h\",\"rank\":\"x\"}\n{\"ti", &skipped);
  ASSERT_EQ(lenient.size(), 3u);
  EXPECT_EQ(skipped, 2);
  EXPECT_EQ(lenient[2].rank, -1);  // a field of the wrong type keeps its default
  std::ofstream(path, std::ios::app) << "{\"time\":1,\"host\":\"h\",\"rank\":\"x\"}\n";
  auto bad = ReadQuarantineFile(path, &warnings, Env::Default());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":3: field 'rank'"), std::string::npos)
      << bad.status().message();
}

TEST(HangRecords, TheWrittenLineIsTheFormerBytesAndBothReadersReadIt) {
  HangRecord h;
  h.time = 1733500000.25;
  h.step = 7;
  h.rank = 3;
  h.node = 1;
  h.host = "h1";
  h.phase = "compute";
  h.stuck_s = 12.5;
  h.threshold_s = 10;
  h.detected_by = 0;
  h.generation = "g1";
  h.launched = 40;
  EXPECT_EQ(EncodeHang(h),
            "{\"detected_by\":0,\"generation\":\"g1\",\"host\":\"h1\",\"launched\":40,\"node\":1,"
            "\"phase\":\"compute\",\"rank\":3,\"step\":7,\"stuck_s\":12.5,\"threshold_s\":10.0,"
            "\"time\":1733500000.25}");
  TempDir dir("records_hangs");
  const std::string path = dir.path() + "/hangs.jsonl";
  h.job = "12";
  ASSERT_TRUE(AppendHang(path, h).ok());
  std::vector<std::string> warnings;
  auto strict = ReadHangsFile(path, &warnings, Env::Default());
  ASSERT_TRUE(strict.ok()) << strict.status().message();
  ASSERT_EQ(strict->size(), 1u);
  EXPECT_EQ((*strict)[0].job, "12");
  EXPECT_EQ((*strict)[0].launched, 40u);
  int skipped = 0;
  const auto lenient = ParseHangsText(ReadFile(path) + "{\"rank\":1}\n", &skipped);
  ASSERT_EQ(lenient.size(), 1u);
  EXPECT_EQ(lenient[0].phase, "compute");
  EXPECT_EQ(skipped, 1);  // no host: the controller cannot count it against one
  std::ofstream(path, std::ios::app) << "{\"time\":2}\n";
  auto bad = ReadHangsFile(path, &warnings, Env::Default());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":2: field 'rank' is missing"), std::string::npos)
      << bad.status().message();
}

// RUN/progress/node-<N>.json and its rank entry have one definition (issue 45): the bytes the
// hang guard wrote before the move, the round trip, and a torn or foreign file refused.
RankProgress Progress(int rank, uint64_t launched, double stuck_s) {
  const std::string host = "h" + std::to_string(rank / 2);
  return RankProgress{rank, rank / 2, host, "g", 7, "compute", launched, stuck_s, 3, 1000};
}

TEST(ProgressRecords, TheRankEntryIsTheFormerBytesAndTornTextIsRefused) {
  RankProgress p = Progress(3, 12345678901ULL, 2.5);
  p.pid = 77;
  EXPECT_EQ(ProgressJson(p),
            "{\"generation\":\"g\",\"host\":\"h1\",\"launched\":12345678901,\"node\":1,"
            "\"phase\":\"compute\",\"pid\":77,\"rank\":3,\"step\":7,\"stuck_s\":2.5,"
            "\"threshold_s\":3.0,\"time\":1000.0}");
  p.mono = 12.5;  // only when known
  const std::string text = ProgressJson(p);
  EXPECT_NE(text.find("\"mono\":12.5"), std::string::npos) << text;
  RankProgress q;
  ASSERT_TRUE(ParseProgress(text, &q));
  EXPECT_EQ(q.rank, 3);
  EXPECT_EQ(q.host, "h1");
  EXPECT_EQ(q.launched, 12345678901ULL);
  EXPECT_EQ(q.stuck_s, 2.5);
  EXPECT_EQ(q.pid, 77);
  EXPECT_EQ(q.mono, 12.5);
  EXPECT_FALSE(ParseProgress(text.substr(0, text.size() / 2), &q));
  EXPECT_FALSE(ParseProgress("{\"rank\": 1}", &q));
  EXPECT_FALSE(ParseProgress("", &q));
}

TEST(ProgressRecords, TheNodeFileIsTheFormerBytesAndRoundTripsThroughItsPath) {
  NodeProgress n;
  n.node = 3;
  n.host = "h3";
  n.generation = "g";
  n.time = 5;
  n.ranks = {Progress(6, 10, 1)};
  EXPECT_EQ(NodeProgressJson(n),
            "{\"generation\":\"g\",\"host\":\"h3\",\"node\":3,\"ranks\":[{\"generation\":\"g\","
            "\"host\":\"h3\",\"launched\":10,\"node\":3,\"phase\":\"compute\",\"pid\":0,\"rank\":6,"
            "\"step\":7,\"stuck_s\":1.0,\"threshold_s\":3.0,\"time\":1000.0}],\"time\":5.0}");
  n.ranks.push_back(Progress(7, 11, 2));
  TempDir dir("records_progress");
  const std::string path = dir.path() + "/node-3.json";
  NodeProgress m;
  EXPECT_FALSE(ReadNodeProgress(path, &m, Env::Default()));  // missing: no verdict from it
  ASSERT_TRUE(WriteNodeProgress(path, n).ok());
  ASSERT_TRUE(ReadNodeProgress(path, &m, Env::Default()));
  EXPECT_EQ(ReadFile(path), NodeProgressJson(n));
  EXPECT_EQ(m.node, 3);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[1].rank, 7);
  EXPECT_EQ(m.ranks[1].launched, 11u);
  auto names = Env::Default()->ListDir(dir.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>({"node-3.json"}));  // no temporary left
  const std::string text = NodeProgressJson(n);
  EXPECT_FALSE(ParseNodeProgress(text.substr(0, text.size() - 3), &m));
  EXPECT_FALSE(
      ParseNodeProgress("{\"node\":1,\"host\":\"h\",\"generation\":\"g\",\"time\":1,"
                        "\"ranks\":[{\"rank\":1}]}",
                        &m));
  EXPECT_FALSE(
      ParseNodeProgress("{\"node\":1,\"host\":\"h\",\"generation\":\"g\",\"time\":1,"
                        "\"ranks\":{}}",
                        &m));
}

}  // namespace
}  // namespace ftrain::records
