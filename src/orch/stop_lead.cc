// orch/stop_lead.cc - the stop's lead from EndTime and GraceTime (stop_lead.h).
#include "orch/stop_lead.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "orch/process.h"

namespace ftrain::orch {
namespace {

// A USR1 this close to EndTime (or within its lead + 60 s) is the time limit's: no #SBATCH
// --signal lead is longer. One earlier is a preemption (Slurm moved the end to now + GraceTime
// after the start read it) or a user's signal.
constexpr double kNearEndS = 900;

std::string Secs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

}  // namespace

StopLead DeriveStopLead(double configured_s, bool overridden, const JobEnd& end, double now_wall) {
  if (overridden) return {configured_s, "FTRAIN_USR1_LEAD_S=" + Secs(configured_s)};
  if (end.end_wall > 0) {
    const double to_end = std::max(0.0, end.end_wall - now_wall);
    if (to_end <= std::max(kNearEndS, configured_s + 60)) {
      return {to_end, "the job's EndTime is " + Secs(to_end) + " s away"};
    }
    if (end.grace_s > 0) {  // 0: no preemption grace, so no USR1 before one: a user's signal
      return {std::min(to_end, end.grace_s),
              "the job's EndTime is " + Secs(to_end) +
                  " s away: a preemption, the partition's GraceTime is " + Secs(end.grace_s) +
                  " s"};
    }
    return {configured_s, "the job's EndTime is " + Secs(to_end) +
                              " s away and the partition has no known GraceTime: the default "
                              "lead " +
                              Secs(configured_s) + " s"};
  }
  if (end.grace_s > 0 && end.grace_s < configured_s) {
    return {end.grace_s,
            "EndTime unknown; the partition's GraceTime is " + Secs(end.grace_s) + " s"};
  }
  return {configured_s, "EndTime unknown: the default lead " + Secs(configured_s) + " s"};
}

std::optional<double> ParseSlurmTime(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  tm.tm_isdst = -1;  // Slurm prints local time: let mktime find the DST
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return static_cast<double>(t);
}

JobEnd ReadJobEnd(Slurm* slurm, const std::string& job) {
  JobEnd e;
  if (job.empty()) return e;
  auto info = slurm->ShowJobWithin(job, 5);
  if (!info.ok()) return e;  // unknown: the configured lead (stop_lead.h)
  if (auto t = ParseSlurmTime(info->Get("EndTime"))) e.end_wall = *t;
  const std::string partition = info->Get("Partition");
  if (partition.empty()) return e;
  RunResult r = RunCommand({"scontrol", "-o", "show", "partition", partition}, Bounded(5));
  if (!r.ok()) return e;
  const std::string grace = ParseShowJob(r.out).Get("GraceTime");
  char* stop = nullptr;
  const double g = std::strtod(grace.c_str(), &stop);
  if (!grace.empty() && stop != nullptr && *stop == '\0' && g >= 0) e.grace_s = g;
  return e;
}

}  // namespace ftrain::orch
