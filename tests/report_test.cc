// `ftrain report` on synthetic run directories written here: goodput, hours lost, per
// interruption detection / recovery / re-done work, and step-time p50/p95 against values
// computed by hand (comments show the arithmetic); bad input (missing directory, malformed
// and torn lines) and exit codes; the SVG rendered to PNG by rsvg-convert, its size checked
// and every text element inside the viewBox. FTRAIN_REPORT_KEEP=DIR keeps the realistic
// run directory, its SVG and PNG there (to look at them).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "report/run_report.h"

namespace ftrain {
namespace {

constexpr double kT0 = 1796140800;  // 2026-12-01T16:00:00Z

// Where the run directories go: FTRAIN_REPORT_KEEP, else a per-process temp directory (two
// builds may run this test at the same time) that is removed at the end.
std::string Base() {
  const char* keep = std::getenv("FTRAIN_REPORT_KEEP");
  if (keep != nullptr && *keep != '\0') return keep;
  return ::testing::TempDir() + "/ftrain_report_" + std::to_string(getpid());
}

class RemoveTempDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* keep = std::getenv("FTRAIN_REPORT_KEEP");
    if (keep == nullptr || *keep == '\0') std::system(("rm -rf '" + Base() + "'").c_str());
  }
};
// GoogleTest takes ownership of the environment.
::testing::Environment* const kRemoveTempDirs =
    ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);

std::string NewDir(const std::string& name) {
  std::string dir = Base() + "/report_" + name;
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Appends metrics lines for steps [from, to] run back to back from `start`, with step time
// st(step) (which includes `stall` on steps divisible by `ckpt_every`). Returns the end time.
template <typename F>
double AddSteps(std::string* out, int from, int to, double start, int restart_count, F st,
                int ckpt_every, double stall, bool gpu = false) {
  double t = start;
  for (int k = from; k <= to; ++k) {
    const double s = st(k) + (k % ckpt_every == 0 ? stall : 0);
    t += s;
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "{\"step\":%d,\"loss\":%.6f,\"lr\":0.0003,\"grad_norm\":1.0,\"step_time_s\":%.6f,"
                  "\"tokens_per_s\":%.1f,\"data_wait_s\":0.001,\"comm_s\":0.05,"
                  "\"ckpt_stall_s\":%.6f,\"restart_count\":%d,\"tokens\":%d,\"time\":%.3f",
                  k, 2.0 + 8.0 / (1.0 + 0.05 * k), s, 4096.0 / s, k % ckpt_every == 0 ? stall : 0.0,
                  restart_count, 4096 * k, t);
    *out += buf;
    if (gpu) {
      std::snprintf(buf, sizeof(buf),
                    ",\"gpu_util\":%.1f,\"gpu_mem_gb\":%.2f,\"mfu\":%.4f,"
                    "\"tokens_per_s_per_gpu\":%.1f",
                    90.0 + k % 7, 70.0 + 0.01 * k, 0.40 + 0.001 * (k % 10), 4096.0 / s / 64);
      *out += buf;
    }
    *out += "}\n";
  }
  return t;
}

std::string Event(double t, const std::string& event, const std::string& cause,
                  const std::string& extra = "") {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "{\"time\":%.3f,\"job\":\"1001\",\"event\":\"%s\",", t,
                event.c_str());
  return std::string(buf) + "\"cause\":\"" + cause + "\"" + (extra.empty() ? "" : "," + extra) +
         "}\n";
}

// Step k takes 1.0 + 0.1 * (k % 10) s, plus a 0.5 s checkpoint stall when k % 5 == 0. Over
// any ten consecutive steps that is 1.1 + 1.2 + 1.3 + 1.4 + 2.0 + 1.6 + 1.7 + 1.8 + 1.9 + 1.5
// = 15.5 s; steps 11..15 take 7.0 s, steps 16..20 8.5 s.
double SmallSt(int k) { return 1.0 + 0.1 * (k % 10); }

// The hand-computed run (offsets from T0):
//   0      started
//   10     attempt 1 starts step 1; steps 1..10 end at 25.5 (checkpoint 10)
//          steps 11..13 run (1.1 + 1.2 + 1.3 = 3.6 s): last sign of life 29.1, then lost
//   40     step_failed node_failure (train.sh); 300 requeued (Slurm)
//   320    attempt 2 starts step 11; steps 11..15 kept, step 15 ends at 327.0
//          steps 16..22 run (8.5 + 1.1 + 1.2 = 10.8 s): last sign of life 337.8, then lost
//   345    restarted rank_failure; 355 fell_back: step 20 damaged, resume from 15
//   365    attempt 3 starts step 16; steps 16..30 (24.0 s) end at 389.0
//   395    finished
std::string WriteSmallRun(const std::string& name, bool new_fields = true) {
  const std::string dir = NewDir(name);
  std::string m, r;
  r += Event(kT0, "started", "initial");
  double end = AddSteps(&m, 1, 10, kT0 + 10, 0, SmallSt, 5, 0.5);
  EXPECT_NEAR(end, kT0 + 25.5, 1e-6);
  auto life = [&](int step, double t) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ",\"last_step\":%d,\"last_step_time\":%.3f", step, t);
    return new_fields ? std::string(buf) : std::string();
  };
  r += Event(kT0 + 40, "step_failed", "node_failure",
             "\"lost_s\":3" + life(13, kT0 + 29.1) + ",\"exit\":1");
  r += Event(kT0 + 300, "requeued", "node_failure", "\"lost_s\":3" + life(13, kT0 + 29.1));
  end = AddSteps(&m, 11, 15, kT0 + 320, 1, SmallSt, 5, 0.5);
  EXPECT_NEAR(end, kT0 + 327, 1e-6);
  r += Event(kT0 + 345, "restarted", "rank_failure",
             "\"lost_s\":2" + life(22, kT0 + 337.8) + ",\"exit\":1,\"injob\":1");
  r += Event(kT0 + 355, "fell_back", "corrupt_checkpoint",
             "\"step\":20,\"moved_to\":\"step-00000020.corrupt\",\"problem\":\"checksum\"");
  end = AddSteps(&m, 16, 30, kT0 + 365, 2, SmallSt, 5, 0.5);
  EXPECT_NEAR(end, kT0 + 389, 1e-6);
  r += Event(kT0 + 395, "finished", "complete");
  WriteFile(dir + "/metrics.jsonl", m);
  WriteFile(dir + "/restarts.jsonl", r);
  return dir;
}

