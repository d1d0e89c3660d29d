// Rank discovery from environment variables (Slurm step, torchrun) and hostlist expansion.
#include "comm/world.h"

#include <unistd.h>

#include <algorithm>

#include "core/config.h"

extern char** environ;

namespace ftrain::comm {
namespace {

// Reads an integer variable; absent -> *present=false.
Status GetIntVar(const EnvMap& env, const std::string& name, int* out, bool* present) {
  auto it = env.find(name);
  *present = it != env.end();
  if (!*present) return Status::Ok();
  int64_t v;
  if (!ParseInt64(it->second, &v) || v < 0 || v > (1 << 30)) {
    return Status::InvalidArgument("environment variable " + name + "='" + it->second +
                                   "' is not a non-negative integer");
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status RequireIntVar(const EnvMap& env, const std::string& name, const std::string& why, int* out) {
  bool present = false;
  FT_RETURN_IF_ERROR(GetIntVar(env, name, out, &present));
  if (!present) {
    return Status::InvalidArgument("environment variable " + name + " is missing (" + why + ")");
  }
  return Status::Ok();
}

// "2(x3),1" -> per-node task counts {2,2,2,1}.
StatusOr<std::vector<int>> ParseTasksPerNode(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int64_t count = 0, repeat = 1;
    size_t paren = item.find("(x");
    std::string count_text = item.substr(0, paren);
    if (paren != std::string::npos) {
      if (item.back() != ')' ||
          !ParseInt64(item.substr(paren + 2, item.size() - paren - 3), &repeat)) {
        return Status::InvalidArgument("SLURM_TASKS_PER_NODE='" + text + "' is malformed");
      }
    }
    if (!ParseInt64(count_text, &count) || count < 0 || repeat < 1) {
      return Status::InvalidArgument("SLURM_TASKS_PER_NODE='" + text + "' is malformed");
    }
    for (int64_t i = 0; i < repeat; ++i) out.push_back(static_cast<int>(count));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

StatusOr<WorldInfo> FromSlurm(const EnvMap& env) {
  WorldInfo w;
  w.source = WorldSource::kSlurm;
  const std::string why = "expected inside an srun job step";
  FT_RETURN_IF_ERROR(RequireIntVar(env, "SLURM_PROCID", why, &w.rank));
  int ntasks = 0;
  bool present = false;
  FT_RETURN_IF_ERROR(GetIntVar(env, "SLURM_STEP_NUM_TASKS", &ntasks, &present));
  if (!present) FT_RETURN_IF_ERROR(RequireIntVar(env, "SLURM_NTASKS", why, &ntasks));
  w.world_size = ntasks;
  FT_RETURN_IF_ERROR(RequireIntVar(env, "SLURM_LOCALID", why, &w.local_rank));
  FT_RETURN_IF_ERROR(RequireIntVar(env, "SLURM_NODEID", why, &w.node_rank));
  int nnodes = 1;
  FT_RETURN_IF_ERROR(GetIntVar(env, "SLURM_STEP_NUM_NODES", &nnodes, &present));
  if (!present) FT_RETURN_IF_ERROR(GetIntVar(env, "SLURM_NNODES", &nnodes, &present));
  w.num_nodes = present ? nnodes : 1;
  std::string tpn_var =
      env.count("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  auto tpn = env.find(tpn_var);
  if (tpn != env.end()) {
    FT_ASSIGN_OR_RETURN(std::vector<int> counts, ParseTasksPerNode(tpn->second));
    if (w.node_rank < static_cast<int>(counts.size())) {
      w.local_world_size = counts[static_cast<size_t>(w.node_rank)];
    }
  } else {
    w.local_world_size = w.world_size / std::max(1, w.num_nodes);
  }
  auto job = env.find("SLURM_JOB_ID");
  if (job != env.end()) w.job_id = job->second;
  // The env rendezvous: MASTER_ADDR/PORT when set, else the first node of the step and a
  // port derived from the job id (so two jobs sharing a node do not collide).
  auto addr = env.find("MASTER_ADDR");
  if (addr != env.end()) {
    w.master_addr = addr->second;
  } else {
    auto nodelist = env.find("SLURM_STEP_NODELIST");
    if (nodelist == env.end()) nodelist = env.find("SLURM_JOB_NODELIST");
    if (nodelist != env.end()) {
      FT_ASSIGN_OR_RETURN(std::vector<std::string> hosts, ExpandHostlist(nodelist->second));
      if (!hosts.empty()) w.master_addr = hosts.front();
    }
  }
  int port = 0;
  FT_RETURN_IF_ERROR(GetIntVar(env, "MASTER_PORT", &port, &present));
  if (present) {
    w.master_port = port;
  } else {
    int64_t job_num = 0;
    ParseInt64(w.job_id, &job_num);  // a non-numeric id just gives the base port
    w.master_port = 29500 + static_cast<int>(job_num % 2000);
  }
  return w;
}

StatusOr<WorldInfo> FromTorchrun(const EnvMap& env) {
  WorldInfo w;
  w.source = WorldSource::kTorchrun;
  const std::string why = "the torchrun-style environment needs RANK and WORLD_SIZE together";
  FT_RETURN_IF_ERROR(RequireIntVar(env, "RANK", why, &w.rank));
  FT_RETURN_IF_ERROR(RequireIntVar(env, "WORLD_SIZE", why, &w.world_size));
  bool present = false;
  FT_RETURN_IF_ERROR(GetIntVar(env, "LOCAL_RANK", &w.local_rank, &present));
  if (!present) w.local_rank = w.rank;
  FT_RETURN_IF_ERROR(GetIntVar(env, "LOCAL_WORLD_SIZE", &w.local_world_size, &present));
  if (!present) w.local_world_size = w.world_size;
  FT_RETURN_IF_ERROR(GetIntVar(env, "GROUP_RANK", &w.node_rank, &present));
  if (!present && w.local_world_size > 0) w.node_rank = w.rank / w.local_world_size;
  if (w.local_world_size > 0) {
    w.num_nodes = (w.world_size + w.local_world_size - 1) / w.local_world_size;
  }
  auto addr = env.find("MASTER_ADDR");
  if (addr == env.end() || addr->second.empty()) {
    if (w.world_size > 1) {
      return Status::InvalidArgument(
          "environment variable MASTER_ADDR is missing (RANK/WORLD_SIZE are set, so the "
          "rendezvous needs MASTER_ADDR and MASTER_PORT)");
    }
  } else {
    w.master_addr = addr->second;
  }
  FT_RETURN_IF_ERROR(GetIntVar(env, "MASTER_PORT", &w.master_port, &present));
  if (!present && w.world_size > 1) {
    return Status::InvalidArgument("environment variable MASTER_PORT is missing");
  }
  return w;
}

}  // namespace

const char* WorldSourceName(WorldSource s) {
  switch (s) {
    case WorldSource::kPmix:
      return "pmix";
    case WorldSource::kSlurm:
      return "slurm";
    case WorldSource::kTorchrun:
      return "env";
    case WorldSource::kSingle:
      return "single";
  }
  return "?";
}

EnvMap CurrentEnviron() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

bool HasPmixEnv(const EnvMap& env) {
  return env.count("PMIX_RANK") > 0 && env.count("PMIX_NAMESPACE") > 0;
}

StatusOr<WorldInfo> DiscoverFromEnv(const EnvMap& env) {
  StatusOr<WorldInfo> w = Status::Ok();
  std::string origin;
  // A Slurm *step* (srun) sets SLURM_STEP_ID; the batch script alone does not, and there
  // SLURM_PROCID=0/SLURM_NTASKS=N would wrongly describe a multi-rank world.
  if (env.count("SLURM_STEP_ID") && env.count("SLURM_PROCID") && !env.count("RANK")) {
    w = FromSlurm(env);
    origin = "Slurm environment";
  } else if (env.count("RANK") || env.count("WORLD_SIZE")) {
    w = FromTorchrun(env);
    origin = "RANK/WORLD_SIZE environment";
  } else {
    WorldInfo single;
    single.source = WorldSource::kSingle;
    return single;
  }
  if (!w.ok()) return w.status();
  FT_RETURN_IF_ERROR(ValidateWorld(*w, origin));
  return w;
}

std::vector<int> NodesByLowestRank(const std::vector<int>& node_of_rank) {
  std::map<int, int> index_of_id;  // launcher node id -> index by lowest rank
  std::vector<int> out;
  out.reserve(node_of_rank.size());
  for (int id : node_of_rank) {  // ranks in order: a node's first rank is its lowest
    auto it = index_of_id.emplace(id, static_cast<int>(index_of_id.size())).first;
    out.push_back(it->second);
  }
  return out;
}

Status ValidateWorld(const WorldInfo& w, const std::string& origin) {
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(origin + ": " + what + " (" + DescribeWorld(w) + ")");
  };
  if (w.world_size < 1) return bad("world size must be at least 1");
  if (w.rank < 0 || w.rank >= w.world_size) return bad("rank is not below the world size");
  if (w.local_world_size < 1 || w.local_world_size > w.world_size) {
    return bad("local world size must be in [1, world size]");
  }
  if (w.local_rank < 0 || w.local_rank >= w.local_world_size) {
    return bad("local rank is not below the local world size");
  }
  if (w.num_nodes < 1 || w.node_rank < 0 || w.node_rank >= w.num_nodes) {
    return bad("node rank is not below the number of nodes");
  }
  return Status::Ok();
}

std::string DescribeWorld(const WorldInfo& w) {
  return std::string("source=") + WorldSourceName(w.source) + " rank=" + std::to_string(w.rank) +
         "/" + std::to_string(w.world_size) + " local=" + std::to_string(w.local_rank) + "/" +
         std::to_string(w.local_world_size) + " node=" + std::to_string(w.node_rank) + "/" +
         std::to_string(w.num_nodes);
}

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list) {
  std::vector<std::string> hosts;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("hostlist '" + list + "': " + why);
  };
  size_t i = 0;
  while (i < list.size()) {
    // One item: prefix[ranges]suffix? ; commas inside brackets belong to the ranges.
    size_t end = i;
    int depth = 0;
    while (end < list.size() && (list[end] != ',' || depth > 0)) {
      if (list[end] == '[') ++depth;
      if (list[end] == ']') --depth;
      if (depth < 0) return bad("unbalanced ']'");
      ++end;
    }
    if (depth != 0) return bad("unbalanced '['");
    std::string item = list.substr(i, end - i);
    i = end + 1;
    if (item.empty()) continue;
    size_t lb = item.find('[');
    if (lb == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    size_t rb = item.find(']', lb);
    std::string prefix = item.substr(0, lb);
    std::string suffix = item.substr(rb + 1);
    std::string ranges = item.substr(lb + 1, rb - lb - 1);
    size_t p = 0;
    while (p <= ranges.size()) {
      size_t c = ranges.find(',', p);
      std::string r = ranges.substr(p, c == std::string::npos ? std::string::npos : c - p);
      size_t dash = r.find('-');
      std::string lo_s = r.substr(0, dash);
      std::string hi_s = dash == std::string::npos ? lo_s : r.substr(dash + 1);
      int64_t lo, hi;
      if (!ParseInt64(lo_s, &lo) || !ParseInt64(hi_s, &hi) || lo < 0 || hi < lo ||
          hi - lo > 100000) {
        return bad("bad range '" + r + "'");
      }
      for (int64_t n = lo; n <= hi; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < lo_s.size()) num = std::string(lo_s.size() - num.size(), '0') + num;
        hosts.push_back(prefix + num + suffix);
      }
      if (c == std::string::npos) break;
      p = c + 1;
    }
  }
  return hosts;
}

}  // namespace ftrain::comm
