// orch/detect.cc - heartbeat silence, the verdict, and the looks of a watcher (detect.h).
#include "orch/detect.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "orch/probe_async.h"

namespace ftrain::orch {
namespace {

std::string OneDecimal(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s);
  return buf;
}

std::string Secs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

std::optional<HeartbeatLine> ParseHeartbeat(const std::string& text) {
  std::istringstream in(text);
  HeartbeatLine h;
  if (!(in >> h.counter >> h.pid)) return std::nullopt;
  in >> h.job;
  std::string extra;
  while (in >> extra) {
    if (extra.rfind("ckptd=", 0) == 0) h.ckptd = extra.substr(6);
    if (extra.rfind("start=", 0) == 0) h.start = extra.substr(6);
  }
  return h;
}

std::string FormatHeartbeat(const HeartbeatLine& h) {
  std::string s = h.counter + " " + h.pid + " " + h.job;
  if (!h.start.empty()) s += " start=" + h.start;
  if (!h.ckptd.empty()) s += " ckptd=" + h.ckptd;
  return s;
}

bool DaemonReady(const std::string& text, const std::string& job, int restart_count) {
  auto h = ParseHeartbeat(text);
  return h && h->job == job && h->start == std::to_string(restart_count) && h->ckptd == "up";
}

void HeartbeatMonitor::Reset(const std::vector<std::string>& nodes, double now) {
  for (const auto& n : nodes) {
    Seen& s = seen_[n];
    s.since = now;
    s.noted = false;
  }
}

double HeartbeatMonitor::Observe(const std::string& node, const std::string& text, double now) {
  auto it = seen_.find(node);
  if (it == seen_.end() || it->second.text != text) {
    Seen& s = seen_[node];
    s.text = text;
    s.since = now;
    s.noted = false;  // alive again: a later silence is noted anew
    return 0;
  }
  return now - it->second.since;
}

bool HeartbeatMonitor::Noted(const std::string& node) const {
  auto it = seen_.find(node);
  return it != seen_.end() && it->second.noted;
}

void HeartbeatMonitor::SetNoted(const std::string& node) { seen_[node].noted = true; }

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kAlive:
      return "alive";
    case Verdict::kLate:
      return "late";
    case Verdict::kDead:
      return "dead";
    case Verdict::kHung:
      return "hung";
  }
  return "?";
}

bool NeedsTaskProbe(const DetectSettings& s, const Evidence& e) {
  return e.tcp == "open" && e.silent_s >= s.hung_after_s;
}

namespace {
// No answer, or the network (not the node) said no: a blip or a death, told apart only by time.
bool NoAnswer(const Evidence& e) { return e.tcp == "timeout" || e.tcp == "unreachable"; }
}  // namespace

bool NeedsOthersProbe(const DetectSettings& s, const Evidence& e) {
  return NoAnswer(e) && e.silent_s >= std::max(s.blip_s, s.heartbeat_timeout_s);
}

Verdict Judge(const DetectSettings& s, const Evidence& e) {
  if (e.silent_s < s.heartbeat_timeout_s) return Verdict::kAlive;
  if (e.tcp == "refused") return Verdict::kDead;  // the node's kernel: nothing listens there
  if (NoAnswer(e)) {
    // A host that is gone and a network that is cut look the same from here: only a silence
    // longer than a blip, while others still answer this watcher, convicts.
    if (NeedsOthersProbe(s, e) && e.others_answer) return Verdict::kDead;
    return Verdict::kLate;
  }
  if (e.tcp == "open" && NeedsTaskProbe(s, e) && e.task_started.has_value() && !*e.task_started) {
    return Verdict::kHung;
  }
  return Verdict::kLate;
}

Evidence GatherEvidence(const DetectSettings& s, Prober* prober, const std::string& node,
                        const std::vector<std::string>& nodes, double silent_s) {
  Evidence e;
  e.silent_s = silent_s;
  e.tcp = prober->ProbeTcp(node);
  if (NeedsOthersProbe(s, e)) e.others_answer = prober->OthersAnswer(nodes, node);
  if (NeedsTaskProbe(s, e)) e.task_started = prober->ProbeTask(node);
  return e;
}

Finding Detector::Declare(const std::string& node, Verdict v, const Evidence& e) {
  Finding f;
  f.node = node;
  f.verdict = v;
  const std::string silent = OneDecimal(e.silent_s);
  const std::string address = e.address.empty() ? prober_->SlurmdAddress(node) : e.address;
  std::string why = "heartbeat silent " + silent + " s (limit " + Secs(s_.heartbeat_timeout_s) +
                    " s); slurmd " + address + " " + e.tcp;
  if (v == Verdict::kHung) {
    why += "; a task on it did not start within " + Secs(s_.probe_timeout_s + 3) +
           " s (silent over " + Secs(s_.hung_after_s) + " s)";
  }
  if (v == Verdict::kDead && NoAnswer(e)) {
    why += " past the " + Secs(s_.blip_s) + " s blip window, while other nodes answer";
  }
  char probe_s[32];
  std::snprintf(probe_s, sizeof(probe_s), "%.2f", std::max(0.0, e.probe_s));
  f.fields = {records::Num("detected", UnixSeconds(env_), 6),
              records::Str("detected_by", "ftrain"),
              records::Str("verdict", VerdictName(v)),
              records::Raw("heartbeat_silent_s", silent),
              records::Str("slurmd", e.tcp),
              records::Raw("probe_s", probe_s),
              records::Str("evidence", why)};
  f.log = "node " + node + " declared " + VerdictName(v) + ": " + why;
  return f;
}