TEST(ReportTest, GoodputHoursLostAndPercentilesMatchHandComputedValues) {
  auto s = report::AnalyzeRun(WriteSmallRun("small"), Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NEAR(s->start, kT0, 1e-6);
  EXPECT_NEAR(s->wall_s, 395, 1e-6);
  // Productive: the 30 step records, three decades of 15.5 s.
  EXPECT_NEAR(s->productive_s, 46.5, 1e-6);
  // Lost: (320 - 25.5) + (365 - 327) = 294.5 + 38 = 332.5 s.
  EXPECT_NEAR(s->lost_s, 332.5, 1e-6);
  EXPECT_NEAR(s->redone_s, 3.6 + 10.8, 1e-6);
  EXPECT_NEAR(s->down_s, 290.9 + 27.2, 1e-6);
  EXPECT_NEAR(s->goodput, 46.5 / 395, 1e-9);
  // Other: 10 s start-up + 6 s between the last step and `finished`.
  EXPECT_NEAR(s->other_s, 16, 1e-6);
  // Without stalls each value 1.0..1.9 appears 3 times: 15th of 30 is 1.4, 29th is 1.9.
  EXPECT_NEAR(s->step_time.p50, 1.4, 1e-9);
  EXPECT_NEAR(s->step_time.p95, 1.9, 1e-9);
  // With stalls (1.0 -> 1.5, 1.5 -> 2.0): 1.1..2.0 three times each: 1.5 and 2.0.
  EXPECT_NEAR(s->step_time_with_stall.p50, 1.5, 1e-9);
  EXPECT_NEAR(s->step_time_with_stall.p95, 2.0, 1e-9);
  EXPECT_EQ(s->checkpoint_steps, (std::vector<int64_t>{5, 10, 15, 20, 25, 30}));
  EXPECT_NEAR(s->stall_total_s, 3.0, 1e-9);
  EXPECT_FALSE(s->mfu.has_value());  // absent fields stay absent
  ASSERT_EQ(s->interruptions.size(), 2u);

  const auto& a = s->interruptions[0];
  EXPECT_EQ(a.cause, "node_failure");
  EXPECT_EQ(a.resumed_step, 10);
  EXPECT_FALSE(a.failed_at_estimated);
  EXPECT_NEAR(a.failed_at - kT0, 29.1, 1e-6);
  EXPECT_NEAR(*a.detected_at - a.failed_at, 10.9, 1e-6);  // detection
  EXPECT_NEAR(*a.restarted_at - kT0, 300, 1e-6);
  EXPECT_NEAR(*a.first_step_start - *a.detected_at, 280, 1e-6);  // recovery
  EXPECT_EQ(a.redone_steps, 3);
  EXPECT_NEAR(a.redone_s, 3.6, 1e-6);
  EXPECT_NEAR(a.down_s, 290.9, 1e-6);
  EXPECT_NEAR(a.lost_s, 294.5, 1e-6);

  const auto& b = s->interruptions[1];
  EXPECT_EQ(b.cause, "rank_failure");
  EXPECT_EQ(b.resumed_step, 15);
  EXPECT_EQ(b.redone_steps, 7);  // 16..22
  EXPECT_NEAR(b.redone_s, 10.8, 1e-6);
  EXPECT_NEAR(*b.detected_at - b.failed_at, 7.2, 1e-6);
  EXPECT_NEAR(*b.first_step_start - *b.detected_at, 20, 1e-6);
  EXPECT_NEAR(b.down_s, 27.2, 1e-6);
  ASSERT_EQ(b.fallbacks.size(), 1u);
  EXPECT_EQ(s->events[b.fallbacks[0]].step, 20);
  EXPECT_NE(b.state_from.find("step 15"), std::string::npos) << b.state_from;
}

// A `superseded` record (slurm/train.sh: a start of a job its node agents already submitted
// again, which Slurm requeued anyway, ends at once) lands while the new job trains: it is
// listed with the job that continues, but it is no interruption and costs the run nothing.
TEST(ReportTest, SupersededStartIsListedButIsNoInterruption) {
  const std::string dir = WriteSmallRun("superseded");
  std::ofstream(dir + "/restarts.jsonl", std::ios::app)
      << Event(kT0 + 380, "superseded", "replaced", "\"new_job\":\"1002\"");
  auto s = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->interruptions.size(), 2u);  // as without it
  EXPECT_NEAR(s->lost_s, 332.5, 1e-6);
  EXPECT_NEAR(s->goodput, 46.5 / 395, 1e-9);
  std::ostringstream out;
  report::PrintReport(*s, out);
  EXPECT_NE(out.str().find("(+00:06:20)  superseded (replaced), job 1001: the job continues as job "
                           "1002\n"),
            std::string::npos)
      << out.str();
}

// An elastic run's shrink (FTRAIN_ELASTIC, issue 47): the interruption says the new world.
TEST(ReportTest, AShrinkSaysTheNewWorldSize) {
  const std::string dir = WriteSmallRun("shrink");
  std::string r = ReadFile(dir + "/restarts.jsonl");
  const size_t at = r.find("\"event\":\"restarted\",\"cause\":\"rank_failure\"");
  ASSERT_NE(at, std::string::npos) << r;
  r.replace(r.find("\"cause\":\"rank_failure\"", at), 22,
            "\"cause\":\"shrink\",\"node\":\"n3\",\"nodes\":2,\"world\":4,\"shrink\":1");
  WriteFile(dir + "/restarts.jsonl", r);
  auto s = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->interruptions.size(), 2u);
  EXPECT_NE(s->interruptions[1].how.find("restarted (job 1001) (shrank to 4 ranks on 2 nodes "
                                         "without n3)"),
            std::string::npos)
      << s->interruptions[1].how;
  std::ostringstream out;
  report::PrintReport(*s, out);
  EXPECT_NE(out.str().find("shrank to 4 ranks on 2 nodes without n3"), std::string::npos)
      << out.str();
  // Its growth back when the node returns (restarted/grow) says the world it grew to.
  const std::string grow = WriteSmallRun("grow");
  r = ReadFile(grow + "/restarts.jsonl");
  r.replace(r.find("\"cause\":\"rank_failure\"", r.find("\"event\":\"restarted\"")), 22,
            "\"cause\":\"grow\",\"node\":\"n3\",\"nodes\":3,\"world\":6,\"grow\":1");
  WriteFile(grow + "/restarts.jsonl", r);
  auto g = report::AnalyzeRun(grow, Env::Default());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->interruptions.size(), 2u);
  EXPECT_NE(g->interruptions[1].how.find("(grew to 6 ranks on 3 nodes with n3)"), std::string::npos)
      << g->interruptions[1].how;
}

