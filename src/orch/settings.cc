// orch/settings.cc - FTRAIN_* variables into JobSettings / AgentSettings, each checked.
#include "orch/settings.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/config.h"
#include "orch/quarantine.h"
#include "train/config/train_config.h"

namespace ftrain::orch {
namespace {

class Reader {
 public:
  explicit Reader(const Getenv& env) : env_(env) {}
  std::string Str(const std::string& name, const std::string& def) const {
    const std::string v = env_(name);
    return v.empty() ? def : v;
  }
  Status Required(const std::string& name, const std::string& what, std::string* out) const {
    *out = env_(name);
    if (out->empty()) return Status::InvalidArgument("set " + name + " to " + what);
    return Status::Ok();
  }
  Status Seconds(const std::string& name, double def, double* out) const {
    const std::string v = env_(name);
    if (v.empty()) {
      *out = def;
      return Status::Ok();
    }
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !std::isfinite(d) || d < 0) {
      return Status::InvalidArgument(name + "='" + v + "' is not a number of seconds >= 0");
    }
    *out = d;
    return Status::Ok();
  }
  Status Count(const std::string& name, int def, int* out) const {
    const std::string v = env_(name);
    if (v.empty()) {
      *out = def;
      return Status::Ok();
    }
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 0 || n > 1000000) {
      return Status::InvalidArgument(name + "='" + v + "' is not a count (an integer >= 0)");
    }
    *out = static_cast<int>(n);
    return Status::Ok();
  }
  Status Flag(const std::string& name, bool def, bool* out) const {
    const std::string v = env_(name);
    if (v.empty()) {
      *out = def;
      return Status::Ok();
    }
    if (v != "0" && v != "1") return Status::InvalidArgument(name + "='" + v + "' is not 0 or 1");
    *out = v == "1";
    return Status::Ok();
  }

 private:
  const Getenv& env_;
};

Status LoadDetect(const Reader& r, DetectSettings* d) {
  FT_RETURN_IF_ERROR(r.Flag("FTRAIN_DETECT", true, &d->on));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HEARTBEAT_TIMEOUT_S", 3, &d->heartbeat_timeout_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_PROBE_TIMEOUT_S", 2, &d->probe_timeout_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HUNG_AFTER_S", 60, &d->hung_after_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_BLIP_S", 10, &d->blip_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HEARTBEAT_PERIOD_S", 1, &d->heartbeat_period_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_DETECT_PERIOD_S", 0.5, &d->detect_period_s));
  if (d->heartbeat_period_s <= 0 || d->detect_period_s <= 0) {
    return Status::InvalidArgument(
        "FTRAIN_HEARTBEAT_PERIOD_S and FTRAIN_DETECT_PERIOD_S must be above 0");
  }
  return Status::Ok();
}

std::string HostShortName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

}  // namespace

Getenv ProcessEnv() {
  return [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return v == nullptr ? std::string() : std::string(v);
  };
}

std::string EnvOr(const std::string& name, const std::string& def) {
  const std::string v = ProcessEnv()(name);
  return v.empty() ? def : v;
}

Getenv MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

namespace {

// What the controller needs from the run's config as the trainer will read it: all false when
// the trainer will refuse the config (it exits 2 and says why; the job fails as a config error).
struct ConfigFacts {
  bool memory_tier = false;   // ckpt.memory_every_steps or ckpt.memory_every_seconds > 0
  bool gpus = false;          // train.device = cuda
  bool exact_reduce = false;  // dist.reduce = exact
};

ConfigFacts ReadConfigFacts(const JobSettings& s) {
  ConfigFacts f;
  auto t = TrainerConfig(s);
  if (!t.ok()) return f;
  f.memory_tier = t->ckpt.MemoryTierOn();
  f.gpus = t->train.device == train::Device::kCuda;
  f.exact_reduce = t->dist.exact_reduce;
  return f;
}

}  // namespace

std::vector<std::string> TrainerArgs(const JobSettings& s) {
  std::vector<std::string> args = {"--config", s.config, "--data.path=" + s.data,
                                   "--run.dir=" + s.run_dir, "--train.resume=auto"};
  if (!s.ckpt_root_override.empty()) args.push_back("--ckpt.root=" + s.ckpt_root_override);
  args.push_back(s.ckptd ? "--ckpt.daemon=auto" : "--ckpt.daemon=off");
  args.insert(args.end(), s.train_args.begin(), s.train_args.end());
  return args;
}

