// Run report, part 3: a self-contained SVG timeline. Wall time runs left to right (ticks in
// s / min / h since the run's start); the upper panel is step progress, drawn only where
// steps happened (downtime is a gap), with re-done work shaded and its lost progress dashed,
// every failure marked where it happened and labelled with its cause, checkpoints as ticks;
// the lower panel is the loss. Every label is placed with a conservative width estimate
// (TextWidth) and clamped into the picture.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "report/run_report.h"
#include "report/time_breakdown.h"

namespace ftrain::report {
namespace {

constexpr double kW = 1000, kH = 600;
constexpr double kL = 72, kR = 976;           // plot area, x
constexpr double kLabelTop = 58, kRowH = 15;  // failure labels: 3 rows above panel 1
constexpr int kRows = 3;
constexpr double kP1T = 108, kP1B = 388;  // panel 1: step progress
constexpr double kP2T = 408, kP2B = 498;  // panel 2: loss
constexpr double kFont = 11;
constexpr const char* kFailColor = "#c0392b";
constexpr const char* kFallColor = "#7d3c98";

std::string Esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '\'':
        o += "&apos;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string Num(double v, const char* fmt = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Cuts `s` (keeping its end when `keep_end`) until it fits in `max_w`.
std::string Fit(std::string s, double font, double max_w, bool keep_end = false) {
  while (s.size() > 4 && TextWidth(s, font) > max_w) {
    s = keep_end ? "..." + s.substr(4) : s.substr(0, s.size() - 4) + "...";
  }
  return s;
}

class Svg {
 public:
  // Text at (x, y) with anchor start/middle/end, moved inside the picture if it would leave.
  void Text(double x, double y, const std::string& s, double font = kFont,
            const std::string& anchor = "start", const std::string& fill = "#222",
            const std::string& extra = "") {
    const double w = TextWidth(s, font);
    double left = anchor == "start" ? x : anchor == "middle" ? x - w / 2 : x - w;
    left = std::clamp(left, 2.0, std::max(2.0, kW - 2 - w));
    y = std::clamp(y, font + 2, kH - 4);
    out_ << "<text x='" << Num(left) << "' y='" << Num(y) << "' font-size='" << Num(font)
         << "' fill='" << fill << "'" << extra << ">" << Esc(s) << "</text>\n";
  }
  std::ostringstream& raw() { return out_; }