TEST(ReportTest, StateSaysFinishedFailedOrNotFinishedWithWhatToDo) {
  auto text = [](const std::string& dir) {
    auto s = report::AnalyzeRun(dir, Env::Default());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    std::ostringstream out;
    if (s.ok()) report::PrintReport(*s, out);
    return out.str();
  };
  const std::string done = WriteSmallRun("state-done");
  EXPECT_NE(
      text(done).find("state          finished, 2026-12-01T16:06:35Z (+00:06:35), job 1001\n"),
      std::string::npos)
      << text(done);
  // The same run had train.sh given up after the fall-back instead of finishing.
  const std::string failed = WriteSmallRun("state-failed");
  std::string r = ReadFile(failed + "/restarts.jsonl");
  r.replace(r.find("{\"time\":" + std::to_string(static_cast<int64_t>(kT0 + 395))),
            std::string::npos,
            Event(kT0 + 396, "failed", "rank_failure_repeated", "\"failed_starts\":3"));
  WriteFile(failed + "/restarts.jsonl", r);
  const std::string t = text(failed);
  EXPECT_NE(t.find("state          FAILED (rank_failure_repeated) 2026-12-01T16:06:36Z "
                   "(+00:06:36), job 1001: slurm/train.sh gave up; find the cause in the job's "
                   "output (the ranks' errors), fix it, then submit again: it resumes from the "
                   "start (no complete checkpoint)\n"),
            std::string::npos)
      << t;
  auto s = report::AnalyzeRun(failed, Env::Default());
  ASSERT_TRUE(s.ok());
  std::ostringstream js;
  report::PrintReportJson(*s, js);
  const auto j = nlohmann::json::parse(js.str());
  EXPECT_EQ(j["state"]["kind"], "failed");
  EXPECT_EQ(j["state"]["cause"], "rank_failure_repeated");
  // Without a last record that ends the run it is not finished, whatever its steps say.
  const std::string open = WriteSmallRun("state-open");
  r = ReadFile(open + "/restarts.jsonl");
  r.erase(r.find("{\"time\":" + std::to_string(static_cast<int64_t>(kT0 + 395))));
  WriteFile(open + "/restarts.jsonl", r);
  EXPECT_NE(text(open).find("state          not finished: the newest record is fell_back "
                            "(corrupt_checkpoint), 2026-12-01T16:05:55Z (+00:05:55), job 1001"),
            std::string::npos)
      << text(open);
}

