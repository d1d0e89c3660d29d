// orch/dry_run.cc - the recorded-observations replay and the generated table (dry_run.h).
#include "orch/dry_run.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <sstream>

#include "orch/agent_policy.h"
#include "orch/job_policy.h"
#include "orch/settings.h"

namespace ftrain::orch {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, sep);) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

const std::map<std::string, Observation::Kind>& Kinds() {
  static const std::map<std::string, Observation::Kind> k = [] {
    std::map<std::string, Observation::Kind> m;
    for (int i = 0; i < kObservationKinds; ++i) {
      const auto kind = static_cast<Observation::Kind>(i);
      m[KindName(kind)] = kind;
    }
    return m;
  }();
  return k;
}

Status Set(Observation* o, const std::string& key, const std::string& v) {
  auto num = [&](int* out) -> Status {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0')
      return Status::InvalidArgument(key + "='" + v + "' is not a number");
    *out = static_cast<int>(n);
    return Status::Ok();
  };
  if (key == "job")
    o->job = v;
  else if (key == "restart_count")
    return num(&o->restart_count);
  else if (key == "resubmitted_from")
    o->resubmitted_from = v;
  else if (key == "replaced_by")
    o->replaced_by = v;
  else if (key == "last_stop")
    o->last_stop = v;
  else if (key == "batch_host")
    o->batch_host = v;
  else if (key == "nodes")
    o->nodes = Split(v, ',');
  else if (key == "spare_list")
    o->spare_list = Split(v, ',');
  else if (key == "known")
    o->known = v == "1" || v == "true";
  else if (key == "count")
    return num(&o->count);
  else if (key == "ok")
    o->ok = o->lease_ok = v == "1" || v == "true";
  else if (key == "epoch")
    o->epoch = std::atoll(v.c_str());
  else if (key == "holder")
    o->holder = v;
  else if (key == "rc")
    return num(&o->rc);
  else if (key == "record_error")
    o->record_error = v;
  else if (key == "config_error")
    o->config_error = v;
  else if (key == "signal")
    o->signal = v;
  else if (key == "node")
    o->node = v;
  else if (key == "verdict")
    o->verdict = v;
  else if (key == "state")
    o->job_state = v;
  else if (key == "reason")
    o->reason = v;
  else if (key == "checkpoint")
    o->checkpoint = v;
  else if (key == "rollbacks")
    return num(&o->rollbacks);
  else if (key == "node_requeues") {  // RUN/.node_requeues: NEWEST,COUNT (the comma: its space)
    o->node_requeues = v;
    std::replace(o->node_requeues.begin(), o->node_requeues.end(), ',', ' ');
  } else if (key == "detail")
    o->detail = v;
  else
    return Status::InvalidArgument("unknown key '" + key + "'");
  return Status::Ok();
}

}  // namespace

StatusOr<std::optional<Observation>> ParseObservationLine(const std::string& raw) {
  const std::string line = raw.substr(0, raw.find('#'));
  std::istringstream in(line);
  std::string t, kind;
  if (!(in >> t)) return std::optional<Observation>();
  if (!(in >> kind)) return Status::InvalidArgument("'" + raw + "': no observation kind");
  Observation o;
  char* end = nullptr;
  o.now = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || *end != '\0') {
    return Status::InvalidArgument("'" + raw + "': the first word must be the time in seconds");
  }
  o.wall = 1.7e9 + o.now;
  auto it = Kinds().find(kind);
  if (it == Kinds().end())
    return Status::InvalidArgument("'" + raw + "': unknown kind '" + kind + "'");
  o.kind = it->second;
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      if (o.kind == Observation::Kind::kSignal) {
        o.signal = kv;
        continue;
      }
      return Status::InvalidArgument("'" + raw + "': '" + kv + "' is not key=value");
    }
    Status s = Set(&o, kv.substr(0, eq), kv.substr(eq + 1));
    if (!s.ok()) return Status::InvalidArgument("'" + raw + "': " + s.message());
  }
  return std::optional<Observation>(o);
}