 private:
  std::ostringstream out_;
};

// Tick spacing and labels for a span of wall time: the smallest step whose labels fit.
struct TimeTicks {
  double step = 1;
  // "0", "45 s", "1 min 30 s", "15 min", "1 h", "1 h 15 min", "36 h": the units the step
  // needs, nothing finer.
  static std::string Label(double t, double step) {
    const long long s = std::llround(t), h = s / 3600, m = (s / 60) % 60, sec = s % 60;
    char buf[48];
    if (s == 0) {
      return "0";
    } else if (step >= 3600) {
      std::snprintf(buf, sizeof(buf), "%lld h", h);
    } else if (step >= 60) {
      if (h == 0) {
        std::snprintf(buf, sizeof(buf), "%lld min", m);
      } else {
        std::snprintf(buf, sizeof(buf), m == 0 ? "%lld h" : "%lld h %lld min", h, m);
      }
    } else if (s >= 60) {
      std::snprintf(buf, sizeof(buf), sec == 0 ? "%lld min" : "%lld min %lld s", s / 60, sec);
    } else {
      std::snprintf(buf, sizeof(buf), "%lld s", sec);
    }
    return buf;
  }
};

double ChooseTimeStep(double span, double px) {
  static const double kSteps[] = {1,     2,     5,     10,    15,     30,    60,
                                  120,   300,   600,   900,   1800,   3600,  7200,
                                  10800, 21600, 43200, 86400, 172800, 604800};
  for (double s : kSteps) {
    if (span / s > 12) continue;
    double widest = 0;
    for (double t = 0; t <= span; t += s)
      widest = std::max(widest, TextWidth(TimeTicks::Label(t, s), kFont));
    if (widest + 12 <= s / span * px) return s;
  }
  return std::max(span, 1.0);
}

double NiceStep(double range, int max_ticks) {
  const double raw = range / max_ticks;
  const double mag = std::pow(10, std::floor(std::log10(std::max(raw, 1e-12))));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

// Failure / fallback labels in rows above panel 1: the first of `texts` (longest first) that
// fits in a row without overlapping, right of the marker or, near the right edge, left of it.
// Returns the baseline used, or nothing when even the shortest does not fit anywhere.
class LabelRows {
 public:
  std::optional<double> Place(Svg& svg, double x, const std::vector<std::string>& texts,
                              const std::string& color) {
    for (const auto& s : texts) {
      const double w = TextWidth(s, kFont);
      double left = x + 4 + w <= kW - 2 ? x + 4 : x - 4 - w;
      left = std::clamp(left, 2.0, std::max(2.0, kW - 2 - w));
      for (int row = 0; row < kRows; ++row) {
        bool free = true;
        for (const auto& [r, a, b] : used_) {
          if (r == row && left < b + 6 && a < left + w + 6) free = false;
        }
        if (!free) continue;
        used_.push_back({row, left, left + w});
        const double y = kLabelTop + kRowH * (row + 1);
        svg.Text(left, y, s, kFont, "start", color);
        return y;
      }
    }
    ++left_out_;
    return std::nullopt;
  }
  int left_out() const { return left_out_; }

 private:
  std::vector<std::tuple<int, double, double>> used_;
  int left_out_ = 0;
};

}  // namespace

double TextWidth(const std::string& text, double font_px) {
  // Advance widths of DejaVu Sans (the widest of the common sans-serif fonts; Liberation Sans
  // and Arial are narrower), in 1/1000 em, for ASCII 32..126, measured by rendering with
  // rsvg-convert. Anything else counts as 1 em. 8 percent on top, and 0.1 em for the ends.
  static constexpr int kAdvance[95] = {
      318,  401, 460, 838, 636, 951, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,
      636,  636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531,
      1000, 711, 686, 698, 770, 632, 576, 775, 752, 295, 295, 656, 557, 863, 748, 787,
      603,  787, 695, 635, 594, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500,
      500,  613, 635, 550, 635, 616, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
      635,  635, 394, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838,
  };
  double em = 0.1;
  for (unsigned char c : text) {
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte: not a character
    em += c >= 32 && c < 127 ? kAdvance[c - 32] / 1000.0 : 1.0;
  }
  return 1.08 * em * font_px;
}

namespace {

// The picture's scales: wall time to x, steps to y in panel 1, loss to y in panel 2.
struct Scales {
  const RunSummary& r;
  double span = 1, lmin = 0, lmax = 1, ystep = 1, ytop = 1;
  double X(double t) const { return kL + (t - r.start) / span * (kR - kL); }
  double YS(double step) const { return kP1B - step / ytop * (kP1B - kP1T); }
  double YL(double l) const { return kP2B - 6 - (l - lmin) / (lmax - lmin) * (kP2B - kP2T - 12); }
};

Scales MakeScales(const RunSummary& r) {
  Scales sc{r};
  sc.span = std::max(r.wall_s, 1.0);
  int64_t max_step = 1;
  if (!r.steps.empty()) {
    sc.lmin = sc.lmax = r.steps.front().loss;
    for (const auto& s : r.steps) {
      sc.lmin = std::min(sc.lmin, static_cast<double>(s.loss));
      sc.lmax = std::max(sc.lmax, static_cast<double>(s.loss));
    }
  }
  for (const auto& s : r.steps) max_step = std::max(max_step, s.step);
  for (const auto& in : r.interruptions) {
    max_step = std::max(max_step, in.resumed_step + in.redone_steps);
  }
  if (sc.lmax - sc.lmin < 1e-9) sc.lmax = sc.lmin + 1;
  sc.ystep = NiceStep(static_cast<double>(max_step), 6);
  sc.ytop = std::ceil(static_cast<double>(max_step) / sc.ystep) * sc.ystep;
  return sc;
}

// The opening tag, the background, the title and the one-line summary under it.
void DrawTitle(Svg& svg, const RunSummary& r, double height) {
  svg.raw() << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kW << "' height='" << height
            << "' viewBox='0 0 " << kW << " " << height
            << "' font-family='DejaVu Sans, Liberation Sans, Arial, sans-serif'>\n"
            << "<rect width='" << kW << "' height='" << height << "' fill='white'/>\n";
  svg.Text(kL, 24, Fit("ftrain run " + r.run_dir, 16, kW - kL - 8, true), 16);
  // The end without its date when the run ended the day it started.
  std::string end = IsoTime(r.end);
  if (end.compare(0, 11, IsoTime(r.start), 0, 11) == 0) end = end.substr(11);
  std::string sub =
      IsoTime(r.start) + " to " + end + ", wall " + HumanDuration(r.wall_s) + "; goodput " +
      std::to_string(static_cast<int>(std::lround(100 * r.goodput))) + " %; " +
      (r.lost_s >= 360 ? Num(r.lost_s / 3600, "%.2f") + " h" : HumanDuration(r.lost_s)) +
      " lost to " + std::to_string(r.interruptions.size()) + " interruption" +
      (r.interruptions.size() == 1 ? "" : "s");
  svg.Text(kL, 44, Fit(sub, 12, kW - kL - 8), 12, "start", "#444");
}

// Shaded re-done work and downtime, behind everything.
void DrawShading(Svg& svg, const Scales& sc) {
  auto& o = svg.raw();
  for (const auto& in : sc.r.interruptions) {
    const double a = sc.X(in.last_good_time), b = sc.X(in.failed_at);
    const double c = sc.X(in.down_until);
    for (auto [top, bot] : {std::pair{kP1T, kP1B}, std::pair{kP2T, kP2B}}) {
      if (b > a) {
        o << "<rect x='" << Num(a) << "' y='" << Num(top) << "' width='" << Num(b - a)
          << "' height='" << Num(bot - top) << "' fill='#f5a623' fill-opacity='0.30'/>\n";
      }
      o << "<rect x='" << Num(b) << "' y='" << Num(top) << "' width='" << Num(std::max(c - b, 0.5))
        << "' height='" << Num(bot - top) << "' fill='#9a9a9a' fill-opacity='0.35'/>\n";
    }
  }
}

// Frames, the time grid and the tick labels of both axes.
void DrawAxes(Svg& svg, const Scales& sc) {
  auto& o = svg.raw();
  const RunSummary& r = sc.r;
  const double tstep = ChooseTimeStep(sc.span, kR - kL);
  for (double t = 0; t <= sc.span + 1e-6; t += tstep) {
    const double x = sc.X(r.start + t);
    o << "<line x1='" << Num(x) << "' y1='" << kP1T << "' x2='" << Num(x) << "' y2='" << kP2B + 4
      << "' stroke='#e6e6e6'/>\n";
    o << "<line x1='" << Num(x) << "' y1='" << kP2B << "' x2='" << Num(x) << "' y2='" << kP2B + 5
      << "' stroke='#555'/>\n";
    svg.Text(x, kP2B + 17, TimeTicks::Label(t, tstep), kFont, "middle", "#333");
  }
  svg.Text((kL + kR) / 2, kP2B + 36,
           "wall time since the run's start, " + IsoTime(r.start) + " (UTC)", kFont, "middle",
           "#333");
  for (double s = 0; s <= sc.ytop + 1e-9; s += sc.ystep) {
    o << "<line x1='" << kL << "' y1='" << Num(sc.YS(s)) << "' x2='" << kR << "' y2='"
      << Num(sc.YS(s)) << "' stroke='#f0f0f0'/>\n";
    svg.Text(kL - 6, sc.YS(s) + 4, std::to_string(static_cast<long long>(s)), kFont, "end", "#333");
  }
  svg.Text(kL - 6, kP2T + 10, Num(sc.lmax, "%.3g"), kFont, "end", "#8b1a1a");
  svg.Text(kL - 6, kP2B - 2, Num(sc.lmin, "%.3g"), kFont, "end", "#8b1a1a");
  for (auto [top, bot] : {std::pair{kP1T, kP1B}, std::pair{kP2T, kP2B}}) {
    o << "<rect x='" << kL << "' y='" << top << "' width='" << kR - kL << "' height='" << bot - top
      << "' fill='none' stroke='#888'/>\n";
  }
  svg.Text(kL + 6, kP1T + 15, "optimizer step", kFont, "start", "#1f4e99");
  svg.Text(kR - 6, kP2T + 14, "loss", kFont, "end", "#8b1a1a");
}

// Checkpoints as ticks on the bottom edge of panel 1; progress and loss as one polyline per
// stretch of steps between interruptions (a point per pixel at most), each stretch starting
// where its first step started.
void DrawCurves(Svg& svg, const Scales& sc) {
  auto& o = svg.raw();
  const RunSummary& r = sc.r;
  for (const auto& s : r.steps) {
    if (s.ckpt_stall_s <= 0) continue;
    o << "<line x1='" << Num(sc.X(s.unix_time)) << "' y1='" << kP1B << "' x2='"
      << Num(sc.X(s.unix_time)) << "' y2='" << kP1B - 12
      << "' stroke='#1e8449' stroke-width='2'/>\n";
  }
  std::vector<size_t> cuts = {0};
  for (const auto& in : r.interruptions) {
    if (in.next_record > 0) cuts.push_back(static_cast<size_t>(in.next_record));
  }
  cuts.push_back(r.steps.size());
  std::sort(cuts.begin(), cuts.end());
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    if (cuts[c] >= cuts[c + 1]) continue;
    const records::StepMetrics& first = r.steps[cuts[c]];
    std::ostringstream prog, loss;
    prog << Num(sc.X(first.Start())) << "," << Num(sc.YS(static_cast<double>(first.step - 1)));
    double last_x = -1;
    for (size_t i = cuts[c]; i < cuts[c + 1]; ++i) {
      const double x = sc.X(r.steps[i].unix_time);
      if (x - last_x < 0.7 && i + 1 != cuts[c + 1]) continue;
      last_x = x;
      prog << " " << Num(x) << "," << Num(sc.YS(static_cast<double>(r.steps[i].step)));
      loss << " " << Num(x) << "," << Num(sc.YL(r.steps[i].loss));
    }
    o << "<polyline fill='none' stroke='#1f4e99' stroke-width='2' points='" << prog.str()
      << "'/>\n<polyline fill='none' stroke='#8b1a1a' stroke-width='1.2' points='" << loss.str()
      << "'/>\n";
  }
}

// Failures (a labelled dashed line each), the work they lost, and fallbacks.
void DrawFailures(Svg& svg, const Scales& sc, LabelRows& rows) {
  auto& o = svg.raw();
  const RunSummary& r = sc.r;
  for (size_t k = 0; k < r.interruptions.size(); ++k) {
    const Interruption& in = r.interruptions[k];
    const double s0 = static_cast<double>(in.resumed_step);
    o << "<line x1='" << Num(sc.X(in.last_good_time)) << "' y1='" << Num(sc.YS(s0)) << "' x2='"
      << Num(sc.X(in.failed_at)) << "' y2='"
      << Num(sc.YS(s0 + static_cast<double>(in.redone_steps)))
      << "' stroke='#d35400' stroke-width='2' stroke-dasharray='5,3'/>\n";
    const double x = sc.X(in.failed_at);
    const std::string tag = "#" + std::to_string(k + 1);
    const std::string label = tag + " " + in.cause + ": down " + HumanDuration(in.down_s) + ", " +
                              std::to_string(in.redone_steps) + " steps re-done" +
                              (in.failed_at_estimated ? " (time estimated)" : "");
    const auto y =
        rows.Place(svg, x, {Fit(label, kFont, kR - kL), tag + " " + in.cause, tag}, kFailColor);
    o << "<line x1='" << Num(x) << "' y1='" << Num(y ? *y + 3 : kP1T - 6) << "' x2='" << Num(x)
      << "' y2='" << kP2B << "' stroke='" << kFailColor
      << "' stroke-width='1.5' stroke-dasharray='6,3'/>\n";
    for (int i : in.fallbacks) {
      const RunEvent& e = r.events[i];
      const double fx = sc.X(e.time);
      const auto fy = rows.Place(
          svg, fx,
          {"fell back: step " + std::to_string(e.step.value_or(-1)) + " corrupt", "fell back"},
          kFallColor);
      o << "<line x1='" << Num(fx) << "' y1='" << Num(fy ? *fy + 3 : kP1T - 6) << "' x2='"
        << Num(fx) << "' y2='" << kP1B << "' stroke='" << kFallColor << "' stroke-width='1.5'/>\n";
    }
  }
  if (r.steps.empty()) {
    svg.Text((kL + kR) / 2, (kP1T + kP1B) / 2, "no steps recorded", 14, "middle", "#888");
  }
}

// The legend, wrapped to the plot width, and a note when labels were left out.
void DrawLegend(Svg& svg, const LabelRows& rows) {
  struct Item {
    std::string swatch, text;
  };
  const std::vector<Item> items = {
      {"<line x1='0' y1='-4' x2='18' y2='-4' stroke='#1f4e99' stroke-width='2'/>",
       "steps that count"},
      {"<rect x='0' y='-10' width='18' height='11' fill='#f5a623' fill-opacity='0.3'/>"
       "<line x1='0' y1='-1' x2='18' y2='-8' stroke='#d35400' stroke-width='2' "
       "stroke-dasharray='5,3'/>",
       "re-done work (lost, then repeated)"},
      {"<rect x='0' y='-10' width='18' height='11' fill='#9a9a9a' fill-opacity='0.35'/>",
       "downtime"},
      {std::string("<line x1='9' y1='-11' x2='9' y2='2' stroke='") + kFailColor +
           "' stroke-width='1.5' stroke-dasharray='6,3'/>",
       "failure (cause)"},
      {std::string("<line x1='9' y1='-11' x2='9' y2='2' stroke='") + kFallColor +
           "' stroke-width='1.5'/>",
       "fell back to an older checkpoint"},
      {"<line x1='9' y1='-11' x2='9' y2='1' stroke='#1e8449' stroke-width='2'/>", "checkpoint"},
      {"<line x1='0' y1='-4' x2='18' y2='-4' stroke='#8b1a1a' stroke-width='1.2'/>", "loss"},
  };
  double lx = kL, ly = kP2B + 62;
  for (const auto& it : items) {
    const double w = 24 + TextWidth(it.text, kFont) + 14;
    if (lx + w > kR && lx > kL) {
      lx = kL;
      ly += 18;
    }
    svg.raw() << "<g transform='translate(" << Num(lx) << "," << Num(ly) << ")'>" << it.swatch
              << "</g>\n";
    svg.Text(lx + 24, ly, it.text, kFont, "start", "#333");
    lx += w;
  }
  if (rows.left_out() > 0) {
    const std::string note = std::to_string(rows.left_out()) +
                             " marker labels left out (crowded): ftrain report lists them all";
    if (lx + TextWidth(note, kFont) > kR && lx > kL) {
      lx = kL;
      ly += 18;
    }
    svg.Text(lx, ly, note, kFont, "start", kFailColor);
  }
}

}  // namespace

std::string RenderReportSvg(const RunSummary& r) {
  Svg svg;
  const Scales sc = MakeScales(r);
  DrawTitle(svg, r, kH + PhasesPanelHeight(r));
  DrawShading(svg, sc);
  DrawAxes(svg, sc);
  DrawCurves(svg, sc);
  LabelRows rows;
  DrawFailures(svg, sc, rows);
  DrawLegend(svg, rows);
  svg.raw() << RenderPhasesPanel(r, kH);  // where the time goes (report/svg_phases.cc)
  svg.raw() << "</svg>\n";
  return svg.raw().str();
}

Status WriteReportSvg(const RunSummary& r, const std::string& svg_path) {
  std::ofstream f(svg_path);
  if (!f) {
    return Status::InvalidArgument("cannot create '" + svg_path +
                                   "' (--svg): does its directory exist and is it writable?");
  }
  f << RenderReportSvg(r);
  f.close();
  if (!f) return Status::IOError("writing '" + svg_path + "' failed (disk full?)");
  return Status::Ok();
}

}  // namespace ftrain::report