TEST(ReportTest, TextShowsIsoTimesOffsetsAndNoUnixSeconds) {
  auto s = report::AnalyzeRun(WriteSmallRun("text"), Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::ostringstream out;
  report::PrintReport(*s, out);
  const std::string t = out.str();
  EXPECT_NE(t.find("2026-12-01T16:00:00Z"), std::string::npos) << t;
  EXPECT_NE(t.find("2026-12-01T16:00:29Z (+00:00:29)"), std::string::npos) << t;  // failure 1
  EXPECT_NE(t.find("goodput        11.8 %"), std::string::npos) << t;
  EXPECT_NE(t.find("hours lost     0.09 h (5 min 33 s) to 2 interruptions"), std::string::npos)
      << t;
  EXPECT_NE(t.find("3 steps (11-13)"), std::string::npos) << t;
  EXPECT_NE(t.find("7 steps (16-22)"), std::string::npos) << t;
  EXPECT_NE(t.find("failed verification"), std::string::npos) << t;
  EXPECT_NE(t.find("p50 1.400 s, p95 1.900 s"), std::string::npos) << t;
  EXPECT_EQ(t.find("17961"), std::string::npos) << "raw Unix seconds in the report:\n" << t;
}

TEST(ReportTest, OldRecordsWithoutLastStepAreEstimatedFromLostSeconds) {
  auto s = report::AnalyzeRun(WriteSmallRun("old", /*new_fields=*/false), Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->interruptions.size(), 2u);
  const auto& a = s->interruptions[0];
  EXPECT_TRUE(a.failed_at_estimated);
  EXPECT_NEAR(a.failed_at - kT0, 25.5 + 3, 1e-6);  // last good + lost_s
  EXPECT_EQ(a.redone_steps, 2);                    // 3 s / median 1.5 s
  // After the fallback, lost_s counts from the damaged step 20: 5 steps x 1.5 s further on.
  EXPECT_NEAR(s->interruptions[1].failed_at - kT0, 327 + 2 + 7.5, 1e-6);
  EXPECT_NEAR(s->lost_s, 332.5, 1e-6);  // the total does not depend on where the failure was
  EXPECT_FALSE(s->warnings.empty());
}

// `ftrain launch` without slurm/train.sh: the only record is the trainer's fell_back (what
// TrainFallbackTest's run directory holds). Steps 1..15, then 16..30 after the restart.
TEST(ReportTest, RestartOutsideTrainShIsAnInterruptionWithEstimates) {
  const std::string dir = NewDir("launch");
  std::string m;
  AddSteps(&m, 1, 15, kT0, 0, SmallSt, 5, 0.5);  // step 15 ends at 0 + 15.5 + 7.0 = 22.5
  AddSteps(&m, 16, 30, kT0 + 40, 1, SmallSt, 5, 0.5);
  WriteFile(dir + "/metrics.jsonl", m);
  WriteFile(dir + "/restarts.jsonl",
            Event(kT0 + 35, "fell_back", "corrupt_checkpoint", "\"step\":20,\"problem\":\"hash\"") +
                Event(kT0 + 38, "resumed", "resume",
                      "\"step\":15,\"dir\":\"ckpt/step-00000015\",\"source\":\"disk\""));
  auto s = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->interruptions.size(), 1u);
  const auto& in = s->interruptions[0];
  EXPECT_NE(in.cause.find("outside slurm/train.sh"), std::string::npos) << in.cause;
  EXPECT_FALSE(in.detected_at.has_value());
  EXPECT_TRUE(in.failed_at_estimated);
  EXPECT_NEAR(in.failed_at - kT0, 22.5 + 5 * 1.5, 1e-6);  // up to the damaged step 20
  EXPECT_EQ(in.redone_steps, 5);
  EXPECT_NEAR(in.lost_s, 40 - 22.5, 1e-6);
  EXPECT_EQ(in.state_from, "disk, ckpt/step-00000015");  // the trainer's resumed record
  std::ostringstream out;
  report::PrintReport(*s, out);
  EXPECT_NE(out.str().find("not recorded (no train.sh record of the failure)"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("interruption #1 (near"), std::string::npos) << out.str();
}

TEST(ReportTest, OptionalGpuFieldsAreReportedWhenPresent) {
  const std::string dir = NewDir("gpu");
  std::string m;
  AddSteps(&m, 1, 20, kT0, 0, SmallSt, 5, 0.5, /*gpu=*/true);
  WriteFile(dir + "/metrics.jsonl", m);
  auto s = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->mfu && s->gpu_util && s->gpu_mem_gb && s->tokens_per_s_per_gpu);
  EXPECT_NEAR(s->mfu->p50, 0.404, 1e-9);  // 0.400..0.409 twice each: 10th of 20
  EXPECT_NEAR(s->gpu_mem_gb->max, 70.2, 1e-9);
  std::ostringstream out;
  report::PrintReport(*s, out);
  EXPECT_NE(out.str().find("MFU            p50 40.4 %"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("memory max 70.2 GB"), std::string::npos) << out.str();
}

// --- the command line ---------------------------------------------------------------------

struct CliResult {
  int code;
  std::string out, err;
};

CliResult RunCli(std::vector<std::string> args) {
  args.insert(args.begin(), "report");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int code = cli::RunReport(static_cast<int>(argv.size()), argv.data());
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  return {code, out, err};
}

TEST(ReportCliTest, JsonCarriesTheNumbers) {
  auto r = RunCli({WriteSmallRun("json"), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["goodput"].get<double>(), 46.5 / 395, 1e-9);
  EXPECT_NEAR(j["lost_h"].get<double>(), 332.5 / 3600, 1e-9);
  EXPECT_NEAR(j["step_time_s"]["p95"].get<double>(), 1.9, 1e-9);
  EXPECT_EQ(j["start"]["iso"], "2026-12-01T16:00:00Z");
  EXPECT_EQ(j["checkpoints"]["written"], 6);
  ASSERT_EQ(j["interruptions"].size(), 2u);
  EXPECT_EQ(j["interruptions"][0]["failed_at"]["offset"], "+00:00:29");
  EXPECT_NEAR(j["interruptions"][0]["detection_s"].get<double>(), 10.9, 1e-6);
  EXPECT_NEAR(j["interruptions"][1]["recovery_s"].get<double>(), 20, 1e-6);
  EXPECT_EQ(j["interruptions"][1]["fell_back"][0]["step"], 20);
  EXPECT_EQ(j["events"].size(), 6u);
  EXPECT_FALSE(j.contains("mfu"));
}

// RUN/quarantine.jsonl (the trainer's replica check): shown in the text and the JSON; a bad
// line is an error naming the file and line.
TEST(ReportCliTest, QuarantinedNodesAreShown) {
  const std::string dir = WriteSmallRun("quarantine");
  WriteFile(dir + "/quarantine.jsonl",
            "{\"time\":" + std::to_string(kT0 + 200) +
                ",\"host\":\"gpu-b\",\"node\":1,\"rank\":3,\"shard\":1,\"step\":9,"
                "\"cause\":\"sdc\",\"by_majority\":true}\n"
                "{\"time\":" +
                std::to_string(kT0 + 300) +
                ",\"host\":\"gpu-a\",\"node\":0,\"rank\":1,\"step\":14,\"cause\":\"hang\","
                "\"hangs\":2,\"by_majority\":false}\n");
  // What `ftrain job` did: a spare took gpu-b's ranks; gpu-a was excluded from the requeue.
  std::ofstream(dir + "/restarts.jsonl", std::ios::app)
      << Event(kT0 + 200, "sdc", "sdc", "\"step\":9,\"detail\":\"rank 3 (node 1) disagrees\"")
      << Event(kT0 + 201, "restarted", "quarantine",
               "\"node\":\"gpu-b\",\"spare\":\"gpu-c\",\"spares_left\":0")
      << Event(kT0 + 301, "step_failed", "quarantine",
               "\"nodes\":\"gpu-a\",\"action\":\"requeue_excluding\"");
  auto r = RunCli({dir});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("quarantined (RUN/quarantine.jsonl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sdc (sdc), job 1001: rank 3 (node 1) disagrees\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(+00:03:20)  host gpu-b (node 1, rank 3), after step 9, sdc: outvoted "
                       "by its replicas\n      the job: replaced by spare gpu-c (job 1001)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("host gpu-a (node 0, rank 1), after step 14, hang: ranks hung there "
                       "twice\n      the job: excluded from the requeued job (job 1001)\n"),
            std::string::npos)
      << r.out;
  auto j = RunCli({dir, "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  auto q = nlohmann::json::parse(j.out)["quarantined"];
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0]["host"], "gpu-b");
  EXPECT_EQ(q[0]["action"], "replaced by spare gpu-c (job 1001)");
  EXPECT_EQ(q[0]["rank"], 3);
  EXPECT_EQ(q[0]["by_majority"], true);
  auto none = RunCli({WriteSmallRun("no_quarantine"), "--json"});
  EXPECT_TRUE(nlohmann::json::parse(none.out)["quarantined"].empty());
  WriteFile(dir + "/quarantine.jsonl", "{\"time\":\"soon\",\"host\":\"h\"}\n");
  auto bad = RunCli({dir});
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.err.find("quarantine.jsonl:1"), std::string::npos) << bad.err;
}

