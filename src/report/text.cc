// Run report, part 2: the text a person reads and the JSON a script reads, both from one
// RunSummary (report.cc). Times are ISO 8601 UTC and offsets from the run's start, never
// raw Unix seconds.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/strings.h"
#include "report/run_report.h"
#include "report/time_breakdown.h"

namespace ftrain::report {
namespace {

using ojson = nlohmann::ordered_json;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Where a checkpoint is: "file" (the file-system root) or, with ckpt.root = s3://..., "staged"
// (its copy in the staging root), then "mirror" (ckpt.mirror) and "s3" (committed on S3).
std::vector<std::string> TierNames(const RunSummary& r, const RunSummary::StepTiers& s) {
  std::vector<std::string> names;
  if (s.file) names.push_back(r.s3_root.empty() ? "file" : "staged");
  if (s.mirror) names.push_back("mirror");
  if (s.s3) names.push_back("s3");
  return names;
}

std::string At(const RunSummary& r, double t) {
  return IsoTime(t) + " (" + Offset(t - r.start) + ")";
}

// The run as a whole, from its newest record; empty without records.
std::string StateLine(const RunSummary& r) {
  const RunState st = RunStateOf(r);
  if (st.last == nullptr) return "";
  const RunEvent& e = *st.last;
  const std::string when = At(r, e.time) + (e.job.empty() ? "" : ", job " + e.job);
  if (st.kind == "finished") return "finished, " + when;
  if (st.kind == "failed") {
    return "FAILED (" + e.cause + ") " + when + ": slurm/train.sh gave up; " + st.advice;
  }
  return "not finished: the newest record is " + e.event +
         (e.cause.empty() ? "" : " (" + e.cause + ")") + ", " + when +
         " (still running or queued, or it ended without a record: see squeue and the job's "
         "output)";
}

void Row(std::ostream& out, const std::string& key, const std::string& value) {
  out << "    " << key << std::string(key.size() < 23 ? 23 - key.size() : 1, ' ') << value << "\n";
}

ojson TimeJson(const RunSummary& r, double t) {
  return {{"iso", IsoTime(t)}, {"offset", Offset(t - r.start)}, {"offset_s", t - r.start}};
}

ojson PercentilesJson(const Percentiles& p) {
  return {{"p50", p.p50}, {"p95", p.p95}, {"max", p.max}, {"count", p.count}};
}

void PrintInterruption(const RunSummary& r, const Interruption& in, int n, std::ostream& out) {
  out << "  #" << n << " " << in.cause << ": " << in.how << "\n";
  Row(out, "last step that counts",
      in.resumed_step > 0
          ? "step " + std::to_string(in.resumed_step) + " at " + At(r, in.last_good_time)
          : "none (before the first step)");
  Row(out, "failed", At(r, in.failed_at) + ", " + in.failed_at_basis);
  if (in.detected_at) {
    const std::string by = in.detected_by == "ftrain"  ? "ftrain: heartbeats and a probe"
                           : in.detected_by == "slurm" ? "Slurm took the node out of the job"
                                                       : "train.sh";
    Row(out, "detected",
        At(r, *in.detected_at) + ", " + HumanDuration(*in.detected_at - in.failed_at) +
            " after the failure (" + by + ")");
    if (!in.evidence.empty()) Row(out, "evidence", in.evidence);
  } else {
    Row(out, "detected",
        in.requeued ? "not recorded (the batch host died: Slurm requeued the job)"
                    : "not recorded (no train.sh record of the failure)");
  }
  if (in.restarted_at) Row(out, "restarted", At(r, *in.restarted_at));
  for (int i : in.fallbacks) {
    const RunEvent& e = r.events[i];
    Row(out, "fell back",
        At(r, e.time) + ": step " + std::to_string(e.step.value_or(-1)) + " failed verification, " +
            e.detail);
  }
  if (!in.state_from.empty()) Row(out, "state from", in.state_from);
  if (in.first_step_start) {
    const double from = in.detected_at.value_or(in.failed_at);
    Row(out, "first new step",
        "started " + At(r, *in.first_step_start) + ", recovery " +
            HumanDuration(*in.first_step_start - from) + " after " +
            (in.detected_at ? "detection" : "the failure"));
  } else if (in.failed_again) {
    Row(out, "first new step",
        "none: the attempt that began " + At(r, in.down_until) +
            " failed too before a checkpoint (the next interruption)");
  } else {
    Row(out, "first new step", "none: the run has no step after this (still down or ended)");
  }
  std::string redone =
      (in.redone_steps_estimated ? "about " : "") + std::to_string(in.redone_steps) + " steps";
  if (in.redone_steps > 0) {
    redone += " (" + std::to_string(in.resumed_step + 1) + "-" +
              std::to_string(in.resumed_step + in.redone_steps) + ")";
  }
  Row(out, "re-done", redone + ", " + HumanDuration(in.redone_s));
  Row(out, "lost",
      HumanDuration(in.lost_s) + " (re-done " + HumanDuration(in.redone_s) + " + down " +
          HumanDuration(in.down_s) + ")");
}

// RUN/quarantine.jsonl: the nodes a replica check found computing wrong bits.
void PrintQuarantine(const RunSummary& r, std::ostream& out) {
  if (r.quarantined.empty()) return;
  out << "\nquarantined (RUN/quarantine.jsonl: replicas of a shard disagreed or ranks hung "
         "twice there; ftrain job gives them no ranks of this run again)\n";
  for (const QuarantinedNode& q : r.quarantined) {
    if (q.cause == records::kClearedCause) {
      out << "  " << At(r, q.time) << "  host " << q.host
          << " cleared by an operator (ftrain quarantine clear): its earlier lines no longer "
             "keep it out\n";
      continue;
    }
    out << "  " << At(r, q.time) << "  host " << q.host << " (node " << q.node << ", rank "
        << q.rank << "), after step " << q.step << ", " << (q.cause.empty() ? "sdc" : q.cause)
        << (q.cause == "hang" ? ": ranks hung there twice"
            : q.by_majority   ? ": outvoted by its replicas"
                              : ": one of replicas that could not be told apart (a suspect)")
        << "\n";
    if (!q.action.empty()) out << "      the job: " << q.action << "\n";
  }
}

// RUN/hangs.jsonl: the ranks the hang guard found stuck while the others waited for them.
void PrintHangs(const RunSummary& r, std::ostream& out) {
  if (r.hangs.empty()) return;
  out << "\nhangs (RUN/hangs.jsonl: a rank the others waited for in a collective; the job "
         "restarted; a host named twice is worth replacing)\n";
  for (const HungRank& h : r.hangs) {
    char secs[64];
    std::snprintf(secs, sizeof(secs), "%.1f s (threshold %.1f s)", h.stuck_s, h.threshold_s);
    out << "  " << At(r, h.time) << "  step " << h.step << ": rank " << h.rank << " (node "
        << h.node << ", host " << h.host << ") stuck in " << h.phase << " for " << secs
        << ", named by rank " << h.detected_by << "\n";
  }
}

}  // namespace

std::string IsoTime(double unix_s) {
  // Rounded like Offset(), so "16:00:29Z (+00:00:29)" agree.
  const std::time_t t = static_cast<std::time_t>(std::llround(unix_s));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Offset(double seconds) {
  const bool neg = seconds < 0;
  const long long s = std::llround(std::fabs(seconds));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%c%02lld:%02lld:%02lld", neg ? '-' : '+', s / 3600,
                (s / 60) % 60, s % 60);
  return buf;
}

std::string HumanDuration(double seconds) {
  char buf[48];
  if (seconds < 10) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
    return buf;
  }
  const long long s = std::llround(seconds);
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%lld s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lld min %02lld s", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld h %02lld min", s / 3600, (s / 60) % 60);
  }
  return buf;
}

