#include "core/run_layout.h"

#include <fstream>

#include "core/config.h"
#include "core/env.h"

namespace ftrain {

std::string RunLayout::metrics() const { return JoinPath(run_dir_, "metrics.jsonl"); }
std::string RunLayout::restarts() const { return JoinPath(run_dir_, "restarts.jsonl"); }
std::string RunLayout::records_dir() const { return JoinPath(run_dir_, ".records"); }
std::string RunLayout::restarts_spool(const std::string& node) const {
  return JoinPath(records_dir(), "restarts-" + node + ".jsonl");
}
std::string RunLayout::quarantine() const { return JoinPath(run_dir_, "quarantine.jsonl"); }
std::string RunLayout::hangs() const { return JoinPath(run_dir_, "hangs.jsonl"); }
std::string RunLayout::node_faults() const { return JoinPath(run_dir_, "node_faults.jsonl"); }
std::string RunLayout::progress_dir() const { return JoinPath(run_dir_, "progress"); }
std::string RunLayout::node_progress(int node) const {
  return JoinPath(progress_dir(), "node-" + std::to_string(node) + ".json");
}
std::string RunLayout::faults_fired() const { return JoinPath(run_dir_, ".faults_fired"); }
std::string RunLayout::rollbacks() const { return JoinPath(run_dir_, "rollbacks.jsonl"); }
std::string RunLayout::lease() const { return JoinPath(run_dir_, ".lease"); }
std::string RunLayout::lease_dir() const { return JoinPath(run_dir_, ".lease.d"); }
std::string RunLayout::resolved_config() const { return JoinPath(run_dir_, "config.resolved.cfg"); }
std::string RunLayout::config_error() const { return JoinPath(run_dir_, ".config_error"); }
std::string RunLayout::hf_config_copy() const {
  return JoinPath(run_dir_, ".model-hf-config.json");
}
std::string RunLayout::last_stop() const { return JoinPath(run_dir_, ".last_stop"); }
std::string RunLayout::failed_starts() const { return JoinPath(run_dir_, ".failed_starts"); }
std::string RunLayout::node_requeues() const { return JoinPath(run_dir_, ".node_requeues"); }
std::string RunLayout::logs() const { return JoinPath(run_dir_, "logs"); }
std::string RunLayout::daemon_dir(const std::string& node) const {
  return JoinPath(run_dir_, "ckptd-" + node);
}
std::string RunLayout::NodeOfDaemonDir(const std::string& name) {
  const std::string prefix = "ckptd-";
  return name.size() > prefix.size() && name.rfind(prefix, 0) == 0 ? name.substr(prefix.size())
                                                                   : std::string();
}
std::string RunLayout::daemon_log(const std::string& node) const {
  return JoinPath(logs(), "ckptd-" + node + ".log");
}
std::string RunLayout::daemon_peer_addr(const std::string& node) const {
  return JoinPath(daemon_dir(node), "peer-addr");
}
std::string RunLayout::daemon_buddy_addr(const std::string& node) const {
  return JoinPath(daemon_dir(node), "buddy-addr");
}
std::string RunLayout::replication_secret() const { return JoinPath(run_dir_, ".ckptd-secret"); }
std::string RunLayout::job_nodes() const { return JoinPath(run_dir_, ".job-nodes"); }
std::string RunLayout::heartbeats() const { return JoinPath(run_dir_, ".heartbeats"); }
std::string RunLayout::submit() const { return JoinPath(run_dir_, ".submit"); }
std::string RunLayout::default_checkpoint_root() const { return JoinPath(run_dir_, "checkpoints"); }
std::string RunLayout::default_staging_root() const { return JoinPath(run_dir_, "ckpt-staging"); }

std::string RunLayout::tensorboard() const { return JoinPath(run_dir_, "tensorboard"); }
std::string RunLayout::commcheck() const { return JoinPath(run_dir_, "commcheck.json"); }
std::string RunLayout::profile() const { return JoinPath(run_dir_, "profile"); }
std::string RunLayout::profile_trace(int rank) const {
  return JoinPath(profile(), "trace-rank" + std::to_string(rank) + ".json");
}
std::string RunLayout::default_prometheus_dir() const { return JoinPath(run_dir_, "prometheus"); }

StatusOr<std::string> RunLayout::CheckpointRoot() const {
  const std::string path = resolved_config();
  if (!std::ifstream(path)) return default_checkpoint_root();
  FT_ASSIGN_OR_RETURN(Config cfg, Config::LoadFile(path));
  std::string root = default_checkpoint_root();
  FT_RETURN_IF_ERROR(cfg.GetString("ckpt.root", &root));
  if (root.rfind("s3://", 0) == 0) {  // checkpoints are staged here, then committed on S3
    root = default_staging_root();
    FT_RETURN_IF_ERROR(cfg.GetString("ckpt.staging", &root));
  }
  if (root.empty()) {
    return Status::InvalidArgument(path + ": ckpt.root is empty; set it to the checkpoint root");
  }
  return root;
}

}  // namespace ftrain
