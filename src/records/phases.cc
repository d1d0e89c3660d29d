// The phase members of a metrics.jsonl record: writing and reading them, and stragglers
// grouped by node (phases.h).
#include "records/phases.h"

#include <algorithm>
#include <cstdio>

namespace ftrain::records {

using json = nlohmann::json;

namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string PhaseObject(const double* v) {
  std::string out = "{";
  for (int p = 0; p < kNumPhases; ++p) {
    out += std::string(p > 0 ? "," : "") + Quote(PhaseKey(p)) + ":" + Num(v[p]);
  }
  return out + "}";
}

std::string RanksObject(const PhaseSummary& s) {
  std::string out = "{\"host\":[";
  for (size_t r = 0; r < s.hosts.size(); ++r) out += (r > 0 ? "," : "") + Quote(s.hosts[r]);
  out += "]";
  for (int p = 0; p < kNumPhases; ++p) {
    out += std::string(",") + Quote(PhaseKey(p)) + ":[";
    for (size_t r = 0; r < s.ranks.size(); ++r) out += (r > 0 ? "," : "") + Num(s.ranks[r].s[p]);
    out += "]";
  }
  out += ",\"read_bytes\":[";
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    out += (r > 0 ? "," : "") + std::to_string(static_cast<int64_t>(s.ranks[r].read_bytes));
  }
  return out + "]}";
}

Status PhaseArray(const json& obj, const std::string& where, double* v) {
  if (!obj.is_object()) return Status::Corruption(where + ": 'phases' members must be objects");
  for (int p = 0; p < kNumPhases; ++p) {
    auto it = obj.find(PhaseKey(p));
    if (it != obj.end() && it->is_number()) v[p] = it->get<double>();
  }
  return Status::Ok();
}

Status ParseRanks(const json& ranks, const std::string& where, PhaseSummary* ph) {
  if (!ranks.is_object() || !ranks.contains("host") || !ranks["host"].is_array()) {
    return Status::Corruption(where + ": 'ranks' must be an object with a 'host' array");
  }
  const size_t n = ranks["host"].size();
  ph->ranks.assign(n, RankPhases());
  for (const auto& h : ranks["host"])
    ph->hosts.push_back(h.is_string() ? h.get<std::string>() : "?");
  for (int p = 0; p < kNumPhases; ++p) {
    auto it = ranks.find(PhaseKey(p));
    if (it == ranks.end()) continue;
    if (!it->is_array() || it->size() != n) {
      return Status::Corruption(where + ": 'ranks." + PhaseKey(p) + "' must hold " +
                                std::to_string(n) + " numbers (one per host)");
    }
    for (size_t r = 0; r < n; ++r) {
      ph->ranks[r].s[p] = (*it)[r].is_number() ? (*it)[r].get<double>() : 0;
    }
  }
  return Status::Ok();
}

}  // namespace

const char* PhaseKey(int phase) {
  static const char* const kKeys[kNumPhases] = {"data_wait_s", "compute_s",       "comm_wait_s",
                                                "optimizer_s", "boundary_wait_s", "ckpt_stall_s",
                                                "other_s"};
  return phase >= 0 && phase < kNumPhases ? kKeys[phase] : "?";
}

std::string PhaseSummaryJson(const PhaseSummary& s) {
  std::string out =
      ",\"phases\":{\"median\":" + PhaseObject(s.median) + ",\"max\":" + PhaseObject(s.max) +
      ",\"busy_median_s\":" + Num(s.busy_median_s) + ",\"busy_max_s\":" + Num(s.busy_max_s) +
      ",\"slowest_rank\":" + std::to_string(s.slowest_rank) +
      ",\"slowest_host\":" + Quote(s.slowest_host) +
      ",\"comm_bytes\":" + std::to_string(static_cast<int64_t>(s.comm_bytes)) +
      ",\"read_bytes\":" + std::to_string(static_cast<int64_t>(s.read_bytes)) +
      ",\"nodes\":" + std::to_string(s.nodes) + "}";
  if (!s.ranks.empty()) out += ",\"ranks\":" + RanksObject(s);
  if (!s.named.empty()) {
    out += ",\"stragglers\":[";
    for (size_t i = 0; i < s.named.size(); ++i) {
      const Straggler& g = s.named[i];
      out += std::string(i > 0 ? "," : "") + "{\"rank\":" + std::to_string(g.rank) +
             ",\"host\":" + Quote(g.host) + ",\"busy_s\":" + Num(g.busy_s) +
             ",\"median_s\":" + Num(g.median_s) + ",\"cause\":" + Quote(g.cause) + "}";
    }
    out += "]";
  }
  return out;
}