StatusOr<train::TrainConfig> TrainerConfig(const JobSettings& s) {
  const std::vector<std::string> args = TrainerArgs(s);
  // After "--config FILE": the overrides, as `ftrain train` applies them.
  return train::TrainConfig::LoadFile(s.config, {args.begin() + 2, args.end()});
}

StatusOr<JobSettings> LoadJobSettings(const Getenv& env) {
  Reader r(env);
  JobSettings s;
  s.home = r.Str("FTRAIN_HOME", r.Str("SLURM_SUBMIT_DIR", "."));
  s.bin = r.Str("FTRAIN_BIN", s.home + "/build/bin/ftrain");
  FT_RETURN_IF_ERROR(r.Required("FTRAIN_CONFIG", "the training config file", &s.config));
  FT_RETURN_IF_ERROR(
      r.Required("FTRAIN_RUN_DIR", "the run directory (shared file system)", &s.run_dir));
  FT_RETURN_IF_ERROR(r.Required("FTRAIN_DATA", "the packed data directory or URL", &s.data));
  s.train_args = SplitWords(r.Str("FTRAIN_ARGS", ""));
  s.ckpt_root_override = r.Str("FTRAIN_CKPT_ROOT", "");
  int tasks_per_node = 1;
  FT_RETURN_IF_ERROR(r.Count("SLURM_NTASKS_PER_NODE", 1, &tasks_per_node));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_RANKS_PER_NODE", tasks_per_node, &s.ranks_per_node));
  if (s.ranks_per_node < 1) return Status::InvalidArgument("FTRAIN_RANKS_PER_NODE must be >= 1");
  FT_RETURN_IF_ERROR(r.Flag("FTRAIN_PREFLIGHT", true, &s.preflight));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_PREFLIGHT_TIMEOUT_S", 120, &s.preflight_timeout_s));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_MAX_INJOB_RESTARTS", 2, &s.max_injob_restarts));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_MAX_FAILED_STARTS", 3, &s.max_failed_starts));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_MAX_ROLLBACK_RESTARTS", 6, &s.max_rollback_restarts));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_MAX_NODE_REQUEUES", 5, &s.max_node_requeues));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_STORAGE_OUTAGE_S", 1800, &s.storage_outage_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_RESTART_BACKOFF_S", 5, &s.restart_backoff_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HEALTH_TIMEOUT_S", 20, &s.health_timeout_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HEALTH_WAIT_S", 300, &s.health_wait_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_STOP_TIMEOUT_S", 90, &s.stop_timeout_s));
  FT_RETURN_IF_ERROR(r.Flag("FTRAIN_CKPTD", true, &s.ckptd));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_CKPTD_START_TIMEOUT_S", 60, &s.ckptd_start_timeout_s));
  s.spare_nodes = r.Str("FTRAIN_SPARE_NODES", "0");
  s.spare_nodelist = r.Str("FTRAIN_SPARE_NODELIST", "");
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_SPARE_CHECK_S", 5, &s.spare_check_s));
  const std::string elastic = r.Str("FTRAIN_ELASTIC", "auto");
  if (elastic != "auto" && elastic != "0" && elastic != "1") {
    return Status::InvalidArgument("FTRAIN_ELASTIC='" + elastic + "' is not auto, 0 or 1");
  }
  const ConfigFacts facts = ReadConfigFacts(s);
  s.elastic = elastic == "1" || (elastic == "auto" && facts.exact_reduce);
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_ELASTIC_MIN_NODES", 1, &s.elastic_min_nodes));
  if (s.elastic_min_nodes < 1) {
    return Status::InvalidArgument("FTRAIN_ELASTIC_MIN_NODES must be >= 1");
  }
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_ELASTIC_GROW_S", 30, &s.elastic_grow_s));
  s.replication = r.Str("FTRAIN_REPLICATION", "auto");
  if (s.replication != "auto" && s.replication != "0" && s.replication != "1") {
    return Status::InvalidArgument("FTRAIN_REPLICATION='" + s.replication +
                                   "' is not auto, 0 or 1");
  }
  // The memory tier counts a step restorable only once the buddy holds it: auto turns buddy
  // replication on for it, as it does for spares.
  if (s.replication == "auto" && facts.memory_tier) s.replication = "1";
  s.health_gpus = facts.gpus ? s.ranks_per_node : 0;
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_NORESPOND_WAIT_S", 30, &s.norespond_wait_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_USR1_LEAD_S", 120, &s.usr1_lead_s));
  s.usr1_lead_set = !r.Str("FTRAIN_USR1_LEAD_S", "").empty();
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_TERM_ASK_S", 10, &s.term_ask_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_REQUEUE_RETRY_S", 180, &s.requeue_retry_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_LEASE_RETRY_S", 60, &s.lease_retry_s));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_MAX_RESUBMITS", 3, &s.max_resubmits));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HANG_REPEAT_WINDOW_S", 21600, &s.hang_repeat_window_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_FAULTY_KEEP_S", kDefaultFaultyKeepS, &s.faulty_keep_s));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_HANG_QUARANTINE_KEEP_S", kDefaultHangQuarantineKeepS,
                               &s.hang_quarantine_keep_s));
  FT_RETURN_IF_ERROR(LoadDetect(r, &s.detect));
  return s;
}