Finding Detector::Late(const std::string& n, const Evidence& e) const {
  Finding f;
  f.node = n;
  f.verdict = Verdict::kLate;
  const std::string silent = OneDecimal(e.silent_s);
  if (NoAnswer(e)) {
    f.log = "node " + n + ": heartbeat silent " + silent + " s and its slurmd does not answer (" +
            e.tcp + "): a network or file-system blip, or a death; declared dead once silent for " +
            Secs(std::max(s_.blip_s, s_.heartbeat_timeout_s)) + " s if other nodes still answer";
  } else {
    f.log = "node " + n + ": heartbeat silent " + silent + " s but its slurmd answers (" + e.tcp +
            "): slow or paused, not dead; declared lost after " + Secs(s_.hung_after_s) +
            " s of silence if its slurmd stops answering too";
  }
  f.fields = {records::Str("node", n), records::Raw("silent_s", silent),
              records::Str("slurmd", e.tcp)};
  return f;
}

std::vector<Finding> Detector::Look(const std::vector<std::string>& nodes) {
  std::vector<Finding> late;
  for (const auto& n : nodes) {
    const double now = NowSeconds(env_);
    const double silent_s = monitor_.Observe(n, prober_->ReadHeartbeat(n), now);
    if (silent_s < s_.heartbeat_timeout_s) continue;
    Evidence e;
    if (async_ != nullptr) {
      // The answer asked during this silence, if one came; then the next question.
      std::optional<Evidence> got = async_->Take(n, now - silent_s);
      async_->Ask(n, silent_s, nodes, now);
      if (!got) continue;
      e = *got;  // judged as of when it was asked: its silence, its probes
    } else {
      const double t0 = NowSeconds(env_);
      e = GatherEvidence(s_, prober_, n, nodes, silent_s);
      e.probe_s = NowSeconds(env_) - t0;
    }
    const Verdict v = Judge(s_, e);
    if (v == Verdict::kDead || v == Verdict::kHung) return {Declare(n, v, e)};
    if (v != Verdict::kLate || monitor_.Noted(n)) continue;
    monitor_.SetNoted(n);
    late.push_back(Late(n, e));
  }
  return late;
}

std::optional<std::map<std::string, std::string>> Detector::ProbeAll(
    const std::vector<std::string>& nodes, const std::function<bool(double)>& sleep) {
  std::map<std::string, std::string> tcp;
  if (async_ == nullptr) {
    for (const auto& n : nodes) tcp[n] = prober_->ProbeTcp(n);
    return tcp;
  }
  // Asked now (silent 0: the slurmd only); an answer asked before now is another question's.
  const double asked = NowSeconds(env_) - 1e-9;
  while (true) {
    for (const auto& n : nodes) {
      if (tcp.count(n)) continue;
      if (auto e = async_->Take(n, asked)) {
        tcp[n] = e->tcp;
      } else {
        async_->Ask(n, 0, nodes, NowSeconds(env_));
      }
    }
    if (tcp.size() == nodes.size()) return tcp;
    if (!sleep(0.05)) return std::nullopt;  // each probe is bounded: this ends
  }
}

std::optional<Finding> Detector::ConfirmAfterFailure(
    const std::vector<std::string>& nodes, const std::function<bool(double)>& sleep,
    const std::function<void(const std::string&)>& log) {
  std::vector<std::string> suspects;
  bool timeouts = false;
  const auto probed = ProbeAll(nodes, sleep);
  if (!probed) return std::nullopt;
  for (const auto& n : nodes) {
    const std::string tcp = probed->at(n);
    if (tcp != "open") suspects.push_back(n);
    timeouts = timeouts || tcp == "timeout" || tcp == "unreachable";
  }
  if (suspects.empty()) return std::nullopt;
  std::string names;
  for (const auto& n : suspects) names += (names.empty() ? "" : " ") + n;
  log("training step failed and the slurmd of " + names +
      " does not answer: confirming by "
      "heartbeat");
  const double window =
      (timeouts ? std::max(s_.blip_s, s_.heartbeat_timeout_s) : s_.heartbeat_timeout_s) + 2;
  const double deadline = NowSeconds(env_) + window;
  while (NowSeconds(env_) < deadline) {
    for (const auto& f : Look(suspects)) {
      if (f.verdict == Verdict::kDead || f.verdict == Verdict::kHung) return f;
    }
    if (!sleep(0.5)) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace ftrain::orch
