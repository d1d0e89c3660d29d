// orch/probe.h - the detector's probes (orch/detect.h Prober) as a watcher does them on a
// cluster: heartbeat files read from the run directory, a TCP connect to the node's slurmd
// (address from slurmctld, cached), a one-task step on the node, and slurmctld's ping.
#pragma once

#include <string>
#include <vector>

#include "orch/detect.h"
#include "orch/slurm.h"

namespace ftrain::orch {

// "open", "refused" or "timeout" for a TCP connect to host:port within timeout_s.
std::string ConnectProbe(const std::string& host, int port, double timeout_s);

class SlurmProber : public Prober {
 public:
  SlurmProber(std::string heartbeats_dir, Slurm* slurm, double probe_timeout_s)
      : dir_(std::move(heartbeats_dir)), slurm_(slurm), timeout_s_(probe_timeout_s) {}
  std::string ReadHeartbeat(const std::string& node) override;
  bool HeartbeatExists(const std::string& node) override;
  std::string ProbeTcp(const std::string& node) override;
  std::string SlurmdAddress(const std::string& node) override;
  bool ProbeTask(const std::string& node) override;
  bool OthersAnswer(const std::vector<std::string>& nodes, const std::string& except) override;

 private:
  std::string dir_;
  Slurm* slurm_;
  double timeout_s_;
};

}  // namespace ftrain::orch