// RUN/hangs.jsonl (the trainer's hang guard): shown in the text and the JSON; a bad line is an
// error naming the file and line.
TEST(ReportCliTest, HungRanksAreShown) {
  const std::string dir = WriteSmallRun("hangs");
  WriteFile(dir + "/hangs.jsonl",
            "{\"time\":" + std::to_string(kT0 + 200) +
                ",\"step\":6,\"rank\":3,\"node\":1,\"host\":\"gpu-b\",\"phase\":\"compute\","
                "\"stuck_s\":64.25,\"threshold_s\":60,\"detected_by\":0}\n");
  auto r = RunCli({dir});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("hangs (RUN/hangs.jsonl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(+00:03:20)  step 6: rank 3 (node 1, host gpu-b) stuck in compute for "
                       "64.2 s (threshold 60.0 s), named by rank 0\n"),
            std::string::npos)
      << r.out;
  auto j = RunCli({dir, "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  auto h = nlohmann::json::parse(j.out)["hangs"];
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0]["host"], "gpu-b");
  EXPECT_EQ(h[0]["rank"], 3);
  EXPECT_EQ(h[0]["step"], 6);
  EXPECT_EQ(h[0]["phase"], "compute");
  EXPECT_EQ(h[0]["stuck_s"], 64.25);
  auto none = RunCli({WriteSmallRun("no_hangs"), "--json"});
  EXPECT_TRUE(nlohmann::json::parse(none.out)["hangs"].empty());
  WriteFile(dir + "/hangs.jsonl", "{\"time\":1,\"rank\":\"three\"}\n");
  auto bad = RunCli({dir});
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.err.find("hangs.jsonl:1"), std::string::npos) << bad.err;
}