Status DryRun(const std::string& text, std::ostream& out) {
  std::map<std::string, std::string> env = {{"FTRAIN_CONFIG", "CONFIG"},
                                            {"FTRAIN_RUN_DIR", "RUN"},
                                            {"FTRAIN_DATA", "DATA"},
                                            {"FTRAIN_BIN", "ftrain"}};
  std::unique_ptr<JobPolicy> policy;
  std::istringstream in(text);
  int no = 0;
  for (std::string line; std::getline(in, line);) {
    ++no;
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "env") {
      if (policy)
        return Status::InvalidArgument("line " + std::to_string(no) +
                                       ": env after the first observation");
      for (std::string kv; words >> kv;)
        env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      continue;
    }
    auto o = ParseObservationLine(line);
    if (!o.ok())
      return Status::InvalidArgument("line " + std::to_string(no) + ": " + o.status().message());
    if (!o->has_value()) continue;
    if (!policy) {
      auto s = LoadJobSettings(MapEnv(env));
      if (!s.ok()) return s.status();
      policy = std::make_unique<JobPolicy>(*s);
    }
    const Decision d = policy->On(**o);
    out << ToText(**o) << "\n";
    out << "  -> " << (d.rule.empty() ? "(nothing)" : d.rule) << " ["
        << PhaseName(policy->state().phase) << "]\n";
    for (const auto& a : d.actions) out << "     " << ToText(a) << "\n";
  }
  return Status::Ok();
}

std::string HandledTable() {
  std::string s = "| what | `ftrain job` does | rule |\n|---|---|---|\n";
  for (const auto& r : kRules) {
    if (std::string(r.what).empty()) continue;
    s += std::string("| ") + r.what + " | " + r.does + " | `" + r.id + "` |\n";
  }
  return s;
}

namespace {

// The batch-host watcher's machine (WatcherPolicy, agent_policy.h), in the same form.
std::string WatcherMachineTable() {
  std::string s =
      "The batch-host watcher (`WatcherPolicy`):\n\n"
      "| state | observation | when | handler |\n|---|---|---|---|\n";
  for (const auto& r : WatcherPolicy::Machine()) {
    s += "| " + r.phases + " | `" + r.observation + "` | " + r.when + " | `" + r.handler + "` |\n";
  }
  s += "\nStates: ";
  for (int i = 0; i < WatcherPolicy::kStates; ++i) {
    s += std::string(i ? ", " : "") + "`" +
         WatcherPolicy::StateName(static_cast<WatcherPolicy::State>(i)) + "`";
  }
  s += ".\n\nObservations (`WatcherObs::Kind`): ";
  for (int k = 0; k < kWatcherObsKinds; ++k) {
    s += std::string(k ? ", " : "") + "`" + WatcherKindName(static_cast<WatcherObs::Kind>(k)) + "`";
  }
  s += ".\n\nActions (`WatcherAct::Kind`): ";
  for (int k = 0; k < kWatcherActKinds; ++k) {
    s += std::string(k ? ", " : "") + "`" + WatcherKindName(static_cast<WatcherAct::Kind>(k)) + "`";
  }
  return s + ".\n";
}

}  // namespace

std::string MachineTable() {
  std::string s = "| phase | observation | when | handler |\n|---|---|---|---|\n";
  for (const auto& r : JobPolicy::Machine()) {
    s += "| " + r.phases + " | `" + r.observation + "` | " + r.when + " | `" + r.handler + "` |\n";
  }
  s += "\nPhases: ";
  for (int p = 0; p <= static_cast<int>(Phase::kDone); ++p) {
    s += std::string(p ? ", " : "") + "`" + PhaseName(static_cast<Phase>(p)) + "`";
  }
  s += ".\n\nObservations (`Observation::Kind`): ";
  for (int k = 0; k < kObservationKinds; ++k) {
    s += std::string(k ? ", " : "") + "`" + KindName(static_cast<Observation::Kind>(k)) + "`";
  }
  s += ".\n\nActions (`Action::Kind`): ";
  for (int k = 0; k < kActionKinds; ++k) {
    s += std::string(k ? ", " : "") + "`" + KindName(static_cast<Action::Kind>(k)) + "`";
  }
  return s + ".\n\n" + WatcherMachineTable();
}

}  // namespace ftrain::orch