StatusOr<AgentSettings> LoadAgentSettings(const Getenv& env) {
  Reader r(env);
  AgentSettings s;
  s.home = r.Str("FTRAIN_HOME", r.Str("SLURM_SUBMIT_DIR", "."));
  s.bin = r.Str("FTRAIN_BIN", s.home + "/build/bin/ftrain");
  s.ckptd_bin = r.Str("CKPTD_BIN", s.home + "/build/bin/ckptd");
  FT_RETURN_IF_ERROR(r.Required("FTRAIN_RUN_DIR", "the run directory", &s.run_dir));
  s.ckpt_root = r.Str("FTRAIN_CKPT_ROOT", "");
  s.ckptd_args = r.Str("FTRAIN_CKPTD_ARGS", "");
  s.node = r.Str("SLURMD_NODENAME", HostShortName());
  s.batch_host = r.Str("FTRAIN_BATCH_HOST", "");
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_SPARE_NODES", 0, &s.spare_nodes));
  FT_RETURN_IF_ERROR(r.Flag("FTRAIN_REPLICATION", false, &s.replication));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_CKPTD_MAX_RESTARTS", 3, &s.max_restarts));
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_AGENT_PERIOD_S", 2, &s.watch_period_s));
  if (s.watch_period_s <= 0) return Status::InvalidArgument("FTRAIN_AGENT_PERIOD_S must be > 0");
  FT_RETURN_IF_ERROR(r.Seconds("FTRAIN_SBATCH_TIMEOUT_S", 60, &s.sbatch_timeout_s));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_MAX_RESUBMITS", 3, &s.max_resubmits));
  FT_RETURN_IF_ERROR(r.Count("FTRAIN_RESUBMITS", 0, &s.resubmits));
  FT_RETURN_IF_ERROR(r.Flag("FTRAIN_RESUBMIT_SAME_SIZE", false, &s.same_size));
  s.peer_host = r.Str("FTRAIN_PEER_HOST", "");
  s.peer_port = r.Str("FTRAIN_PEER_PORT", "0");
  s.peer_advertise = r.Str("FTRAIN_PEER_ADVERTISE", "");
  s.replica_memory_gb = r.Str("FTRAIN_REPLICA_MEMORY_GB", "8");
  s.replication_mbps = r.Str("FTRAIN_REPLICATION_MBPS", "0");
  {
    char* end = nullptr;
    const double mbps = std::strtod(s.replication_mbps.c_str(), &end);
    if (s.replication_mbps.empty() || *end != '\0' || !(mbps >= 0)) {
      return Status::InvalidArgument("FTRAIN_REPLICATION_MBPS='" + s.replication_mbps +
                                     "' is not a number of MB/s >= 0 (0 = unlimited)");
    }
  }
  FT_RETURN_IF_ERROR(LoadDetect(r, &s.detect));
  return s;
}

}  // namespace ftrain::orch
