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

std::vector<std::string> QuarantinedHosts(const std::vector<QuarantineLine>& lines) {
  std::vector<std::string> out;
  for (const auto& q : lines) {
    if (std::find(out.begin(), out.end(), q.host) == out.end()) out.push_back(q.host);
  }
  return out;
}

std::vector<std::string> QuarantinedHosts(const std::vector<QuarantineLine>& lines, double now,
                                          double faulty_keep_s) {
  std::vector<QuarantineLine> kept;
  for (const auto& q : lines) {
    const bool expired =
        q.cause == kFaultyCause && faulty_keep_s > 0 && q.time >= 0 && now - q.time > faulty_keep_s;
    if (!expired) kept.push_back(q);
  }
  return QuarantinedHosts(kept);
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