TEST(ReportCliTest, UsageErrorsExit2) {
  EXPECT_EQ(RunCli({}).code, 2);
  auto r = RunCli({"/nonexistent/run"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'/nonexistent/run' does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(RunCli({NewDir("empty_dir")}).code, 2);  // no records at all
  EXPECT_EQ(RunCli({WriteSmallRun("flag"), "--bogus"}).code, 2);
  r = RunCli({WriteSmallRun("svgdir"), "--svg", "/nonexistent/dir/t.svg"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--svg"), std::string::npos) << r.err;
}

TEST(ReportCliTest, MalformedLineIsAnErrorNamingFileAndLine) {
  const std::string dir = WriteSmallRun("malformed");
  std::string m = ReadFile(dir + "/metrics.jsonl");
  const size_t third = m.find('\n', m.find('\n', m.find('\n') + 1) + 1);
  WriteFile(dir + "/metrics.jsonl",
            m.substr(0, third + 1) + "{\"step\":4,\"loss\":\n" + m.substr(third + 1));
  auto r = RunCli({dir});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(dir + "/metrics.jsonl:4: not a JSON object"), std::string::npos) << r.err;
  // A field of the wrong type is named.
  WriteFile(dir + "/metrics.jsonl", m.substr(0, third + 1) + "{\"step\":\"4\",\"time\":1}\n");
  r = RunCli({dir});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("metrics.jsonl:4: field 'step' is not an integer"), std::string::npos)
      << r.err;
}

// restarts.jsonl has writers on several hosts (records/restarts.h): a torn or malformed record
// in the middle, or one of a spool not merged yet, never fails the report (it used to exit 1).
TEST(ReportCliTest, AMalformedRestartRecordIsSkippedAndSpoolsAreRead) {
  const std::string dir = WriteSmallRun("torn_restart");
  std::string r = ReadFile(dir + "/restarts.jsonl");
  const size_t second = r.find('\n', r.find('\n') + 1);
  WriteFile(
      dir + "/restarts.jsonl",
      r.substr(0, second + 1) + "{\"time\":17000,\"event\":\"step_fa\n" + r.substr(second + 1));
  ASSERT_EQ(::mkdir((dir + "/.records").c_str(), 0755), 0);
  WriteFile(dir + "/.records/restarts-n2.jsonl",
            "{\"time\":" + std::to_string(kT0 + 396) +
                ",\"job\":\"7\",\"restart_count\":0,\"event\":\"heartbeat_late\","
                "\"cause\":\"none\",\"node\":\"n2\"}\n");
  auto out = RunCli({dir, "--json"});
  EXPECT_EQ(out.code, 0) << out.err;
  EXPECT_NE(out.out.find("restarts.jsonl:3: not a record"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("heartbeat_late"), std::string::npos) << "the spool's record is read";
}

TEST(ReportCliTest, TornLastLineAndEmptyLinesAreSkippedWithAWarning) {
  const std::string dir = WriteSmallRun("torn");
  WriteFile(dir + "/metrics.jsonl",
            ReadFile(dir + "/metrics.jsonl") + "\n{\"step\":31,\"loss\":2.1,\"lr");
  auto r = RunCli({dir});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("metrics.jsonl:31: empty line (skipped)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metrics.jsonl:32: incomplete last line"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("steps          30 (30 records)"), std::string::npos) << r.out;
  // An empty metrics.jsonl (a run that has not finished a step yet) still reports.
  WriteFile(dir + "/metrics.jsonl", "");
  r = RunCli({dir});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("none recorded yet"), std::string::npos) << r.out;
}

// --- the SVG, looked at the way a person would ----------------------------------------------

// ~200 steps of ~30 s, checkpoints every 20 steps (3 s stall); a node crash after step 87
// (last checkpoint 80) with a 12-minute requeue; a rank crash after step 167 whose newest
// checkpoint (160) fails verification, so the run falls back to 140. GPU fields present.
std::string WriteRealisticRun() {
  const std::string dir = NewDir("realistic");
  auto st = [](int k) { return 30.0 + 3.0 * std::sin(0.7 * k) + (k % 37 == 0 ? 9.0 : 0.0); };
  std::string m, r, lost;
  r += Event(kT0, "started", "initial");
  double t = AddSteps(&m, 1, 80, kT0 + 45, 0, st, 20, 3.0, true);
  const double life1 = AddSteps(&lost, 81, 87, t, 0, st, 20, 3.0, true);  // re-done later
  r += Event(life1 + 35, "step_failed", "node_failure",
             "\"lost_s\":210,\"last_step\":87,\"last_step_time\":" + std::to_string(life1));
  r += Event(life1 + 35 + 720, "requeued", "node_failure",
             "\"lost_s\":210,\"last_step\":87,\"last_step_time\":" + std::to_string(life1));
  r += Event(life1 + 35 + 720 + 80, "resumed", "resume",
             "\"step\":80,\"dir\":\"/shared/run/checkpoints/step-00000080\",\"source\":\"disk\"");
  t = AddSteps(&m, 81, 140, life1 + 35 + 720 + 90, 1, st, 20, 3.0, true);
  const double life2 = AddSteps(&lost, 141, 167, t, 1, st, 20, 3.0, true);  // 160 checkpointed
  r += Event(life2 + 6, "restarted", "rank_failure",
             "\"lost_s\":230,\"last_step\":167,\"last_step_time\":" + std::to_string(life2));
  r += Event(life2 + 6 + 40, "fell_back", "corrupt_checkpoint",
             "\"step\":160,\"moved_to\":\"step-00000160.corrupt\",\"problem\":\"XXH3 mismatch\"");
  r += Event(life2 + 6 + 40 + 30, "resumed", "resume",
             "\"step\":140,\"dir\":\"/shared/run/checkpoints/step-00000140\",\"source\":\"disk\"");
  t = AddSteps(&m, 141, 200, life2 + 6 + 40 + 35, 2, st, 20, 3.0, true);
  r += Event(t + 20, "finished", "complete");
  WriteFile(dir + "/metrics.jsonl", m);
  WriteFile(dir + "/restarts.jsonl", r);
  return dir;
}

bool HaveRsvg() { return std::system("command -v rsvg-convert >/dev/null 2>&1") == 0; }

struct Png {
  uint32_t width = 0, height = 0, channels = 4;
  std::vector<uint8_t> pixels;  // unfiltered, RGB or RGBA
};

// Decodes the 8-bit RGB / RGBA non-interlaced PNGs rsvg-convert writes (enough for the checks).
bool DecodePng(const std::string& p, Png* out) {
  auto be32 = [&](size_t o) {
    return (uint32_t{static_cast<uint8_t>(p[o])} << 24) |
           (uint32_t{static_cast<uint8_t>(p[o + 1])} << 16) |
           (uint32_t{static_cast<uint8_t>(p[o + 2])} << 8) |
           uint32_t{static_cast<uint8_t>(p[o + 3])};
  };
  if (p.size() < 33 || p.compare(1, 3, "PNG") != 0) return false;
  out->width = be32(16);
  out->height = be32(20);
  if (p[24] != 8 || (p[25] != 6 && p[25] != 2) || p[28] != 0) return false;
  out->channels = p[25] == 6 ? 4 : 3;
  const size_t bpp = out->channels;
  std::string idat;
  for (size_t pos = 8; pos + 12 <= p.size();) {
    const uint32_t n = be32(pos);
    if (p.compare(pos + 4, 4, "IDAT") == 0) idat += p.substr(pos + 8, n);
    pos += 12 + n;
  }
  const size_t stride = size_t{out->width} * bpp;
  std::vector<uint8_t> raw((stride + 1) * out->height);
  uLongf len = raw.size();
  if (uncompress(raw.data(), &len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      len != raw.size()) {
    return false;
  }
  out->pixels.assign(stride * out->height, 0);
  for (size_t y = 0; y < out->height; ++y) {
    const uint8_t f = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* row = &out->pixels[y * stride];
    const uint8_t* up = y > 0 ? row - stride : nullptr;
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= bpp ? row[x - bpp] : 0, b = up ? up[x] : 0;
      const int c = up && x >= bpp ? up[x - bpp] : 0;
      int v = in[x];
      if (f == 1) v += a;
      if (f == 2) v += b;
      if (f == 3) v += (a + b) / 2;
      if (f == 4) {
        const int pp = a + b - c, pa = std::abs(pp - a), pb = std::abs(pp - b),
                  pc = std::abs(pp - c);
        v += pa <= pb && pa <= pc ? a : (pb <= pc ? b : c);
      }
      row[x] = static_cast<uint8_t>(v);
    }
  }
  return true;
}

struct Ink {
  int left = 1 << 30, right = -1, top = 1 << 30, bottom = -1;
};

Ink InkOf(const Png& png) {
  Ink ink;
  for (uint32_t y = 0; y < png.height; ++y) {
    for (uint32_t x = 0; x < png.width; ++x) {
      const uint8_t* px = &png.pixels[(size_t{y} * png.width + x) * png.channels];
      if (png.channels == 4 ? px[3] < 32 : px[0] > 223 && px[1] > 223 && px[2] > 223) continue;
      ink.left = std::min<int>(ink.left, x);
      ink.right = std::max<int>(ink.right, x);
      ink.top = std::min<int>(ink.top, y);
      ink.bottom = std::max<int>(ink.bottom, y);
    }
  }
  return ink;
}

std::string Unescape(std::string s) {
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&apos;", "'"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    for (size_t i; (i = s.find(from)) != std::string::npos;) s.replace(i, from.size(), to);
  }
  return s;
}

TEST(ReportSvgTest, RendersToPngOfTheRightSizeWithEveryLabelInside) {
  const std::string dir = WriteRealisticRun();
  const std::string svg = dir + "/timeline.svg", png = dir + "/timeline.png";
  auto r = RunCli({dir, "--svg", svg});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = ReadFile(svg);
  ASSERT_NE(text.find("viewBox='0 0 1000 600'"), std::string::npos);
  EXPECT_NE(text.find("node_failure"), std::string::npos);
  EXPECT_NE(text.find("fell back: step 160"), std::string::npos);
  EXPECT_NE(text.find(">30 min<"), std::string::npos) << "time ticks in h/min";
  EXPECT_NE(text.find(">1 h 15 min<"), std::string::npos) << "time ticks in h/min";

  ASSERT_TRUE(HaveRsvg()) << "rsvg-convert is missing: install librsvg2-bin "
                             "(scripts/install-deps.sh installs it)";
  ASSERT_EQ(std::system(("rsvg-convert -o '" + png + "' '" + svg + "'").c_str()), 0);
  Png picture;
  ASSERT_TRUE(DecodePng(ReadFile(png), &picture));
  EXPECT_EQ(picture.width, 1000u);
  EXPECT_EQ(picture.height, 600u);

  // Every text element, rendered alone by rsvg-convert on a canvas 20 px larger on each
  // side (ink that leaves the picture shows there; one wholly outside has none): its ink
  // lies inside the original 1000 x 600 and within the width the layout assumed
  // (TextWidth), so no label is cut off or runs into its neighbour.
  const std::string root =
      "<svg xmlns='http://www.w3.org/2000/svg' width='1040' height='640' "
      "font-family='DejaVu Sans, Liberation Sans, Arial, sans-serif'><g "
      "transform='translate(20,20)'>";
  std::regex re("<text x='([-0-9.]+)' y='([-0-9.]+)' font-size='([0-9.]+)'[^>]*>([^<]*)</text>");
  int n = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it, ++n) {
    const std::string label = Unescape((*it)[4].str());
    const double x = std::stod((*it)[1]), fs = std::stod((*it)[3]);
    WriteFile(dir + "/one.svg", root + it->str() + "</g></svg>\n");
    ASSERT_EQ(std::system(("rsvg-convert -o '" + dir + "/one.png' '" + dir + "/one.svg'").c_str()),
              0);
    Png one;
    ASSERT_TRUE(DecodePng(ReadFile(dir + "/one.png"), &one));
    const Ink ink = InkOf(one);
    ASSERT_GE(ink.right, 0) << "no ink for '" << label << "'";
    EXPECT_GE(ink.left - 20, 0) << label;
    EXPECT_LE(ink.right - 20, 1000 - 1) << label;
    EXPECT_GE(ink.top - 20, 0) << label;
    EXPECT_LE(ink.bottom - 20, 600 - 1) << label;
    EXPECT_LE(ink.right - 20, x + report::TextWidth(label, fs)) << label;
  }
  EXPECT_GT(n, 20);
  EXPECT_EQ(text.find("<text", text.rfind("</text>") + 1), std::string::npos) << "unparsed text";
}

