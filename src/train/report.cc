// Run report: summary text and an SVG timeline.
#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ckpt/store.h"
#include "core/env.h"

namespace ftrain::train {
namespace {

using nlohmann::json;

struct RunRecords {
  std::vector<json> steps;     // metrics.jsonl, in order
  std::vector<json> restarts;  // restarts.jsonl
  std::vector<ckpt::CheckpointInfo> checkpoints;
};

StatusOr<RunRecords> Load(const std::string& run_dir) {
  RunRecords r;
  const std::string metrics = JoinPath(run_dir, "metrics.jsonl");
  std::ifstream in(metrics);
  if (!in) {
    return Status::InvalidArgument("'" + run_dir +
                                   "' has no metrics.jsonl: not an ftrain run directory");
  }
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) {
      return Status::Corruption(metrics + ":" + std::to_string(line_no) + ": not a metrics record");
    }
    r.steps.push_back(std::move(j));
  }
  std::ifstream rs(JoinPath(run_dir, "restarts.jsonl"));
  while (std::getline(rs, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) r.restarts.push_back(std::move(j));
  }
  // The checkpoint root the run used: ckpt.root from the resolved config the trainer wrote
  // (a custom root is not under the run directory), else the default.
  std::string root = JoinPath(run_dir, "checkpoints");
  std::ifstream cfg(JoinPath(run_dir, "config.resolved.cfg"));
  const std::string key = "ckpt.root = ";
  while (std::getline(cfg, line)) {
    if (line.rfind(key, 0) == 0 && line.size() > key.size()) root = line.substr(key.size());
  }
  ckpt::CheckpointStore store(root);
  auto list = store.List();
  if (list.ok()) r.checkpoints = *list;
  return r;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(v.size() - 1, i)];
}

}  // namespace

namespace {
Status PrintReportImpl(const std::string& run_dir, std::ostream& out);
Status WriteReportSvgImpl(const std::string& run_dir, const std::string& svg_path);
}  // namespace

// Records are JSON written by the trainer and train.sh, but a run directory is input: a line
// with a mistyped field is an error naming the run directory, never an exception.
Status PrintReport(const std::string& run_dir, std::ostream& out) {
  try {
    return PrintReportImpl(run_dir, out);
  } catch (const std::exception& e) {
    return Status::Corruption("a record in '" + run_dir +
                              "' (metrics.jsonl or restarts.jsonl) is malformed: " + e.what());
  }
}

Status WriteReportSvg(const std::string& run_dir, const std::string& svg_path) {
  try {
    return WriteReportSvgImpl(run_dir, svg_path);
  } catch (const std::exception& e) {
    return Status::Corruption("a record in '" + run_dir +
                              "' (metrics.jsonl or restarts.jsonl) is malformed: " + e.what());
  }
}

