// orch/agent_runner.h - `ftrain agent`'s I/O: one node's agent, a step of its own on that node.
//   - The main thread runs the node's checkpoint daemon (ckptd) and keeps it running: its
//     exits are decided by OnDaemonExit (bounded restarts with back-off; exit 2, bad settings,
//     never restarted). TERM/INT stop it gracefully: it finishes what it holds, unlinks its
//     shared memory, and the agent exits 0.
//   - A heartbeat thread bumps RUN/.heartbeats/<node> every FTRAIN_HEARTBEAT_PERIOD_S with
//     whether the daemon answers on this node (through its socket, on this node: the only
//     place a Unix socket can be reached), which is how the controller learns readiness.
//   - A follower thread reads RUN/.job-nodes every FTRAIN_AGENT_PERIOD_S: it points the
//     daemon's buddy link at its buddy among the live nodes (replication; BuddyOf: the far
//     side of the ring, or under another leaf switch) and, on the two watchers of the
//     batch host, drives WatcherPolicy: the batch host's heartbeat and slurmd (orch/detect.h),
//     Slurm's view of it (spares), the claim, the run lease, the resubmission, the cancel.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/run_layout.h"
#include "orch/agent_policy.h"
#include "orch/lease.h"
#include "orch/settings.h"
#include "orch/slurm.h"

namespace ftrain::orch {

class AgentRunner {
 public:
  // `env`: the files the agent writes and its clocks (the main's Env).
  AgentRunner(AgentSettings s, Env* env);
  int Run();

 private:
  void Log(const std::string& text);
  std::string Stamp() const;  // now in UTC, on the wall clock of env_, for log lines
  void HeartbeatLoop();
  void FollowLoop();
  bool PointBuddy(const std::vector<std::string>& ring);
  bool DaemonAnswers() const;
  std::vector<std::string> PeerArgs();
  // The watcher's actions; answers go back to the policy at once.
  void Execute(const WatcherAct& a, Slurm* slurm);
  std::string ClaimPath() const;
  WatcherObs Claim(bool takeover);
  WatcherObs WatchClaim(Slurm* slurm);
  WatcherObs TakeLease(Slurm* slurm);
  WatcherObs Submit(Slurm* slurm);
  void NotifyAndCancel(const std::string& new_job, Slurm* slurm);
  int Supervise(int sigfd, const std::vector<std::string>& argv);
  WatcherObs Answer(WatcherObs::Kind k) const;
  bool ResubmissionDone() const;
  void Record(const records::RestartRecord& r);

  AgentSettings s_;
  Env* env_;
  RunLayout layout_;
  std::string job_, ckpt_root_;
  int restart_count_ = 0;
  std::vector<std::string> job_nodelist_;
  std::string buddy_;
  // node -> leaf switch (orch/topology.h), read once before the follower thread starts, then
  // read-only; the buddy computed for `buddy_ring_` (the shift is O(N^2) at worst).
  std::map<std::string, std::string> leaf_switch_;
  std::vector<std::string> buddy_ring_;
  std::string buddy_of_ring_;
  std::mutex log_mu_;  // guards stdout between the threads
  std::atomic<bool> stop_{false};
  std::atomic<int> daemon_pid_{0};
  std::atomic<bool> daemon_up_{false};
  // The watcher's state (follower thread only).
  std::vector<WatcherObs> answers_;
  std::optional<LeaseHolder> lease_;
  std::vector<records::Field> evidence_;
  std::string out_file_;  // the old job's output file (from the saved submission)
};

}  // namespace ftrain::orch