// ftrain's own detection (slurm/detect.sh): a spare replacement whose records carry when the
// node was declared dead and on what signs; a late heartbeat between steps (the node's slurmd
// answered, nothing restarted) is no interruption.
TEST(ReportTest, FtrainDetectionShowsItsTimeAndEvidence) {
  const std::string dir = NewDir("detect");
  std::string m;
  const double end = AddSteps(&m, 1, 10, kT0, 0, SmallSt, 5, 0.5);  // kT0 + 15.5
  AddSteps(&m, 11, 20, kT0 + 30, 0, SmallSt, 5, 0.5);
  WriteFile(dir + "/metrics.jsonl", m);
  char life[96];
  std::snprintf(life, sizeof(life), "\"last_step\":10,\"last_step_time\":%.3f,", end);
  const std::string detection =
      "\"detected\":" + std::to_string(end + 4.0) +
      ",\"detected_by\":\"ftrain\",\"evidence\":\"heartbeat silent 3.1 s (limit 3 s); slurmd "
      "127.0.0.1:7102 refused\"";
  WriteFile(dir + "/restarts.jsonl",
            Event(kT0, "started", "initial") +
                Event(kT0 + 5, "heartbeat_late", "none", "\"node\":\"n2\",\"silent_s\":3.2") +
                Event(end + 6, "step_failed", "node_failure",
                      std::string(life) + "\"node\":\"n2\",\"exit\":1," + detection) +
                Event(end + 6.5, "restarted", "node_failure",
                      "\"node\":\"n2\",\"spare\":\"n3\"," + detection));
  auto s = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->interruptions.size(), 1u);  // not the late heartbeat
  const auto& in = s->interruptions[0];
  EXPECT_EQ(in.cause, "node_failure");
  EXPECT_NEAR(*in.detected_at - in.failed_at, 4.0, 1e-3);  // the record's "detected", not its time
  EXPECT_EQ(in.detected_by, "ftrain");
  EXPECT_NE(in.evidence.find("slurmd 127.0.0.1:7102 refused"), std::string::npos) << in.evidence;
  std::ostringstream out;
  report::PrintReport(*s, out);
  EXPECT_NE(out.str().find("4.0 s after the failure (ftrain: heartbeats and a probe)"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("evidence               heartbeat silent 3.1 s"), std::string::npos)
      << out.str();
  std::ostringstream js;
  report::PrintReportJson(*s, js);
  EXPECT_NE(js.str().find("\"detected_by\": \"ftrain\""), std::string::npos) << js.str();
}

// Three of n2's four ranks named as stragglers (their records as the trainer writes them) are
// one node line in the report, with the excess of their mean busy time; n1's lone straggler
// stays a rank line.
TEST(ReportTest, MostRanksOfANodeStragglingNameTheNode) {
  const std::string dir = NewDir("straggler_node");
  std::string m;
  AddSteps(
      &m, 1, 9, kT0, 0, [](int) { return 1.0; }, 100, 0);
  const std::string hosts = R"("n1","n1","n1","n1","n2","n2","n2","n2")";
  auto named = [](int rank, const char* host, double busy) {
    return "{\"rank\":" + std::to_string(rank) + ",\"host\":\"" + host +
           "\",\"busy_s\":" + std::to_string(busy) + ",\"median_s\":0.2,\"cause\":\"compute_s\"}";
  };
  m += "{\"step\":10,\"loss\":2,\"step_time_s\":1,\"tokens_per_s\":4096,\"time\":" +
       std::to_string(kT0 + 10) +
       ",\"phases\":{\"median\":{\"compute_s\":0.2},\"max\":{\"compute_s\":0.31},"
       "\"busy_median_s\":0.2,\"busy_max_s\":0.31,\"slowest_rank\":6,\"slowest_host\":\"n2\"},"
       "\"ranks\":{\"host\":[" +
       hosts +
       "],\"compute_s\":[0.2,0.25,0.2,0.2,0.3,0.29,0.31,0.2]},"
       "\"stragglers\":[" +
       named(4, "n2", 0.30) + "," + named(5, "n2", 0.29) + "," + named(6, "n2", 0.31) + "," +
       named(1, "n1", 0.25) + "]}\n";
  WriteFile(dir + "/metrics.jsonl", m);
  auto r = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::ostringstream out;
  report::PrintReport(*r, out);
  // (0.30 + 0.29 + 0.31) / 3 = 0.30 against 0.2: +50 %; rank 1: 0.25 / 0.2: +25 %.
  const auto has = [&](const std::string& what) {
    return out.str().find(what) != std::string::npos;
  };
  EXPECT_TRUE(has("STRAGGLER: ") &&
              has("; node n2: ranks 4-6 (3 of its 4) at +50 % (from step 10: busy 0.300 s/step "
                  "against a median of 0.200 s, mostly compute_s); rank 1 on n1 at +25 %"))
      << out.str();
  EXPECT_FALSE(has("rank 4 on n2")) << out.str();
}