Status ParsePhaseMembers(const json& j, const std::string& where, int64_t step,
                         std::shared_ptr<const PhaseSummary>* phases,
                         std::vector<Straggler>* named) {
  auto it = j.find("phases");
  if (it != j.end()) {
    if (!it->is_object()) return Status::Corruption(where + ": 'phases' is not an object");
    auto ph = std::make_shared<PhaseSummary>();
    if (it->contains("median")) FT_RETURN_IF_ERROR(PhaseArray((*it)["median"], where, ph->median));
    if (it->contains("max")) FT_RETURN_IF_ERROR(PhaseArray((*it)["max"], where, ph->max));
    ph->busy_median_s = it->value("busy_median_s", 0.0);
    ph->busy_max_s = it->value("busy_max_s", 0.0);
    ph->comm_bytes = it->value("comm_bytes", 0.0);
    ph->read_bytes = it->value("read_bytes", 0.0);
    ph->nodes = std::max(1, it->value("nodes", 1));
    ph->slowest_rank = it->value("slowest_rank", 0);
    ph->slowest_host = it->value("slowest_host", std::string());
    if (j.contains("ranks")) FT_RETURN_IF_ERROR(ParseRanks(j["ranks"], where, ph.get()));
    *phases = std::move(ph);
  }
  auto st = j.find("stragglers");
  if (st != j.end() && st->is_array()) {
    for (const auto& g : *st) {
      if (!g.is_object()) continue;
      Straggler n;
      n.step = step;
      n.rank = g.value("rank", -1);
      n.host = g.value("host", std::string("?"));
      n.cause = g.value("cause", std::string());
      n.busy_s = g.value("busy_s", 0.0);
      n.median_s = g.value("median_s", 0.0);
      named->push_back(n);
    }
  }
  return Status::Ok();
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string StragglerGroupTitle(const StragglerGroup& g) {
  if (!g.node) return "rank " + std::to_string(g.ranks.front()) + " on " + g.host;
  std::string of = std::to_string(g.ranks.size());
  if (g.host_ranks > 0) of += " of its " + std::to_string(g.host_ranks);
  return "node " + g.host + ": ranks " + RankList(g.ranks) + " (" + of + ")";
}

std::vector<StragglerGroup> GroupStragglers(const std::vector<Straggler>& named,
                                            const std::vector<std::string>& rank_hosts) {
  std::vector<std::string> order;  // hosts in the order their first straggler was named
  for (const Straggler& g : named) {
    if (std::find(order.begin(), order.end(), g.host) == order.end()) order.push_back(g.host);
  }
  std::vector<StragglerGroup> out;
  for (const std::string& host : order) {
    std::vector<const Straggler*> on;
    for (const Straggler& g : named) {
      if (g.host == host) on.push_back(&g);
    }
    const int host_ranks = static_cast<int>(std::count(rank_hosts.begin(), rank_hosts.end(), host));
    const int total = host_ranks > 0 ? host_ranks : static_cast<int>(on.size());
    const bool node = on.size() >= 2 && 2 * static_cast<int>(on.size()) > total;
    auto group_of = [&](const std::vector<const Straggler*>& members) {
      StragglerGroup grp;
      grp.host = host;
      grp.host_ranks = host_ranks;
      grp.node = node;
      grp.step = members.front()->step;
      std::vector<std::string> causes;
      for (const Straggler* m : members) {
        grp.ranks.push_back(m->rank);
        grp.busy_s += m->busy_s / static_cast<double>(members.size());
        grp.median_s += m->median_s / static_cast<double>(members.size());
        grp.step = std::min(grp.step, m->step);
        causes.push_back(m->cause);
      }
      std::sort(grp.ranks.begin(), grp.ranks.end());
      size_t best = 0;
      for (const std::string& c : causes) {
        const size_t k = static_cast<size_t>(std::count(causes.begin(), causes.end(), c));
        if (k > best) best = k, grp.cause = c;
      }
      return grp;
    };
    if (node) {
      out.push_back(group_of(on));
    } else {
      for (const Straggler* m : on) out.push_back(group_of({m}));
    }
  }
  return out;
}

}  // namespace ftrain::records
