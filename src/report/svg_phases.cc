// Run report, part 5: the SVG panel under the timeline that shows where the time goes: the
// median rank's step phases stacked over the steps, and every rank's busy time (data wait +
// compute + optimizer) against the step's median as a heat strip, one row per rank, from the
// steps that carry the full per-rank vector (metrics.rank_phases_every). Drawn only when the
// records have phases; absolute coordinates from `top` down.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "report/time_breakdown.h"

namespace ftrain::report {
namespace {

constexpr double kW = 1000;
constexpr double kL = 72, kR = 976;
constexpr double kPanelH = 270;
constexpr double kStackT = 40, kStackB = 160;  // stacked phases (relative to top)
constexpr double kHeatT = 186, kHeatMaxH = 48;
constexpr double kFont = 11;
const char* const kColors[records::kNumPhases] = {"#e67e22", "#2e86c1", "#8e44ad", "#27ae60",
                                                  "#c0392b", "#7f8c8d", "#d5d8dc"};
const char* const kLabels[records::kNumPhases] = {
    "data wait", "compute", "exposed comm", "optimizer", "boundary wait", "ckpt stall", "other"};

std::string Num(double v, const char* fmt = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string Esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') {
      o += "&amp;";
    } else if (c == '<') {
      o += "&lt;";
    } else if (c == '>') {
      o += "&gt;";
    } else if (c == '\'') {
      o += "&apos;";
    } else {
      o += c;
    }
  }
  return o;
}

void Text(std::ostream& o, double x, double y, const std::string& s, const char* anchor = "start",
          double font = kFont, const char* fill = "#333") {
  const double w = TextWidth(s, font);
  double left = std::string(anchor) == "end" ? x - w : x;
  left = std::clamp(left, 2.0, std::max(2.0, kW - 2 - w));
  o << "<text x='" << Num(left) << "' y='" << Num(y) << "' font-size='" << Num(font) << "' fill='"
    << fill << "'>" << Esc(s) << "</text>\n";
}

// White (the median) to deep red (half again the median or more).
std::string HeatColor(double ratio) {
  const double a = std::clamp((ratio - 1.0) / 0.5, 0.0, 1.0);
  const int r = static_cast<int>(std::lround(247 - a * (247 - 178)));
  const int g = static_cast<int>(std::lround(247 - a * (247 - 24)));
  const int b = static_cast<int>(std::lround(247 - a * (247 - 43)));
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", r, g, b);
  return buf;
}

struct StepAxis {
  int64_t first = 0, last = 1;
  double X(int64_t step) const {
    return kL + static_cast<double>(step - first) /
                    static_cast<double>(std::max<int64_t>(1, last - first)) * (kR - kL);
  }
};

void DrawStack(std::ostream& o, const std::vector<const records::StepMetrics*>& steps,
               const StepAxis& ax, double top) {
  // Bins of about two pixels: each bar is the mean of its steps' median phases.
  const size_t bins = std::min<size_t>(steps.size(), static_cast<size_t>((kR - kL) / 2));
  std::vector<std::array<double, records::kNumPhases>> mean(bins);
  std::vector<int64_t> from(bins), to(bins);
  double ymax = 0;
  for (size_t b = 0; b < bins; ++b) {
    const size_t i0 = b * steps.size() / bins, i1 = (b + 1) * steps.size() / bins;
    mean[b].fill(0);
    for (size_t i = i0; i < i1; ++i) {
      for (int p = 0; p < records::kNumPhases; ++p) mean[b][p] += steps[i]->phases->median[p];
    }
    double total = 0;
    for (int p = 0; p < records::kNumPhases; ++p)
      total += mean[b][p] /= static_cast<double>(i1 - i0);
    ymax = std::max(ymax, total);
    from[b] = steps[i0]->step - 1;
    to[b] = steps[i1 - 1]->step;
  }
  if (ymax <= 0) ymax = 1;
  const double y0 = top + kStackB, h = kStackB - kStackT;
  for (size_t b = 0; b < bins; ++b) {
    const double x0 = ax.X(from[b]), x1 = std::max(ax.X(to[b]), x0 + 0.8);
    double acc = 0;
    for (int p = 0; p < records::kNumPhases; ++p) {
      if (mean[b][p] <= 0) continue;
      const double ya = y0 - (acc + mean[b][p]) / ymax * h, yb = y0 - acc / ymax * h;
      o << "<rect x='" << Num(x0) << "' y='" << Num(ya) << "' width='" << Num(x1 - x0)
        << "' height='" << Num(std::max(yb - ya, 0.2)) << "' fill='" << kColors[p] << "'/>\n";
      acc += mean[b][p];
    }
  }
  o << "<rect x='" << kL << "' y='" << Num(top + kStackT) << "' width='" << kR - kL << "' height='"
    << h << "' fill='none' stroke='#888'/>\n";
  Text(o, kL - 6, top + kStackT + 10, Num(ymax, "%.3g") + " s", "end");
  Text(o, kL - 6, y0, "0", "end");
}

