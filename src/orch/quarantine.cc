// orch/quarantine.cc - which hosts the quarantine and hang records keep out, and the node-fault
// and health-probe lines (quarantine.h).
#include "orch/quarantine.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "records/lenient_json.h"

namespace ftrain::orch {
std::vector<NodeFaultLine> ParseNodeFaults(const std::string& text) {
  std::vector<NodeFaultLine> out;
  for (const auto& j : records::HostObjects(text, nullptr)) {
    NodeFaultLine f;
    records::ReadLenient(j, "host", &f.host);
    records::ReadLenient(j, "reason", &f.reason);
    records::ReadLenient(j, "rank", &f.rank);
    records::ReadLenient(j, "node", &f.node);
    records::ReadLenient(j, "time", &f.time);
    out.push_back(f);
  }
  return out;
}

std::vector<NodeFaultLine> NodeFaultsSince(const std::string& text, size_t from) {
  return ParseNodeFaults(text.substr(text.size() >= from ? from : 0));
}

std::vector<NodeFaultLine> ParseHealthProblems(const std::string& output) {
  static const std::string kPrefix = "ftrain health: node ";
  std::vector<NodeFaultLine> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kPrefix, 0) != 0) continue;
    const size_t colon = line.find(": ", kPrefix.size());
    if (colon == std::string::npos || colon == kPrefix.size()) continue;
    NodeFaultLine f;
    f.host = line.substr(kPrefix.size(), colon - kPrefix.size());
    f.reason = line.substr(colon + 2);
    out.push_back(f);
  }
  return out;
}

namespace {

// The lines that still speak for their host: those after the host's newest cleared line,
// cleared lines left out.
std::vector<QuarantineLine> SinceCleared(const std::vector<QuarantineLine>& lines) {
  std::map<std::string, size_t> cleared_at;  // host -> index of its newest cleared line
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].cause == records::kClearedCause) cleared_at[lines[i].host] = i;
  }
  std::vector<QuarantineLine> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto c = cleared_at.find(lines[i].host);
    if (c != cleared_at.end() && i <= c->second) continue;
    out.push_back(lines[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> QuarantinedHosts(const std::vector<QuarantineLine>& lines) {
  std::vector<std::string> out;
  for (const auto& q : SinceCleared(lines)) {
    if (std::find(out.begin(), out.end(), q.host) == out.end()) out.push_back(q.host);
  }
  return out;
}

namespace {

// The lines that still keep their host out at unix time `now`.
std::vector<QuarantineLine> InForce(const std::vector<QuarantineLine>& lines, double now,
                                    const QuarantineKeep& keep) {
  std::vector<QuarantineLine> kept;
  for (const auto& q : SinceCleared(lines)) {
    const double keep_s = q.cause == kFaultyCause ? keep.faulty_s
                          : q.cause == kHangCause ? keep.hang_s
                                                  : 0;
    const bool expired = keep_s > 0 && q.time >= 0 && now - q.time > keep_s;
    if (!expired) kept.push_back(q);
  }
  return kept;
}

}  // namespace

std::vector<std::string> QuarantinedHosts(const std::vector<QuarantineLine>& lines, double now,
                                          const QuarantineKeep& keep) {
  return QuarantinedHosts(InForce(lines, now, keep));
}

std::vector<std::string> FaultOnlyHosts(const std::vector<QuarantineLine>& lines, double now,
                                        const QuarantineKeep& keep,
                                        const std::vector<std::string>& hosts) {
  std::map<std::string, double> newest;  // host -> its newest line's time; -2: not fault-only
  for (const auto& q : InForce(lines, now, keep)) {
    if (std::find(hosts.begin(), hosts.end(), q.host) == hosts.end()) continue;
    double& t = newest.emplace(q.host, -1).first->second;
    if (q.cause != kFaultyCause) t = -2;
    if (t != -2) t = std::max(t, q.time);
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [host, t] : newest) {
    if (t != -2) order.push_back({t, host});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& o : order) out.push_back(o.second);
  return out;
}

std::vector<HangLine> HangsSinceCleared(const std::vector<HangLine>& hangs,
                                        const std::vector<QuarantineLine>& quarantine) {
  std::map<std::string, double> cleared;  // host -> time of its newest cleared line
  for (const auto& q : quarantine) {
    if (q.cause == records::kClearedCause) cleared[q.host] = std::max(cleared[q.host], q.time);
  }
  std::vector<HangLine> out;
  for (const auto& h : hangs) {
    auto c = cleared.find(h.host);
    if (c != cleared.end() && h.time >= 0 && h.time <= c->second) continue;
    out.push_back(h);
  }
  return out;
}

std::vector<HangLine> RecentHangs(const std::vector<HangLine>& hangs, double window_s) {
  if (window_s <= 0) return hangs;
  double newest = -1;
  for (const auto& h : hangs) newest = std::max(newest, h.time);
  std::vector<HangLine> out;
  for (const auto& h : hangs) {
    if (h.time < 0 || newest - h.time <= window_s) out.push_back(h);
  }
  return out;
}

std::vector<std::string> RepeatedHangHosts(const std::vector<HangLine>& hangs) {
  std::map<std::string, int> seen;
  std::vector<std::string> out;
  for (const auto& h : hangs) {
    if (++seen[h.host] == 2) out.push_back(h.host);
  }
  return out;
}

}  // namespace ftrain::orch
