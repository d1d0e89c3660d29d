// Run report, part 1: reading a run directory's records and working out what happened
// (interruptions, goodput, hours lost, percentiles). The records' fields are records/; text
// and JSON output live in text.cc, the SVG timeline in svg.cc.
#include "report/run_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "ckpt/store.h"
#include "core/env.h"
#include "core/run_layout.h"
#include "records/json_lines.h"
#include "records/restarts.h"
#include "report/tiers.h"
#include "report/time_breakdown.h"

namespace ftrain::report {
namespace {

using nlohmann::json;

using records::ReadField;
using records::ReadOptField;

StatusOr<RunEvent> ParseEvent(const json& j, const std::string& where) {
  RunEvent e;
  e.json = j.dump();
  FT_RETURN_IF_ERROR(ReadField(j, "time", true, where, &e.time));
  FT_RETURN_IF_ERROR(ReadField(j, "event", true, where, &e.event));
  FT_RETURN_IF_ERROR(ReadField(j, "cause", false, where, &e.cause));
  FT_RETURN_IF_ERROR(ReadField(j, "job", false, where, &e.job));
  FT_RETURN_IF_ERROR(ReadOptField(j, "lost_s", where, &e.lost_s));
  FT_RETURN_IF_ERROR(ReadOptField(j, "last_step", where, &e.last_step));
  FT_RETURN_IF_ERROR(ReadOptField(j, "last_step_time", where, &e.last_step_time));
  FT_RETURN_IF_ERROR(ReadOptField(j, "step", where, &e.step));
  FT_RETURN_IF_ERROR(ReadOptField(j, "detected", where, &e.detected));
  FT_RETURN_IF_ERROR(ReadField(j, "detected_by", false, where, &e.detected_by));
  FT_RETURN_IF_ERROR(ReadField(j, "evidence", false, where, &e.evidence));
  std::string a, b;
  if (e.event == "fell_back") {
    FT_RETURN_IF_ERROR(ReadField(j, "moved_to", false, where, &a));
    FT_RETURN_IF_ERROR(ReadField(j, "problem", false, where, &b));
    e.detail = "moved to " + a + " (" + b + ")";
  } else if (e.event == "resumed") {
    FT_RETURN_IF_ERROR(ReadField(j, "source", false, where, &a));
    FT_RETURN_IF_ERROR(ReadField(j, "dir", false, where, &b));
    e.detail = a.empty() ? b : (b.empty() ? a : a + ", " + b);
    // The memory tier recorded a newer step that could not be restored (issue 35).
    std::string why;
    FT_RETURN_IF_ERROR(ReadField(j, "memory_fallback", false, where, &why));
    if (!why.empty()) e.detail += "; memory tier fell back to disk: " + why;
  } else if (e.event == "sdc") {
    // The trainer's replica check (train/sdc_check.h): who disagreed, in words.
    FT_RETURN_IF_ERROR(ReadField(j, "detail", false, where, &e.detail));
  } else if (e.event == "resubmitted" || e.event == "superseded") {
    // The node agents submitted the job again (its batch host died); a superseded start is
    // the old job's, requeued by Slurm anyway, ending at once (slurm/train.sh).
    FT_RETURN_IF_ERROR(ReadField(j, "new_job", false, where, &a));
    if (!a.empty()) e.detail = "the job continues as job " + a;
  }
  return e;
}

bool IsFailureEvent(const std::string& ev) {
  // heartbeat_late: ftrain heard nothing from a node for a while but its slurmd answered (a
  // slow or paused node, not a failure: nothing was restarted). superseded: a start of a job
  // already submitted again, ending at once while the new job trains (its failure is the
  // batch host's, recorded before). Any other event, known or new, counts as a failure.
  return ev != "started" && ev != "finished" && ev != "resumed" && ev != "heartbeat_late" &&
         ev != "superseded";
}
bool IsDetection(const std::string& ev) {
  return ev == "step_failed" || ev == "restarted" || ev == "stopped" || ev == "failed";
}
bool IsRestart(const std::string& ev) {
  return ev == "requeued" || ev == "restarted" || ev == "started";
}

// One interruption: the failure records `evs` in the gap between step record `p` (nullptr:
// before the first step) and `q` (nullptr: the run has no step after it). A gap can hold
// several failures (an attempt that failed again before its first checkpoint): then `begin`
// is when the attempt that failed began, and `next` (not the last in the gap) the time of
// the next failure's first record.
// A restarted/shrink or restarted/grow record's new world, in words: "(shrank to 4 ranks on
// 2 nodes without n2)", "(grew to 6 ranks on 3 nodes with n2)"; empty when it does not say.
std::string WorldText(const std::string& record, bool grow) {
  const json j = json::parse(record, nullptr, false);
  if (!j.is_object() || !j.contains("world") || !j["world"].is_number_integer() ||
      !j.contains("nodes") || !j["nodes"].is_number_integer()) {
    return "";
  }
  std::string s = std::string(grow ? "(grew" : "(shrank") + " to " +
                  std::to_string(j["world"].get<int64_t>()) + " ranks on " +
                  std::to_string(j["nodes"].get<int64_t>()) + " nodes";
  if (j.contains("node") && j["node"].is_string()) {
    s += (grow ? " with " : " without ") + j["node"].get<std::string>();
  }
  return s + ")";
}

Interruption Explain(const RunSummary& r, const records::StepMetrics* p,
                     const records::StepMetrics* q, const std::vector<int>& evs,
                     double median_step_s, double begin, std::optional<double> next) {
  Interruption in;
  in.events = evs;
  in.resumed_step = p != nullptr ? p->step : 0;
  in.last_good_time = begin;
  in.failed_again = next.has_value();
  const double end = next ? *next : (q != nullptr ? q->Start() : r.end);
  double limit = end;  // the failure happened before this
  const RunEvent* first = nullptr;
  const RunEvent* lost = nullptr;
  const RunEvent* life = nullptr;
  for (int i : evs) {
    const RunEvent& e = r.events[i];
    if (e.event == "fell_back") in.fallbacks.push_back(i);
    if (e.event == "resumed" && !e.detail.empty()) in.state_from = e.detail;
    if (first == nullptr && IsFailureEvent(e.event) && e.event != "fell_back") first = &e;
    if (!in.detected_at && IsDetection(e.event)) {
      in.detected_at = e.detected.value_or(e.time);
      in.detected_by = e.detected_by;
      in.evidence = e.evidence;
    }
    if (!in.restarted_at && IsRestart(e.event)) in.restarted_at = e.time;
    if (e.event == "requeued") in.requeued = true;
    if (lost == nullptr && e.lost_s) lost = &e;
    if (life == nullptr && e.last_step_time) life = &e;
    if (!in.how.empty()) in.how += ", then ";
    in.how += e.event + (e.job.empty() ? "" : " (job " + e.job + ")");
    if (e.event == "restarted" && (e.cause == "shrink" || e.cause == "grow")) {
      const std::string world = WorldText(e.json, e.cause == "grow");
      if (!world.empty()) in.how += " " + world;
    }
  }
  if (first != nullptr) {
    in.cause = first->cause.empty() ? first->event : first->cause;
    limit = std::min(limit, first->time);
  } else if (!evs.empty()) {  // only the trainer's fell_back / resumed records
    in.cause = "unrecorded (restarted outside slurm/train.sh)";
  } else {
    in.cause = "unrecorded (no restarts.jsonl record; the restart count went up)";
    if (in.how.empty()) in.how = "only metrics.jsonl tells";
  }
  if (life != nullptr) {
    in.failed_at = *life->last_step_time;
    in.redone_steps =
        std::max<int64_t>(0, life->last_step.value_or(in.resumed_step) - in.resumed_step);
    in.failed_at_basis = "the last sign of life (step " +
                         std::to_string(in.resumed_step + in.redone_steps) + " ended)";
  } else {
    // Old records: train.sh's lost_s is the work since the newest complete checkpoint, which
    // after a fallback is the damaged one, further on than the step resumed from.
    double est = in.last_good_time + (lost != nullptr ? *lost->lost_s : 0);
    for (int i : in.fallbacks) {
      const int64_t bad = r.events[i].step.value_or(in.resumed_step);
      est += static_cast<double>(std::max<int64_t>(0, bad - in.resumed_step)) * median_step_s;
    }
    in.failed_at = est;
    in.failed_at_estimated = true;
    if (lost != nullptr) {
      in.failed_at_basis =
          "estimated: the step resumed from + lost_s (work since the newest "
          "checkpoint, recorded by an older train.sh)";
    } else if (!in.fallbacks.empty()) {
      in.failed_at_basis = "estimated: the damaged checkpoint's step (no train.sh record)";
    } else {
      in.failed_at_basis = "not recorded: placed at the end of the last step that counts";
    }
    in.redone_steps_estimated = true;
  }
  in.failed_at = std::max(in.last_good_time, std::min(in.failed_at, limit));
  in.redone_s = in.failed_at - in.last_good_time;
  if (in.redone_steps_estimated) {
    in.redone_steps =
        median_step_s > 0 ? static_cast<int64_t>(std::llround(in.redone_s / median_step_s)) : 0;
  }
  // Downtime ends when the next attempt starts work that is kept (the first new step) or,
  // when that attempt failed too, when it began.
  in.down_until = next ? in.restarted_at.value_or(*next) : end;
  in.down_until = std::max(in.failed_at, std::min(in.down_until, end));
  if (q != nullptr && !next) {
    in.next_record = static_cast<int>(q - r.steps.data());
    in.first_step_start = q->Start();
    in.first_step_end = q->unix_time;
  }
  in.down_s = in.down_until - in.failed_at;
  in.lost_s = in.redone_s + in.down_s;
  if (in.state_from.empty() && (q != nullptr || next)) {
    in.state_from = in.resumed_step > 0
                        ? "the checkpoint of step " + std::to_string(in.resumed_step) +
                              " (disk or ckptd memory: not recorded)"
                        : "nothing: a fresh start from step 0";
  }
  return in;
}

// Splits the records of one gap into failures: a new one begins with a record of a failure
// (or a restart) after the current one already restarted.
std::vector<std::vector<int>> SplitFailures(const RunSummary& r, const std::vector<int>& gap) {
  std::vector<std::vector<int>> out;
  bool restarted = true;
  for (int i : gap) {
    const std::string& ev = r.events[i].event;
    if ((IsDetection(ev) || IsRestart(ev)) && restarted) {
      out.emplace_back();
      restarted = false;
    }
    if (out.empty()) out.emplace_back();
    out.back().push_back(i);
    if (IsRestart(ev)) restarted = true;
  }
  if (out.empty()) out.emplace_back();  // only the restart count tells
  return out;
}

// The held-out loss of step `s` into the run's eval summary (first, best, last, time).
void AddEval(const records::StepMetrics& s, RunSummary* r) {
  EvalSummary& e = r->eval ? *r->eval : r->eval.emplace();
  if (e.count++ == 0) {
    e.first_step = s.step;
    e.first_loss = *s.eval_loss;
  }
  if (e.count == 1 || *s.eval_loss < e.best_loss) {
    e.best_step = s.step;
    e.best_loss = *s.eval_loss;
  }
  e.last_step = s.step;
  e.last_loss = *s.eval_loss;
  e.total_s += s.eval_s.value_or(0);
}

// Fills r->interruptions (needs the step-time percentiles).
void FindInterruptions(RunSummary* r) {
  // Every gap between consecutive step records (and before the first / after the last) that
  // holds a failure record, a restart, or a rise of the restart count is an interruption.
  const double median = r->step_time_with_stall.p50;
  const size_t n = r->steps.size();
  size_t ev = 0;
  for (size_t i = 0; i <= n; ++i) {
    const records::StepMetrics* p = i > 0 ? &r->steps[i - 1] : nullptr;
    const records::StepMetrics* q = i < n ? &r->steps[i] : nullptr;
    std::vector<int> gap;
    bool interrupted = p != nullptr && q != nullptr && q->restart_count > p->restart_count;
    while (ev < r->events.size() && (q == nullptr || r->events[ev].time <= q->unix_time)) {
      const RunEvent& e = r->events[ev];
      gap.push_back(static_cast<int>(ev));
      if (IsFailureEvent(e.event) || (e.event == "started" && p != nullptr)) interrupted = true;
      ++ev;
    }
    if (!interrupted) continue;
    // Keep the groups that are failures: the run's own first `started` is not one, while a
    // `started` after steps is a new job on this run directory (how it ended is unrecorded).
    std::vector<std::vector<int>> failures;
    for (auto& g : SplitFailures(*r, gap)) {
      bool failure = false;
      for (int e : g) {
        const std::string& name = r->events[e].event;
        failure = failure || IsFailureEvent(name) || (name == "started" && p != nullptr);
      }
      if (failure) failures.push_back(std::move(g));
    }
    if (failures.empty()) failures.push_back(gap);  // only the restart count (or a resume) tells
    double begin = p != nullptr ? p->unix_time : r->start;
    for (size_t k = 0; k < failures.size(); ++k) {
      std::optional<double> next;
      if (k + 1 < failures.size()) next = r->events[failures[k + 1].front()].time;
      r->interruptions.push_back(Explain(*r, p, q, failures[k], median, begin, next));
      begin = r->interruptions.back().down_until;
    }
  }
}

void Analyze(RunSummary* r) {
  const auto inf = std::numeric_limits<double>::infinity();
  r->start = inf;
  r->end = -inf;
  for (const auto& s : r->steps) {
    r->start = std::min(r->start, s.Start());
    r->end = std::max(r->end, s.unix_time);
  }
  for (const auto& e : r->events) {
    r->start = std::min(r->start, e.time);
    r->end = std::max(r->end, e.time);
  }
  if (r->start == inf) r->start = r->end = 0;
  r->wall_s = r->end - r->start;

  std::vector<double> st, stw, tps, wait, comm, stall, mfu, util, mem, tpg, rd50, rd95;
  for (const auto& s : r->steps) {
    r->productive_s += s.step_time_s;
    st.push_back(s.step_time_s - s.ckpt_stall_s - s.eval_s.value_or(0));
    stw.push_back(s.step_time_s);
    tps.push_back(s.tokens_per_s);
    wait.push_back(s.data_wait_s);
    comm.push_back(s.comm_s);
    if (s.ckpt_stall_s > 0) {
      stall.push_back(s.ckpt_stall_s);
      r->checkpoint_steps.push_back(s.step);
      r->stall_total_s += s.ckpt_stall_s;
    }
    if (s.mfu) mfu.push_back(*s.mfu);
    if (s.gpu_util) util.push_back(*s.gpu_util);
    if (s.gpu_mem_gb) mem.push_back(*s.gpu_mem_gb);
    if (s.tokens_per_s_per_gpu) tpg.push_back(*s.tokens_per_s_per_gpu);
    if (s.data_read_p50_s && s.data_read_p95_s) {
      rd50.push_back(*s.data_read_p50_s);
      rd95.push_back(*s.data_read_p95_s);
      r->read_requests += static_cast<int64_t>(s.data_reads.value_or(0));
    }
    if (s.eval_loss) AddEval(s, r);
  }
  r->step_time = ComputePercentiles(st);
  r->step_time_with_stall = ComputePercentiles(stw);
  r->tokens_per_s = ComputePercentiles(tps);
  r->data_wait = ComputePercentiles(wait);
  r->comm = ComputePercentiles(comm);
  r->stall = ComputePercentiles(stall);
  if (!mfu.empty()) r->mfu = ComputePercentiles(mfu);
  if (!util.empty()) r->gpu_util = ComputePercentiles(util);
  if (!mem.empty()) r->gpu_mem_gb = ComputePercentiles(mem);
  if (!tpg.empty()) r->tokens_per_s_per_gpu = ComputePercentiles(tpg);
  if (!rd50.empty()) {
    r->read_p50_s = ComputePercentiles(rd50).p50;
    r->read_p95_s = ComputePercentiles(rd95).p50;
  }

  FindInterruptions(r);
  for (size_t k = 0; k < r->interruptions.size(); ++k) {
    const Interruption& in = r->interruptions[k];
    r->lost_s += in.lost_s;
    r->redone_s += in.redone_s;
    r->down_s += in.down_s;
    if (in.failed_at_estimated) {
      r->warnings.push_back("interruption #" + std::to_string(k + 1) + " (near " +
                            IsoTime(in.failed_at) +
                            "): its failure time and re-done steps are estimates "
                            "(restarts.jsonl has no last_step_time for it: not run by "
                            "slurm/train.sh, or by an older one)");
    }
  }
  r->other_s = std::max(0.0, r->wall_s - r->productive_s - r->lost_s);
  r->goodput = r->wall_s > 0 ? r->productive_s / r->wall_s : 0;
}

// RUN/quarantine.jsonl (absent: nothing quarantined). A bad line is Corruption naming it.
// A number a line lacks is shown as 0, as the report always has.
Status ReadQuarantine(const std::string& path, RunSummary* r, Env* env) {
  auto lines = records::ReadQuarantineFile(path, &r->warnings, env);
  FT_RETURN_IF_ERROR(lines.status());
  for (records::QuarantineRecord& l : *lines) {
    QuarantinedNode q;
    static_cast<records::QuarantineRecord&>(q) = std::move(l);
    q.node = std::max(q.node, 0);
    q.rank = std::max(q.rank, 0);
    q.step = std::max<int64_t>(q.step, 0);
    r->quarantined.push_back(std::move(q));
  }
  return Status::Ok();
}

// RUN/hangs.jsonl (absent: no hang). A bad line is Corruption naming it.
Status ReadHangs(const std::string& path, RunSummary* r, Env* env) {
  auto lines = records::ReadHangsFile(path, &r->warnings, env);
  FT_RETURN_IF_ERROR(lines.status());
  for (HungRank& h : *lines) {
    h.node = std::max(h.node, 0);
    h.step = std::max<int64_t>(h.step, 0);
    h.detected_by = std::max(h.detected_by, 0);
    r->hangs.push_back(std::move(h));
  }
  return Status::Ok();
}

// What `ftrain job` did about each quarantined host: the first of its "quarantine" records
// (orch/job_policy_quarantine.cc) that names the host, at or after the line.
void MatchQuarantineActions(RunSummary* r) {
  auto names = [](const json& j, const char* key, const std::string& host) {
    if (!j.contains(key) || !j[key].is_string()) return false;
    std::string list = "," + j[key].get<std::string>() + ",";
    return list.find("," + host + ",") != std::string::npos;
  };
  for (QuarantinedNode& q : r->quarantined) {
    for (const RunEvent& e : r->events) {
      if (e.cause != "quarantine" || e.time + 1 < q.time) continue;
      const json j = json::parse(e.json, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      const std::string job = e.job.empty() ? "" : " (job " + e.job + ")";
      if (e.event == "restarted" && names(j, "node", q.host) && j.contains("spare") &&
          j["spare"].is_string()) {
        q.action = "replaced by spare " + j["spare"].get<std::string>() + job;
      } else if (e.event == "step_failed" && names(j, "nodes", q.host)) {
        q.action = "excluded from the requeued job" + job;
        if (j.contains("num_nodes") && j["num_nodes"].is_number_integer()) {
          q.action += ", requeued on " + std::to_string(j["num_nodes"].get<int64_t>()) +
                      " node(s): fewer spares";
        }
      } else if (e.event == "quarantine_skipped" && names(j, "nodes", q.host)) {
        q.action = "left out at a start, a spare trained instead" + job;
      } else if (e.event == "failed" && names(j, "nodes", q.host)) {
        q.action = "in the allocation with no spare: the job failed" + job;
      } else {
        continue;
      }
      break;
    }
  }
}

}  // namespace

StatusOr<RunSummary> AnalyzeRun(const std::string& run_dir, Env* env) {
  if (!env->IsDirectory(run_dir)) {
    return Status::InvalidArgument("run directory '" + run_dir +
                                   "' does not exist or is not a directory: give the "
                                   "run.dir of a training run");
  }
  RunSummary r;
  r.run_dir = run_dir;
  const RunLayout layout(run_dir);
  const std::string metrics = layout.metrics();
  const std::string restarts = layout.restarts();
  if (!env->FileExists(metrics) && !env->FileExists(restarts) &&
      !env->IsDirectory(layout.records_dir())) {
    return Status::InvalidArgument("'" + run_dir +
                                   "' has neither metrics.jsonl nor restarts.jsonl: not an "
                                   "ftrain run directory (give the run.dir of a training run)");
  }
  std::vector<std::pair<int, json>> lines;
  FT_RETURN_IF_ERROR(records::ReadJsonLines(metrics, &lines, &r.warnings, env));
  for (const auto& [no, j] : lines) {
    FT_ASSIGN_OR_RETURN(
        records::StepMetrics s,
        records::ParseMetricsRecord(j, metrics + ":" + std::to_string(no), &r.stragglers));
    r.steps.push_back(s);
  }
  if (r.steps.empty()) r.warnings.push_back(metrics + ": no steps recorded (yet)");
  // restarts.jsonl and its per-host spools, merged (records/restarts.h): a torn or malformed
  // record is skipped and named in the warnings, never fatal.
  FT_ASSIGN_OR_RETURN(records::Merged merged, records::ReadMerged(layout, env));
  for (auto& w : merged.warnings) r.warnings.push_back(std::move(w));
  for (const auto& l : merged.lines) {
    auto e = ParseEvent(l.json, l.where);
    if (!e.ok()) {
      r.warnings.push_back(e.status().message() + " (record skipped)");
      continue;
    }
    r.events.push_back(std::move(*e));
  }
  std::stable_sort(r.events.begin(), r.events.end(),
                   [](const RunEvent& a, const RunEvent& b) { return a.time < b.time; });
  FT_ASSIGN_OR_RETURN(r.ckpt_root, RunLayout(run_dir).CheckpointRoot());
  ckpt::CheckpointStore store(r.ckpt_root, env);
  auto list = store.List();
  // A missing or unreadable root only leaves the root's count out of the report.
  if (list.ok()) {
    for (const auto& c : *list) {
      if (c.status == ckpt::CheckpointStatus::kComplete) {
        ++r.checkpoints_in_root;
        if (!r.latest_in_root || c.step > *r.latest_in_root) r.latest_in_root = c.step;
      }
      if (c.status == ckpt::CheckpointStatus::kCorrupt) ++r.corrupt_in_root;
    }
  }
  ReadCheckpointTiers(run_dir, &r, env);
  FT_RETURN_IF_ERROR(ReadQuarantine(layout.quarantine(), &r, env));
  FT_RETURN_IF_ERROR(ReadHangs(layout.hangs(), &r, env));
  MatchQuarantineActions(&r);
  Analyze(&r);
  ReadLinkRecord(layout.commcheck(), &r);
  AnalyzeTimeBreakdown(&r);
  return r;
}

RunState RunStateOf(const RunSummary& r) {
  RunState st;
  if (r.events.empty()) return st;
  st.last = &r.events.back();
  if (st.last->event == "finished") {
    st.kind = "finished";
  } else if (st.last->event == "failed") {
    st.kind = "failed";
    const std::string from = r.latest_in_root
                                 ? "the checkpoint of step " + std::to_string(*r.latest_in_root)
                                 : "the start (no complete checkpoint)";
    st.advice = (st.last->cause == "config_error"
                     ? "fix the configuration or input (" + RunLayout(r.run_dir).config_error() +
                           " and the job's output say what)"
                     : "find the cause in the job's output (the ranks' errors), fix it") +
                ", then submit again: it resumes from " + from;
  } else {
    st.kind = "unfinished";
  }
  return st;
}

Percentiles ComputePercentiles(std::vector<double> v) {
  Percentiles p;
  p.count = static_cast<int>(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  p.p50 = rank(0.5);
  p.p95 = rank(0.95);
  p.max = v.back();
  return p;
}

}  // namespace ftrain::report