namespace {

Status PrintReportImpl(const std::string& run_dir, std::ostream& out) {
  FT_ASSIGN_OR_RETURN(RunRecords r, Load(run_dir));
  std::vector<double> step_time, tps, wait, comm;
  double stall_total = 0;
  int ckpts = 0;
  for (const auto& s : r.steps) {
    const double stall = s.value("ckpt_stall_s", 0.0);
    step_time.push_back(s.value("step_time_s", 0.0) - stall);
    tps.push_back(s.value("tokens_per_s", 0.0));
    wait.push_back(s.value("data_wait_s", 0.0));
    comm.push_back(s.value("comm_s", 0.0));
    stall_total += stall;
    if (stall > 0) ++ckpts;
  }
  const json& last = r.steps.empty() ? json::object() : r.steps.back();
  out << std::fixed;
  out << "run            " << run_dir << "\n"
      << "steps          " << last.value("step", 0) << " (" << r.steps.size() << " recorded)\n"
      << "tokens         " << last.value("tokens", int64_t{0}) << "\n"
      << "final loss     " << std::setprecision(4) << last.value("loss", 0.0) << "\n"
      << std::setprecision(3) << "step time      median " << Percentile(step_time, 0.5)
      << " s, p95 " << Percentile(step_time, 0.95) << " s (without checkpoint stalls)\n"
      << std::setprecision(0) << "throughput     median " << Percentile(tps, 0.5) << " tokens/s\n"
      << std::setprecision(4) << "data wait      median " << Percentile(wait, 0.5) << " s/step\n"
      << "communication  median " << Percentile(comm, 0.5) << " s/step (waiting on collectives)\n"
      << std::setprecision(2) << "checkpoints    " << ckpts
      << " written by this run's steps, stall total " << stall_total << " s; "
      << r.checkpoints.size() << " in the root now\n";
  int restarts = 0;
  double lost = 0;
  for (const auto& e : r.restarts) {
    const std::string ev = e.value("event", "");
    if (ev == "requeued" || ev == "restarted") {
      ++restarts;
      lost += e.value("lost_s", 0.0);
    }
  }
  out << "restarts       " << restarts << ", work lost " << std::setprecision(0) << lost << " s\n";
  for (const auto& e : r.restarts) {
    out << "  " << std::setprecision(0) << e.value("time", 0.0) << " job " << e.value("job", "")
        << " " << e.value("event", "") << " (" << e.value("cause", "") << ")";
    if (e.contains("lost_s") && e["lost_s"].is_number()) {
      out << ", lost " << e["lost_s"].get<double>() << " s";
    }
    if (e.value("event", "") == "fell_back") {
      out << ": step " << e.value("step", int64_t{-1}) << " failed verification, moved to "
          << e.value("moved_to", "") << " (" << e.value("problem", "") << ")";
    }
    out << "\n";
  }
  return Status::Ok();
}

Status WriteReportSvgImpl(const std::string& run_dir, const std::string& svg_path) {
  FT_ASSIGN_OR_RETURN(RunRecords r, Load(run_dir));
  const double W = 900, H = 420, left = 60, right = 60, top = 40, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  double t0 = 1e300, t1 = -1e300, lmin = 1e300, lmax = -1e300, tmax = 1;
  for (const auto& s : r.steps) {
    const double t = s.value("time", 0.0);
    t0 = std::min(t0, t);
    t1 = std::max(t1, t);
    lmin = std::min(lmin, s.value("loss", 0.0));
    lmax = std::max(lmax, s.value("loss", 0.0));
    tmax = std::max(tmax, s.value("tokens_per_s", 0.0));
  }
  for (const auto& e : r.restarts) {
    t0 = std::min(t0, e.value("time", t0));
    t1 = std::max(t1, e.value("time", t1));
  }
  if (r.steps.empty() || t1 <= t0) t1 = t0 + 1;
  if (lmax <= lmin) lmax = lmin + 1;
  auto X = [&](double t) { return left + (t - t0) / (t1 - t0) * pw; };
  auto YL = [&](double l) { return top + (lmax - l) / (lmax - lmin) * ph; };
  auto YT = [&](double v) { return top + (1 - v / tmax) * ph; };
  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
      << "' font-family='sans-serif' font-size='12'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='" << left << "' y='22' font-size='15'>ftrain run: " << run_dir
      << " (loss and throughput over wall time)</text>\n"
      << "<rect x='" << left << "' y='" << top << "' width='" << pw << "' height='" << ph
      << "' fill='none' stroke='#999'/>\n";
  auto polyline = [&](const char* key, const char* color, auto y) {
    svg << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    for (const auto& s : r.steps)
      svg << X(s.value("time", 0.0)) << "," << y(s.value(key, 0.0)) << " ";
    svg << "'/>\n";
  };
  polyline("tokens_per_s", "#9bc", YT);
  polyline("loss", "#c33", YL);
  for (const auto& s : r.steps) {
    if (s.value("ckpt_stall_s", 0.0) > 0) {
      const double x = X(s.value("time", 0.0));
      svg << "<line x1='" << x << "' y1='" << top + ph << "' x2='" << x << "' y2='" << top + ph - 8
          << "' stroke='#383'><title>checkpoint at step " << s.value("step", 0)
          << "</title></line>\n";
    }
  }
  int marks = 0;
  for (const auto& e : r.restarts) {
    const std::string ev = e.value("event", "");
    if (ev != "requeued" && ev != "restarted" && ev != "step_failed") continue;
    const double x = X(e.value("time", t0));
    svg << "<line x1='" << x << "' y1='" << top << "' x2='" << x << "' y2='" << top + ph
        << "' stroke='#e80' stroke-dasharray='4,3'/><text x='" << x + 3 << "' y='"
        << top + 14 + 14 * (marks++ % 4) << "' fill='#e80'>" << ev << ": " << e.value("cause", "")
        << "</text>\n";
  }
  svg << std::setprecision(3) << "<text x='8' y='" << top + 10 << "' fill='#c33'>" << lmax
      << "</text><text x='8' y='" << top + ph << "' fill='#c33'>" << lmin << "</text>\n"
      << std::setprecision(0) << "<text x='" << W - right + 4 << "' y='" << top + 10
      << "' fill='#579'>" << tmax << " tok/s</text>\n"
      << "<text x='" << left << "' y='" << H - 15 << "'>red: loss; blue: tokens/s; green ticks: "
      << "checkpoints; orange: failures and restarts; " << std::setprecision(0) << (t1 - t0)
      << " s shown</text>\n</svg>\n";
  std::ofstream f(svg_path);
  if (!f) return Status::InvalidArgument("cannot write '" + svg_path + "'");
  f << svg.str();
  if (!f) return Status::IOError("writing '" + svg_path + "' failed");
  return Status::Ok();
}

}  // namespace

}  // namespace ftrain::train