// RUN/commcheck.json made over other ranks or nodes than the run's (a record made by hand on
// one node, say): one warning naming the file and both figures, the same note on the link
// line, and the record still used for the figure. A matching record: no warning, no note.
TEST(ReportTest, CommcheckRecordOverOtherRanksOrNodesIsNamed) {
  auto write_run = [](const std::string& name, int record_ranks, int record_nodes) {
    const std::string dir = NewDir(name);
    std::string m;
    for (int k = 1; k <= 4; ++k) {
      // 8 ranks on 2 nodes; 0.4 s of compute and 0.3 s of exposed communication per 1 s step,
      // 8 MB sent per rank.
      m += "{\"step\":" + std::to_string(k) +
           ",\"loss\":2,\"step_time_s\":1,\"tokens_per_s\":4096,\"time\":" +
           std::to_string(kT0 + k) +
           ",\"phases\":{\"median\":{\"compute_s\":0.4,\"comm_wait_s\":0.3},"
           "\"max\":{\"compute_s\":0.4},\"busy_median_s\":0.7,\"busy_max_s\":0.7,"
           "\"comm_bytes\":8000000,\"nodes\":2},"
           "\"ranks\":{\"host\":[\"n1\",\"n1\",\"n1\",\"n1\",\"n2\",\"n2\",\"n2\",\"n2\"]}}\n";
    }
    WriteFile(dir + "/metrics.jsonl", m);
    // 2 GB/s: 8 MB take 0.004 s.
    WriteFile(dir + "/commcheck.json",
              "{\"world_size\":" + std::to_string(record_ranks) +
                  ",\"num_nodes\":" + std::to_string(record_nodes) +
                  ",\"backend\":\"gloo\",\"ok\":true,\"results\":[{\"collective\":"
                  "\"all_gather\",\"group\":\"world\",\"bytes\":16777216,\"busbw_gbps\":2.0}]}\n");
    return dir;
  };
  for (const auto& [ranks, nodes] : std::vector<std::pair<int, int>>{{2, 1}, {8, 1}, {4, 2}}) {
    const std::string dir = write_run("link_mismatch", ranks, nodes);
    auto r = report::AnalyzeRun(dir, Env::Default());
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::ostringstream out;
    report::PrintReport(*r, out);
    const std::string made = std::to_string(ranks) + " ranks on " + std::to_string(nodes) +
                             (nodes == 1 ? " node" : " nodes");
    int warned = 0;
    for (const std::string& w : r->warnings) {
      if (w.find("commcheck.json") == std::string::npos) continue;
      ++warned;
      EXPECT_EQ(w.rfind(dir + "/commcheck.json: ", 0), 0u) << w;
      EXPECT_NE(w.find("made over " + made + " but the run has 8 ranks on 2 nodes"),
                std::string::npos)
          << w;
    }
    EXPECT_EQ(warned, 1) << out.str();
    EXPECT_NE(out.str().find("at the 2.000 GB/s bus bandwidth"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("commcheck.json; not the run's 8 ranks on 2 nodes) moving them "
                             "takes 0.004 s per step"),
              std::string::npos)
        << out.str();
  }
  const std::string dir = write_run("link_match", 8, 2);
  auto r = report::AnalyzeRun(dir, Env::Default());
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::ostringstream out;
  report::PrintReport(*r, out);
  EXPECT_EQ(out.str().find("not the run's"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("link record was made over"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("over 8 ranks on 2 nodes, gloo, " + dir +
                           "/commcheck.json) moving them takes 0.004 s per step"),
            std::string::npos)
      << out.str();
}

}  // namespace
// `ftrain quarantine list|clear` (hole 6 of issue 44): a hang quarantine shows when it expires,
// an sdc one lasts until cleared; clear appends a "cleared" line (the history stays), after
// which the host is no longer listed and the report says who returned it.
CliResult RunQuarantineCli(std::vector<std::string> args) {
  args.insert(args.begin(), "quarantine");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int code = cli::RunQuarantine(static_cast<int>(argv.size()), argv.data());
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  return {code, out, err};
}

TEST(QuarantineCliTest, ListShowsExpiryAndClearAppendsACleanLine) {
  const std::string dir = WriteSmallRun("quarantine_cli");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string before = "{\"time\":" + std::to_string(now - 100) +
                             ",\"host\":\"gpu-a\",\"node\":0,\"rank\":1,\"step\":14,"
                             "\"cause\":\"hang\",\"hangs\":2,\"by_majority\":false}\n"
                             "{\"time\":" +
                             std::to_string(now - 50) +
                             ",\"host\":\"gpu-b\",\"node\":1,\"rank\":3,\"shard\":1,\"step\":9,"
                             "\"cause\":\"sdc\",\"by_majority\":true}\n";
  WriteFile(dir + "/quarantine.jsonl", before);
  unsetenv("FTRAIN_HANG_QUARANTINE_KEEP_S");
  auto list = RunQuarantineCli({"list", dir});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("2 host(s) kept out of this run now"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("gpu-a  cause hang, until " + report::IsoTime(now - 100 + 86400)),
            std::string::npos)
      << list.out;
  EXPECT_NE(list.out.find("gpu-b  cause sdc, until cleared"), std::string::npos) << list.out;
  // A hang line older than FTRAIN_HANG_QUARANTINE_KEEP_S keeps nobody out.
  setenv("FTRAIN_HANG_QUARANTINE_KEEP_S", "60", 1);
  list = RunQuarantineCli({"list", dir});
  EXPECT_NE(list.out.find("1 host(s) kept out"), std::string::npos) << list.out;
  setenv("FTRAIN_HANG_QUARANTINE_KEEP_S", "a day", 1);
  auto bad = RunQuarantineCli({"list", dir});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("FTRAIN_HANG_QUARANTINE_KEEP_S='a day'"), std::string::npos) << bad.err;
  unsetenv("FTRAIN_HANG_QUARANTINE_KEEP_S");
  // A host the file does not name is a mistake, named.
  auto typo = RunQuarantineCli({"clear", dir, "--host", "gpu-z"});
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("--host gpu-z"), std::string::npos) << typo.err;
  auto clear = RunQuarantineCli({"clear", dir, "--host", "gpu-b"});
  ASSERT_EQ(clear.code, 0) << clear.err;
  const std::string after = ReadFile(dir + "/quarantine.jsonl");
  ASSERT_EQ(after.rfind(before, 0), 0u) << "the history is appended to, never edited";
  const auto added = nlohmann::json::parse(after.substr(before.size()));
  EXPECT_EQ(added["host"], "gpu-b");
  EXPECT_EQ(added["cause"], "cleared");
  list = RunQuarantineCli({"list", dir});
  EXPECT_NE(list.out.find("1 host(s) kept out"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("cleared: gpu-b"), std::string::npos) << list.out;
  auto r = RunCli({dir});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("host gpu-b cleared by an operator (ftrain quarantine clear)"),
            std::string::npos)
      << r.out;
}

}  // namespace ftrain
