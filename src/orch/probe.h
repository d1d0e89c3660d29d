// orch/probe.h - the detector's probes (orch/detect.h Prober) as a watcher does them on a
// cluster: heartbeat files read from the run directory, a TCP connect to the node's slurmd
// (address from slurmctld, cached), a one-task step on the node, and slurmctld's ping. The
// probes may run on several threads at once (orch/probe_async.h): the Slurm client is used
// under one lock.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "orch/detect.h"
#include "orch/slurm.h"

namespace ftrain::orch {

// A connect's outcome from its errno (0: connected): only ECONNREFUSED is "refused" (the
// node's kernel answered that nothing listens), ETIMEDOUT "timeout", anything else
// (ENETUNREACH, EHOSTUNREACH: this side's network or a router said no) "unreachable".
const char* ClassifyConnectError(int err);
// "open", "refused", "timeout" or "unreachable" for a TCP connect to host:port within
// timeout_s ("unknown": the name did not resolve). A timeout or unreachable is tried twice.
std::string ConnectProbe(const std::string& host, int port, double timeout_s);

class SlurmProber : public Prober {
 public:
  SlurmProber(std::string heartbeats_dir, Slurm* slurm, double probe_timeout_s)
      : dir_(std::move(heartbeats_dir)), slurm_(slurm), timeout_s_(probe_timeout_s) {}
  // With a Slurm client of its own (the probe threads': none shared with the caller's thread).
  SlurmProber(std::string heartbeats_dir, std::unique_ptr<Slurm> own, double probe_timeout_s)
      : dir_(std::move(heartbeats_dir)),
        own_(std::move(own)),
        slurm_(own_.get()),
        timeout_s_(probe_timeout_s) {}
  std::string ReadHeartbeat(const std::string& node) override;
  bool HeartbeatExists(const std::string& node) override;
  std::string ProbeTcp(const std::string& node) override;
  std::string SlurmdAddress(const std::string& node) override;
  bool ProbeTask(const std::string& node) override;
  bool OthersAnswer(const std::vector<std::string>& nodes, const std::string& except) override;

 private:
  StatusOr<std::string> Address(const std::string& node);
  std::string dir_;
  std::unique_ptr<Slurm> own_;
  std::mutex slurm_mu_;  // guards slurm_ (SlurmCli caches addresses and the config)
  Slurm* slurm_;         // guarded by slurm_mu_
  double timeout_s_;
};

}  // namespace ftrain::orch
