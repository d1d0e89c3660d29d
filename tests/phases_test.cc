// Where the time goes, through real processes (`ftrain launch`, tiny model, Gloo):
//   - train.profile_steps=3:4 writes one Chrome trace per rank into `ftrain paths --get
//     profile`; each parses as JSON (nlohmann) and holds the named ranges (units,
//     collectives, optimizer) and "ftrain/step N" for exactly steps 3 and 4;
//   - a run fed over http through a private nginx with limit_rate is reported data-bound by
//     `ftrain report --json`, the same run from the local directory is not, and both records
//     carry every rank's phases; its SVG has the phases panel (rendered by rsvg-convert);
//     the http run's report shows the read latency p50/p95 (checked against nginx's own
//     $request_time), the local one none;
//   - the exposed-communication line holds the step's bytes against a real commcheck record.
// Label: multiproc. About 20 s.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace ftrain::testing {
namespace {

std::string ReadAll(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class PhasesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("ftrain-phases-test");
    data_ = dir_->path() + "/data";
    auto r = PackLicenses(data_, "--shard-rows 64");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static CommandResult Train(const std::string& run, const std::string& data,
                             const std::string& extra) {
    return RunCommand(Ftrain() + " launch --nproc 2 --grace-s 2 -- train --config " +
                          FTRAIN_SOURCE_DIR + "/configs/tiny.cfg --data.path=" + data +
                          " --run.dir=" + run +
                          " --ckpt.every_steps=0 --ckpt.every_minutes=0 --ckpt.save_final=false "
                          "--metrics.rank_phases_every=5 " +
                          extra,
                      300);
  }
  static nlohmann::json Report(const std::string& run) {
    auto r = RunCommand(Ftrain() + " report " + run + " --json 2>/dev/null", 60);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  }
  static TempDir* dir_;
  static std::string data_;
};
TempDir* PhasesTest::dir_ = nullptr;
std::string PhasesTest::data_;

TEST_F(PhasesTest, ProfilerTraceHoldsTheNamedRangesOfExactlyTheChosenSteps) {
  const std::string run = dir_->path() + "/profiled";
  auto r = Train(run, data_, "--train.steps=6 --train.profile_steps=3:4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto paths = RunCommand(Ftrain() + " paths " + run + " --get profile", 30);
  ASSERT_EQ(paths.exit_code, 0) << paths.output;
  std::string dir = paths.output.substr(0, paths.output.find('\n'));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir + "/trace-rank" + std::to_string(rank) + ".json";
    const nlohmann::json trace = nlohmann::json::parse(ReadAll(path), nullptr, false);
    ASSERT_FALSE(trace.is_discarded()) << path << " is not JSON";
    std::set<std::string> names;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.contains("name") && e["name"].is_string()) names.insert(e["name"].get<std::string>());
    }
    std::set<std::string> steps;
    for (const auto& n : names) {
      if (n.rfind("ftrain/step ", 0) == 0) steps.insert(n);
    }
    EXPECT_EQ(steps, (std::set<std::string>{"ftrain/step 3", "ftrain/step 4"})) << path;
    for (const char* want : {"fsdp/forward layer0", "fsdp/backward layer1", "fsdp/optimizer",
                             "fsdp/wait all-gather layer1", "fsdp/wait reduce-scatter layer0",
                             "ftrain/boundary all-reduce"}) {
      EXPECT_EQ(names.count(want), 1u) << want << " missing from " << path;
    }
    EXPECT_GT(names.count("aten::mm") + names.count("aten::matmul"), 0u) << "no CPU ops";
  }
}

// A private nginx serving `root` on a loopback port at `rate` bytes/s per connection; stopped
// (by PID) in the destructor.
class RateLimitedNginx {
 public:
  RateLimitedNginx(const std::string& root, const std::string& rate) {
    port_ = FreePort();
    const std::string d = dir_.path();
    std::ofstream(d + "/nginx.conf")
        << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d
        << "/nginx.pid;\nerror_log " << d << "/error.log;\nevents { worker_connections 64; }\n"
        << "http {\n  log_format t '$status $request_time $http_range $body_bytes_sent';\n"
        << "  access_log " << d << "/access.log t;\n  client_body_temp_path " << d
        << "/b;\n  proxy_temp_path " << d << "/p;\n  fastcgi_temp_path " << d
        << "/f;\n  uwsgi_temp_path " << d << "/u;\n  scgi_temp_path " << d
        << "/s;\n  default_type application/octet-stream;\n  server {\n    listen 127.0.0.1:"
        << port_ << ";\n    root " << root << ";\n    limit_rate " << rate << ";\n  }\n}\n";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("nginx", "nginx", "-e", (d + "/error.log").c_str(), "-p", d.c_str(), "-c",
               (d + "/nginx.conf").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 100 && !Up(); ++i) ::usleep(50 * 1000);
  }
  ~RateLimitedNginx() {
    if (pid_ > 0) SignalAndReap(pid_, SIGTERM);
  }
  bool Up() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string error_log() const { return ReadAll(dir_.path() + "/error.log"); }
  // nginx's own $request_time (ms resolution) of every range request it answered in full
  // (206, all bytes of "bytes=A-B" sent: not the reads a reader cancelled at its shutdown).
  std::vector<double> range_request_times() const {
    std::istringstream in(ReadAll(dir_.path() + "/access.log"));
    std::vector<double> v;
    std::regex range("bytes=([0-9]+)-([0-9]+)");
    for (std::string status, t, r, sent; in >> status >> t >> r >> sent;) {
      std::smatch m;
      if (status != "206" || !std::regex_match(r, m, range)) continue;
      if (std::stoull(m[2]) - std::stoull(m[1]) + 1 == std::stoull(sent)) v.push_back(std::stod(t));
    }
    return v;
  }

