// orch/quarantine.cc - parsing the quarantine and hang records (quarantine.h).
#include "orch/quarantine.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

namespace ftrain::orch {
namespace {

template <typename T>
void Read(const nlohmann::json& j, const char* key, T* out) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (v.is_string()) *out = v.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) *out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (v.is_number()) *out = v.get<double>();
  } else {
    if (v.is_number_integer()) *out = v.get<T>();
  }
}

// Each line of `text` that is a JSON object with a non-empty "host".
std::vector<nlohmann::json> Objects(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("host") || !j["host"].is_string() ||
        j["host"].get<std::string>().empty()) {
      continue;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

std::vector<QuarantineLine> ParseQuarantine(const std::string& text) {
  std::vector<QuarantineLine> out;
  for (const auto& j : Objects(text)) {
    QuarantineLine q;
    Read(j, "host", &q.host);
    Read(j, "cause", &q.cause);
    Read(j, "step", &q.step);
    Read(j, "rank", &q.rank);
    Read(j, "by_majority", &q.by_majority);
    Read(j, "time", &q.time);
    out.push_back(q);
  }
  return out;
}

std::vector<HangLine> ParseHangs(const std::string& text) {
  std::vector<HangLine> out;
  for (const auto& j : Objects(text)) {
    HangLine h;
    Read(j, "host", &h.host);
    Read(j, "step", &h.step);
    Read(j, "rank", &h.rank);
    Read(j, "node", &h.node);
    Read(j, "time", &h.time);
    out.push_back(h);
  }
  return out;
}

std::vector<NodeFaultLine> ParseNodeFaults(const std::string& text) {
  std::vector<NodeFaultLine> out;
  for (const auto& j : Objects(text)) {
    NodeFaultLine f;
    Read(j, "host", &f.host);
    Read(j, "reason", &f.reason);
    Read(j, "rank", &f.rank);
    Read(j, "node", &f.node);
    Read(j, "time", &f.time);
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
