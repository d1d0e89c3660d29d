// orch/watcher_dry_run.cc - `ftrain agent --dry-run FILE`: the batch-host watcher's decisions
// (WatcherPolicy) for a recorded sequence of observations, printed, nothing run; the job's
// `ftrain job --dry-run` (dry_run.cc) in the watcher's words.
#include <map>
#include <memory>
#include <ostream>
#include <sstream>

#include "orch/agent_policy.h"
#include "orch/dry_run.h"
#include "orch/settings.h"

namespace ftrain::orch {
namespace {

const std::map<std::string, WatcherObs::Kind>& WatcherKinds() {
  static const std::map<std::string, WatcherObs::Kind> k = [] {
    std::map<std::string, WatcherObs::Kind> m;
    for (int i = 0; i < kWatcherObsKinds; ++i) {
      const auto kind = static_cast<WatcherObs::Kind>(i);
      m[WatcherKindName(kind)] = kind;
    }
    return m;
  }();
  return k;
}

Status SetWatcher(WatcherObs* o, const std::string& key, const std::string& v) {
  const bool yes = v == "1" || v == "true";
  std::map<std::string, bool*> flags = {{"left", &o->left}, {"known", &o->known},
                                        {"ok", &o->ok},     {"done", &o->done},
                                        {"dead", &o->dead}, {"can_run", &o->can_run}};
  std::map<std::string, std::string*> words = {{"by", &o->by},
                                               {"job", &o->job},
                                               {"error", &o->error},
                                               {"log", &o->log},
                                               {"options", &o->options}};
  if (flags.count(key)) {
    *flags[key] = yes;
  } else if (words.count(key)) {
    *words[key] = v;
  } else if (key == "count") {
    char* end = nullptr;
    o->count = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    if (end == v.c_str() || *end != '\0')
      return Status::InvalidArgument("count='" + v + "' is not a number");
  } else {
    return Status::InvalidArgument("unknown key '" + key + "'");
  }
  return Status::Ok();
}

// "SECONDS KIND key=value ..." -> the observation (none for a blank or comment line).
StatusOr<std::optional<WatcherObs>> ParseWatcherLine(const std::string& raw) {
  std::istringstream in(raw.substr(0, raw.find('#')));
  std::string t, kind;
  if (!(in >> t)) return std::optional<WatcherObs>();
  if (!(in >> kind)) return Status::InvalidArgument("'" + raw + "': no observation kind");
  WatcherObs o;
  char* end = nullptr;
  o.now = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || *end != '\0') {
    return Status::InvalidArgument("'" + raw + "': the first word must be the time in seconds");
  }
  o.wall = 1.7e9 + o.now;
  auto it = WatcherKinds().find(kind);
  if (it == WatcherKinds().end()) {
    return Status::InvalidArgument("'" + raw + "': unknown kind '" + kind + "'");
  }
  o.kind = it->second;
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos)
      return Status::InvalidArgument("'" + raw + "': '" + kv + "' is not key=value");
    Status s = SetWatcher(&o, kv.substr(0, eq), kv.substr(eq + 1));
    if (!s.ok()) return Status::InvalidArgument("'" + raw + "': " + s.message());
  }
  return std::optional<WatcherObs>(o);
}

std::string ActText(const WatcherAct& a) {
  std::string s = WatcherKindName(a.kind);
  if (!a.text.empty()) s += " " + a.text;
  if (a.kind == WatcherAct::Kind::kRecord) s += " " + a.record.event + "/" + a.record.cause;
  return s;
}

}  // namespace

Status WatcherDryRun(const std::string& text, std::ostream& out) {
  std::map<std::string, std::string> env = {
      {"FTRAIN_RUN_DIR", "RUN"}, {"SLURMD_NODENAME", "n2"}, {"FTRAIN_BATCH_HOST", "n1"}};
  std::unique_ptr<WatcherPolicy> policy;
  int rank = 1;
  std::istringstream in(text);
  int no = 0;
  for (std::string line; std::getline(in, line);) {
    const std::string where = "line " + std::to_string(++no) + ": ";
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "env" || first == "rank") {
      if (policy) return Status::InvalidArgument(where + first + " after the first observation");
      if (first == "rank" && !(words >> rank && (rank == 1 || rank == 2))) {
        return Status::InvalidArgument(where + "rank must be 1 (first watcher) or 2 (second)");
      }
      for (std::string kv; first == "env" && words >> kv;) {
        env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      }
      continue;
    }
    auto o = ParseWatcherLine(line);
    if (!o.ok()) return Status::InvalidArgument(where + o.status().message());
    if (!o->has_value()) continue;
    if (!policy) {
      FT_ASSIGN_OR_RETURN(AgentSettings s, LoadAgentSettings(MapEnv(env)));
      policy = std::make_unique<WatcherPolicy>(
          s, env.count("SLURM_JOB_ID") ? env["SLURM_JOB_ID"] : "42", 0);
      policy->SetRank(rank);
    }
    const WatcherDecision d = policy->On(**o);
    out << line.substr(0, line.find('#')) << "\n";
    out << "  -> " << (d.rule.empty() ? "(nothing)" : d.rule) << " ["
        << WatcherPolicy::StateName(policy->state()) << "]\n";
    for (const auto& a : d.acts) out << "     " << ActText(a) << "\n";
  }
  return Status::Ok();
}

}  // namespace ftrain::orch