void DrawHeat(std::ostream& o, const std::vector<const records::StepMetrics*>& full,
              const StepAxis& ax, double top) {
  const double y0 = top + kHeatT;
  if (full.empty()) {
    Text(o, kL, y0 + 14,
         "no per-rank vectors recorded (metrics.rank_phases_every = 0, or fewer "
         "steps than it)",
         "start", kFont, "#888");
    return;
  }
  const size_t ranks = full.back()->phases->ranks.size();
  const double row = std::min(12.0, kHeatMaxH / static_cast<double>(std::max<size_t>(1, ranks)));
  for (size_t c = 0; c < full.size(); ++c) {
    const records::PhaseSummary& ph = *full[c]->phases;
    const int64_t prev = c > 0 ? full[c - 1]->step : ax.first;
    const double x0 = ax.X(prev), x1 = std::max(ax.X(full[c]->step), x0 + 2);
    for (size_t r = 0; r < ph.ranks.size() && r < ranks; ++r) {
      const auto& v = ph.ranks[r].s;
      const double busy = v[0] + v[1] + v[3] + v[6];
      const double ratio = ph.busy_median_s > 0 ? busy / ph.busy_median_s : 1;
      o << "<rect x='" << Num(x0) << "' y='" << Num(y0 + static_cast<double>(r) * row)
        << "' width='" << Num(x1 - x0) << "' height='" << Num(row) << "' fill='" << HeatColor(ratio)
        << "'/>\n";
    }
  }
  o << "<rect x='" << kL << "' y='" << Num(y0) << "' width='" << kR - kL << "' height='"
    << Num(row * static_cast<double>(ranks)) << "' fill='none' stroke='#888'/>\n";
  if (row >= 10) {
    const auto& hosts = full.back()->phases->hosts;
    for (size_t r = 0; r < ranks; ++r) {
      Text(o, kL - 4, y0 + (static_cast<double>(r) + 1) * row - 2,
           "r" + std::to_string(r) + (r < hosts.size() ? " " + hosts[r].substr(0, 6) : ""), "end",
           9);
    }
  } else {
    Text(o, kL - 4, y0 + 10, "ranks", "end", 9);
  }
}

void DrawLegend(std::ostream& o, double y) {
  double x = kL;
  for (int p = 0; p < records::kNumPhases; ++p) {
    o << "<rect x='" << Num(x) << "' y='" << Num(y - 9) << "' width='12' height='10' fill='"
      << kColors[p] << "'/>\n";
    Text(o, x + 16, y, kLabels[p]);
    x += 16 + TextWidth(kLabels[p], kFont) + 12;
  }
  o << "<rect x='" << Num(x) << "' y='" << Num(y - 9) << "' width='12' height='10' fill='"
    << HeatColor(1.5) << "'/>\n";
  Text(o, x + 16, y, "busy 1.5x median");
}

}  // namespace

double PhasesPanelHeight(const RunSummary& r) {
  for (const auto& s : r.steps) {
    if (s.phases) return kPanelH;
  }
  return 0;
}

std::string RenderPhasesPanel(const RunSummary& r, double top) {
  std::vector<const records::StepMetrics*> steps, full;
  for (const auto& s : r.steps) {
    if (!s.phases) continue;
    steps.push_back(&s);
    if (!s.phases->ranks.empty()) full.push_back(&s);
  }
  std::ostringstream o;
  if (steps.empty()) return "";
  StepAxis ax;
  ax.first = steps.front()->step - 1;
  ax.last = std::max(steps.back()->step, ax.first + 1);
  Text(o, kL, top + 24,
       "where the time goes: the median rank's step phases per step, and each rank's busy time "
       "against the median",
       "start", 12, "#222");
  DrawStack(o, steps, ax, top);
  Text(o, kL, top + kStackB + 16, "step " + std::to_string(ax.first));
  Text(o, kR, top + kStackB + 16, "step " + std::to_string(ax.last), "end");
  DrawHeat(o, full, ax, top);
  DrawLegend(o, top + kPanelH - 12);
  return o.str();
}

}  // namespace ftrain::report