 private:
  TempDir dir_{"ftrain-phases-nginx"};
  int port_ = 0;
  pid_t pid_ = -1;
};

// The report's SVG of a run with phases: 270 px taller than the timeline alone, rendered by
// rsvg-convert to a PNG of that size; the panel's title, one heat-strip row per rank and the
// phase legend are there, and every panel label lies inside the picture's width.
void ExpectPhasesPanel(const std::string& run, int ranks) {
  const std::string svg = run + "/report.svg", png = run + "/report.png";
  auto r = RunCommand(Ftrain() + " report " + run + " --svg " + svg, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = ReadAll(svg);
  EXPECT_TRUE(Contains(text, "viewBox='0 0 1000 870'")) << "no room for the phases panel";
  EXPECT_TRUE(Contains(text, "where the time goes")) << text;
  for (const char* label : {">data wait<", ">compute<", ">exposed comm<", ">boundary wait<"}) {
    EXPECT_TRUE(Contains(text, label)) << label;
  }
  for (int k = 0; k < ranks; ++k) {
    EXPECT_TRUE(Contains(text, ">r" + std::to_string(k) + " ")) << "no heat-strip row " << k;
  }
  std::regex re("<text x='([-0-9.]+)' y='([-0-9.]+)'");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    EXPECT_GE(x, 0) << it->str();
    EXPECT_LT(x, 1000) << it->str();
    EXPECT_LT(y, 870) << it->str();
  }
  if (RunCommand("command -v rsvg-convert", 10).exit_code != 0) {
    ADD_FAILURE() << "rsvg-convert is missing: install librsvg2-bin";
    return;
  }
  ASSERT_EQ(RunCommand("rsvg-convert -o " + png + " " + svg, 60).exit_code, 0);
  const std::string head = ReadAll(png).substr(0, 24);
  ASSERT_EQ(head.substr(1, 3), "PNG");
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(head[at])) << 24) | (uint32_t(uint8_t(head[at + 1])) << 16) |
           (uint32_t(uint8_t(head[at + 2])) << 8) | uint32_t(uint8_t(head[at + 3]));
  };
  EXPECT_EQ(be32(16), 1000u);
  EXPECT_EQ(be32(20), 870u);
}

// The http run's read latency in `ftrain report` (JSON and text): p50 > 0, p95 >= p50, and
// both near the same percentiles (nearest rank) of nginx's own $request_time over the range
// requests it answered (both ranks read alike ranges; ftrain's clock adds the client side
// and nginx's has ms resolution, so a loose band).
void ExpectReadLatency(const nlohmann::json& tb, const std::string& text,
                       std::vector<double> nginx_times) {
  ASSERT_TRUE(tb.contains("read_latency")) << tb.dump(2);
  const double p50 = tb["read_latency"]["p50_s"].get<double>();
  const double p95 = tb["read_latency"]["p95_s"].get<double>();
  EXPECT_GT(p50, 0);
  EXPECT_GE(p95, p50);
  EXPECT_GT(tb["read_latency"]["requests"].get<int64_t>(), 0);
  EXPECT_TRUE(Contains(text, "read latency p50 ")) << text;
  ASSERT_FALSE(nginx_times.empty()) << "nginx logged no complete range request";
  std::sort(nginx_times.begin(), nginx_times.end());
  auto nearest_rank = [&](double q) {
    const size_t n = nginx_times.size();
    return nginx_times[std::min(n - 1, static_cast<size_t>(std::ceil(q * double(n))) - 1)];
  };
  for (auto [ours, ref] : {std::pair{p50, nearest_rank(0.5)}, std::pair{p95, nearest_rank(0.95)}}) {
    EXPECT_GT(ours, 0.5 * ref - 0.002) << "nginx " << ref << "; " << tb.dump(2);
    EXPECT_LT(ours, 2 * ref + 0.05) << "nginx " << ref << "; " << tb.dump(2);
  }
}