void PrintReport(const RunSummary& r, std::ostream& out) {
  const records::StepMetrics* last = r.steps.empty() ? nullptr : &r.steps.back();
  out << "run            " << r.run_dir << "\n";
  out << "time (UTC)     " << IsoTime(r.start) << " to " << IsoTime(r.end) << ", wall "
      << HumanDuration(r.wall_s) << "\n";
  if (const std::string state = StateLine(r); !state.empty()) {
    out << "state          " << state << "\n";
  }
  if (last == nullptr) {
    out << "steps          none recorded yet\n";
  } else {
    out << "steps          " << last->step << " (" << r.steps.size() << " records), "
        << last->tokens << " tokens, final loss " << Fmt("%.4f", last->loss) << "\n";
    out << "goodput        " << Fmt("%.1f", 100 * r.goodput) << " % (productive step time "
        << HumanDuration(r.productive_s) << " of " << HumanDuration(r.wall_s) << " wall)\n";
  }
  out << "hours lost     " << Fmt("%.2f", r.lost_s / 3600) << " h (" << HumanDuration(r.lost_s)
      << ") to " << r.interruptions.size() << " interruption"
      << (r.interruptions.size() == 1 ? "" : "s") << ": re-done work " << HumanDuration(r.redone_s)
      << ", downtime " << HumanDuration(r.down_s) << "\n";
  out << "other          " << HumanDuration(r.other_s)
      << " (start-up before the first step, shutdown, gaps between steps)\n";
  if (last != nullptr) {
    out << "step time      p50 " << Fmt("%.3f", r.step_time.p50) << " s, p95 "
        << Fmt("%.3f", r.step_time.p95) << " s without checkpoint stalls"
        << (r.eval ? " and evaluation" : "") << " (with: p50 "
        << Fmt("%.3f", r.step_time_with_stall.p50) << " s, p95 "
        << Fmt("%.3f", r.step_time_with_stall.p95) << " s)\n";
    out << "throughput     p50 " << Fmt("%.0f", r.tokens_per_s.p50) << " tokens/s per step; "
        << Fmt("%.0f", r.wall_s > 0 ? static_cast<double>(last->tokens) / r.wall_s : 0)
        << " tokens/s over the wall time\n";
    if (r.eval) {
      const EvalSummary& e = *r.eval;
      out << "eval           held-out loss " << Fmt("%.4f", e.last_loss) << " at step "
          << e.last_step << " (first " << Fmt("%.4f", e.first_loss) << " at step " << e.first_step
          << ", best " << Fmt("%.4f", e.best_loss) << " at step " << e.best_step << "; " << e.count
          << " evaluation" << (e.count == 1 ? "" : "s") << ", " << HumanDuration(e.total_s)
          << ")\n";
    }
    if (r.mfu) {
      out << "MFU            p50 " << Fmt("%.1f", 100 * r.mfu->p50) << " %, p95 "
          << Fmt("%.1f", 100 * r.mfu->p95) << " %\n";
    }
    if (r.gpu_util || r.gpu_mem_gb || r.tokens_per_s_per_gpu) {
      std::string g;
      if (r.gpu_util) g += "utilisation p50 " + Fmt("%.0f", r.gpu_util->p50) + " %";
      if (r.gpu_mem_gb)
        g += (g.empty() ? "" : "; ") + ("memory max " + Fmt("%.1f", r.gpu_mem_gb->max) + " GB");
      if (r.tokens_per_s_per_gpu) {
        g += (g.empty() ? "" : "; ") +
             ("p50 " + Fmt("%.0f", r.tokens_per_s_per_gpu->p50) + " tokens/s per GPU");
      }
      out << "GPU            " << g << "\n";
    }
    out << "data wait      p50 " << Fmt("%.4f", r.data_wait.p50) << " s/step\n"
        << "communication  p50 " << Fmt("%.4f", r.comm.p50) << " s/step (waiting on collectives)\n";
  }
  out << "checkpoints    " << r.checkpoint_steps.size()
      << " written by the steps that count, stall total " << Fmt("%.2f", r.stall_total_s)
      << " s (p50 " << Fmt("%.2f", r.stall.p50) << " s, max " << Fmt("%.2f", r.stall.max) << " s); "
      << r.checkpoints_in_root << " complete in " << r.ckpt_root << " now";
  if (r.latest_in_root) out << " (latest step " << *r.latest_in_root << ")";
  if (r.corrupt_in_root > 0) out << ", " << r.corrupt_in_root << " set aside as corrupt";
  out << "\n";
  if (!r.mirror.empty()) {
    out << "mirror         " << r.checkpoints_in_mirror << " committed in " << r.mirror << "\n";
  }
  if (!r.s3_root.empty()) {
    out << "s3 root        " << r.checkpoints_in_s3 << " committed in " << r.s3_root
        << " (staged in " << r.ckpt_root << ")\n";
  }
  if (!r.mirror.empty() || !r.s3_root.empty()) {
    std::string t;
    for (size_t i = 0; i < r.tiers.size() && i < 8; ++i) {
      t += (t.empty() ? "" : ", ") + ("step " + std::to_string(r.tiers[i].step) + ": ") +
           Join(TierNames(r, r.tiers[i]), "+");
    }
    if (!t.empty()) out << "tiers          " << t << (r.tiers.size() > 8 ? ", ..." : "") << "\n";
  }
  PrintTimeBreakdown(r, out);
  PrintQuarantine(r, out);
  PrintHangs(r, out);
  if (!r.interruptions.empty()) {
    out << "\ninterruptions (UTC, and +h:mm:ss from the run's start)\n";
    for (size_t i = 0; i < r.interruptions.size(); ++i) {
      PrintInterruption(r, r.interruptions[i], static_cast<int>(i + 1), out);
    }
  }
  if (!r.events.empty()) {
    out << "\nrecords in restarts.jsonl\n";
    for (const auto& e : r.events) {
      out << "  " << At(r, e.time) << "  " << e.event;
      if (!e.cause.empty()) out << " (" << e.cause << ")";
      if (!e.job.empty()) out << ", job " << e.job;
      if (e.lost_s) out << ", work since the newest checkpoint " << HumanDuration(*e.lost_s);
      if (e.last_step) out << ", last step " << *e.last_step;
      if (e.event == "fell_back") {
        out << ": step " << e.step.value_or(-1) << " failed verification, " << e.detail;
      } else if (!e.detail.empty()) {
        out << ": " << e.detail;
      }
      out << "\n";
    }
  }
  if (!r.warnings.empty()) {
    out << "\nwarnings\n";
    for (const auto& w : r.warnings) out << "  " << w << "\n";
  }
}