TEST_F(PhasesTest, ARunFedThroughARateLimitedServerIsReportedDataBoundAHealthyOneIsNot) {
  if (RunCommand("command -v nginx", 10).exit_code != 0) {
    GTEST_SKIP() << "nginx is not installed (scripts/install-deps.sh installs nginx-light)";
  }
  const std::string healthy = dir_->path() + "/healthy";
  auto r = Train(healthy, data_, "--train.steps=20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json h = Report(healthy);
  EXPECT_FALSE(h["time_breakdown"]["data_bound"].get<bool>()) << h["time_breakdown"].dump(2);
  // Local files: no read latency anywhere.
  EXPECT_FALSE(h["time_breakdown"].contains("read_latency")) << h["time_breakdown"].dump(2);
  EXPECT_FALSE(Contains(ReadAll(healthy + "/metrics.jsonl"), "data_read_p50_s"));

  RateLimitedNginx nginx(data_, "16k");
  ASSERT_TRUE(nginx.Up()) << "nginx did not start:\n" << nginx.error_log();
  const std::string slow = dir_->path() + "/slow";
  r = Train(slow, nginx.url(), "--train.steps=20 --data.prefetch_depth=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json s = Report(slow);
  EXPECT_TRUE(s["time_breakdown"]["data_bound"].get<bool>()) << s["time_breakdown"].dump(2);
  auto text = RunCommand(Ftrain() + " report " + slow, 60);
  EXPECT_TRUE(Contains(text.output, "DATA-BOUND")) << text.output;
  ExpectReadLatency(s["time_breakdown"], text.output, nginx.range_request_times());
  // Every step carries the phases of both ranks; every 5th the full per-rank vector.
  std::istringstream lines(ReadAll(slow + "/metrics.jsonl"));
  int n = 0, full = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("phases")) << line;
    if (j.contains("ranks")) {
      ++full;
      EXPECT_EQ(j["step"].get<int>() % 5, 0) << line;
      EXPECT_EQ(j["ranks"]["data_wait_s"].size(), 2u) << line;
    }
  }
  EXPECT_EQ(n, 20);
  EXPECT_EQ(full, 4);
  ExpectPhasesPanel(slow, 2);
}

// The exposed-communication line holds the step's collective bytes against the link a real
// `ftrain commcheck --record RUN/commcheck.json` measured: the record's bus bandwidth (world
// group, largest size, the lower of all_gather and reduce_scatter) and the seconds moving the
// mean comm_bytes of metrics.jsonl takes at it. Without a record the line says how to make
// one; a broken record is one warning naming the file, and the rest of the report renders.
TEST_F(PhasesTest, CommunicationLineHoldsTheStepsBytesAgainstTheCommcheckRecord) {
  const std::string run = dir_->path() + "/run-link", record = run + "/commcheck.json";
  auto r = Train(run, data_, "--train.steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto comm_item = [](const nlohmann::json& rep) { return rep["time_breakdown"]["items"][1]; };
  EXPECT_TRUE(Contains(comm_item(Report(run))["figure"].get<std::string>(),
                       "no record of the link: `ftrain commcheck --sizes 16M --record " + record))
      << comm_item(Report(run)).dump(2);

  r = RunCommand(Ftrain() + " launch --nproc 2 -- commcheck --sizes 64K,1M --iters 1 " +
                     "--warmup 0 --no-groups --record " + record,
                 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rec = nlohmann::json::parse(ReadAll(record));
  int64_t bytes = 0;
  double bw = 0;
  for (const auto& row : rec["results"]) {
    if (row["group"] != "world" ||
        (row["collective"] != "all_gather" && row["collective"] != "reduce_scatter")) {
      continue;
    }
    const int64_t b = row["bytes"].get<int64_t>();
    const double v = row["busbw_gbps"].get<double>();
    if (b > bytes || (b == bytes && v < bw)) bytes = b, bw = v;
  }
  ASSERT_EQ(bytes, 1 << 20) << rec.dump(2);
  double comm_bytes = 0;
  int steps = 0;
  std::ifstream metrics(run + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("phases")) continue;
    comm_bytes += j["phases"]["comm_bytes"].get<double>();
    ++steps;
  }
  ASSERT_GT(comm_bytes, 0);
  const auto rep = Report(run);
  EXPECT_EQ(rep["time_breakdown"]["link"]["busbw_gbps"].get<double>(), bw);
  char want[160];
  std::snprintf(want, sizeof(want),
                "at the %.3f GB/s bus bandwidth `ftrain commcheck` measured (%s of 1 MiB over 2 "
                "ranks on 1 node, gloo, %s) moving them takes %.3f s per step",
                bw, rep["time_breakdown"]["link"]["collective"].get<std::string>().c_str(),
                record.c_str(), comm_bytes / steps / (bw * 1e9));
  EXPECT_TRUE(Contains(comm_item(rep)["figure"].get<std::string>(), want))
      << want << "\n"
      << comm_item(rep).dump(2);

  std::ofstream(record) << "{\"results\": [";  // torn
  r = RunCommand(Ftrain() + " report " + run, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, record + ": is not JSON: the link is left out")) << r.output;
  EXPECT_TRUE(Contains(r.output, "6. time lost to failures")) << r.output;
}

}  // namespace
}  // namespace ftrain::testing