void PrintReportJson(const RunSummary& r, std::ostream& out) {
  ojson j;
  const records::StepMetrics* last = r.steps.empty() ? nullptr : &r.steps.back();
  j["run_dir"] = r.run_dir;
  j["start"] = TimeJson(r, r.start);
  j["end"] = TimeJson(r, r.end);
  j["wall_s"] = r.wall_s;
  if (const RunState st = RunStateOf(r); st.last != nullptr) {
    j["state"] = {{"kind", st.kind},
                  {"event", st.last->event},
                  {"cause", st.last->cause},
                  {"job", st.last->job},
                  {"at", TimeJson(r, st.last->time)},
                  {"advice", st.advice.empty() ? ojson() : ojson(st.advice)}};
  }
  j["steps"] = last != nullptr ? last->step : 0;
  j["records"] = r.steps.size();
  j["tokens"] = last != nullptr ? last->tokens : 0;
  j["final_loss"] = last != nullptr ? ojson(last->loss) : ojson(nullptr);
  j["goodput"] = r.goodput;
  j["productive_s"] = r.productive_s;
  j["lost_s"] = r.lost_s;
  j["lost_h"] = r.lost_s / 3600;
  j["redone_s"] = r.redone_s;
  j["down_s"] = r.down_s;
  j["other_s"] = r.other_s;
  j["step_time_s"] = PercentilesJson(r.step_time);
  j["step_time_with_stall_s"] = PercentilesJson(r.step_time_with_stall);
  j["tokens_per_s"] = PercentilesJson(r.tokens_per_s);
  j["data_wait_s"] = PercentilesJson(r.data_wait);
  j["comm_s"] = PercentilesJson(r.comm);
  if (r.eval) {
    j["eval"] = {{"evaluations", r.eval->count},     {"last_step", r.eval->last_step},
                 {"last_loss", r.eval->last_loss},   {"first_step", r.eval->first_step},
                 {"first_loss", r.eval->first_loss}, {"best_step", r.eval->best_step},
                 {"best_loss", r.eval->best_loss},   {"total_s", r.eval->total_s}};
  }
  if (r.mfu) j["mfu"] = PercentilesJson(*r.mfu);
  if (r.gpu_util) j["gpu_util"] = PercentilesJson(*r.gpu_util);
  if (r.gpu_mem_gb) j["gpu_mem_gb"] = PercentilesJson(*r.gpu_mem_gb);
  if (r.tokens_per_s_per_gpu) j["tokens_per_s_per_gpu"] = PercentilesJson(*r.tokens_per_s_per_gpu);
  j["checkpoints"] = {{"written", r.checkpoint_steps.size()},
                      {"steps", r.checkpoint_steps},
                      {"stall_total_s", r.stall_total_s},
                      {"stall_s", PercentilesJson(r.stall)},
                      {"root", r.ckpt_root},
                      {"complete_in_root", r.checkpoints_in_root},
                      {"corrupt_in_root", r.corrupt_in_root},
                      {"latest_in_root", r.latest_in_root ? ojson(*r.latest_in_root) : ojson()}};
  ojson tiers = ojson::array();
  for (const auto& s : r.tiers) tiers.push_back({{"step", s.step}, {"tiers", TierNames(r, s)}});
  j["checkpoints"]["tiers"] = tiers;
  j["checkpoints"]["mirror"] = r.mirror.empty() ? ojson() : ojson(r.mirror);
  j["checkpoints"]["committed_in_mirror"] = r.checkpoints_in_mirror;
  j["checkpoints"]["s3_root"] = r.s3_root.empty() ? ojson() : ojson(r.s3_root);
  j["checkpoints"]["committed_in_s3"] = r.checkpoints_in_s3;
  ojson ins = ojson::array();
  for (const auto& in : r.interruptions) {
    ojson o = {
        {"cause", in.cause},
        {"how", in.how},
        {"resumed_step", in.resumed_step},
        {"last_good", TimeJson(r, in.last_good_time)},
        {"failed_at", TimeJson(r, in.failed_at)},
        {"failed_at_estimated", in.failed_at_estimated},
        {"failed_at_basis", in.failed_at_basis},
        {"detected_at", in.detected_at ? TimeJson(r, *in.detected_at) : ojson()},
        {"detection_s", in.detected_at ? ojson(*in.detected_at - in.failed_at) : ojson()},
        {"detected_by", in.detected_by.empty() ? ojson() : ojson(in.detected_by)},
        {"evidence", in.evidence.empty() ? ojson() : ojson(in.evidence)},
        {"restarted_at", in.restarted_at ? TimeJson(r, *in.restarted_at) : ojson()},
        {"first_step_start", in.first_step_start ? TimeJson(r, *in.first_step_start) : ojson()},
        {"recovery_s", in.first_step_start
                           ? ojson(*in.first_step_start - in.detected_at.value_or(in.failed_at))
                           : ojson()},
        {"failed_again", in.failed_again},
        {"down_until", TimeJson(r, in.down_until)},
        {"redone_steps", in.redone_steps},
        {"redone_steps_estimated", in.redone_steps_estimated},
        {"redone_s", in.redone_s},
        {"down_s", in.down_s},
        {"lost_s", in.lost_s},
        {"state_from", in.state_from}};
    ojson fb = ojson::array();
    for (int i : in.fallbacks) {
      fb.push_back({{"at", TimeJson(r, r.events[i].time)},
                    {"step", r.events[i].step ? ojson(*r.events[i].step) : ojson()},
                    {"detail", r.events[i].detail}});
    }
    o["fell_back"] = fb;
    ins.push_back(o);
  }
  j["interruptions"] = ins;
  j["time_breakdown"] = TimeBreakdownJson(r);
  ojson evs = ojson::array();
  for (const auto& e : r.events) {
    ojson o = ojson::parse(e.json, nullptr, false);
    o["iso"] = IsoTime(e.time);
    o["offset"] = Offset(e.time - r.start);
    evs.push_back(o);
  }
  j["events"] = evs;
  ojson quarantined = ojson::array();
  for (const QuarantinedNode& q : r.quarantined) {
    quarantined.push_back({{"at", TimeJson(r, q.time)},
                           {"host", q.host},
                           {"node", q.node},
                           {"rank", q.rank},
                           {"step", q.step},
                           {"cause", q.cause},
                           {"by_majority", q.by_majority},
                           {"action", q.action}});
  }
  j["quarantined"] = quarantined;
  ojson hangs = ojson::array();
  for (const HungRank& h : r.hangs) {
    hangs.push_back({{"at", TimeJson(r, h.time)},
                     {"step", h.step},
                     {"rank", h.rank},
                     {"node", h.node},
                     {"host", h.host},
                     {"phase", h.phase},
                     {"stuck_s", h.stuck_s},
                     {"threshold_s", h.threshold_s},
                     {"detected_by", h.detected_by}});
  }
  j["hangs"] = hangs;
  j["warnings"] = r.warnings;
  out << j.dump(2) << "\n";
}

}  // namespace ftrain::report
