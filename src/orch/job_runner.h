// orch/job_runner.h - `ftrain job`'s I/O: it turns JobPolicy's actions into processes, Slurm
// commands, records and files, and what happens (a step's exit, a signal, a tick, a verdict of
// the detector, an answer of Slurm) into observations. It decides nothing itself: every
// choice is the policy's (orch/job_policy.h) or a pure helper's (orch/slurm.h,
// orch/submission.h). One thread; signals through signalfd; a tick every 0.5 s.
//
// Contract with the policy: an action that asks something (a query, a probe, a requeue) is
// answered by the very next observation; long ones (the pre-flight, the agents' start, the
// training step) answer when they end, with signals and ticks in between.
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/run_layout.h"
#include "orch/detect.h"
#include "orch/job_policy.h"
#include "orch/lease.h"
#include "orch/probe_async.h"
#include "orch/slurm.h"
#include "records/restarts.h"

namespace ftrain::orch {

// What the runner needs from the environment of the batch script.
struct JobContext {
  std::string job, nodelist, node, resubmitted_from, script;
  int restart_count = 0, resubmits = 0;
  std::vector<std::string> environment;  // the batch script's, as it began (the capture)
};
JobContext ContextFromEnvironment(const std::string& script);

class JobRunner {
 public:
  // `env`: the files the runner writes and its clocks (the main's Env).
  JobRunner(JobSettings s, JobContext ctx, Slurm* slurm, Env* env);
  ~JobRunner();
  // Runs the job to its end; the exit code of `ftrain job`.
  int Run();

 private:
  void Feed(Observation o);
  void Execute(const Action& a);
  void Log(const std::string& text);
  Observation Obs(Observation::Kind k) const;
  void WaitForEvents(double max_s);
  void OnTick();
  // Actions, by area.
  void Record(const Action& a);
  void AcquireLease();
  // One lease's tries (slurmctld may be busy); `out`: lease_ok, epoch, holder, superseded.
  // An error reading or writing the lease's files is returned (out: not lease_ok).
  Status AcquireLeaseOn(RunLease* lease, const LeaseHolder& me, const JobAlive& alive,
                        Observation* out);
  void CaptureSubmission();
  void RunPreflight();
  void Localise(const std::vector<std::string>& nodes);
  void MakeSecret();
  void WriteJobNodes(const std::vector<std::string>& nodes);
  void StartAgents(const std::vector<std::string>& nodes);
  void StartAgent(const std::string& node);
  void Launch(const Action& a);
  void EndStep();
  void QueryNodesInJob();
  void QueryJobState(double within_s);  // 0: the usual bound
  void QueryRoom();
  std::string SetJobNodesEnv(const std::vector<std::string>& nodes);
  void Expand(int count, std::vector<std::string> exclude, const std::vector<std::string>& probe);
  void Requeue(double budget_s, bool unless_cancelled);
  void CountFailedStart();
  void ProbeHealth(const std::vector<std::string>& nodes);
  void ConfirmDeath(const std::vector<std::string>& nodes);
  void Release(const std::vector<std::string>& nodes);
  void WaitNotResponding(const std::vector<std::string>& nodes, double cap_s);
  void SignalAgents(const std::string& sig);
  void Exclude(const Action& a);
  void WaitAgents(double seconds);
  void StopAgents();
  void MergeRecords();
  void ReadQuarantine(Observation* o) const;
  void ReadNodeFaults(Observation* o) const;
  void ReadRunRecords(Observation* o) const;  // rollbacks.jsonl, the newest checkpoint
  std::string NewestCheckpoint() const;       // its name, or "none"
  void Quarantine(const Action& a);
  std::vector<records::Field> LostFields(bool at_failure);
  std::vector<std::string> AgentSteps();
  bool AgentReady(const std::string& node) const;
  bool AgentGone(const std::string& node) const;
  std::vector<std::string> SrunEnv() const;  // the job's node variables after a release

  JobSettings s_;
  JobContext ctx_;
  Slurm* slurm_;
  Env* env_;
  RunLayout layout_;
  std::string ckpt_root_;
  JobPolicy policy_;
  std::deque<Observation> pending_;
  std::vector<Observation> answers_;  // to the actions of the decision being executed
  bool done_ = false;
  int exit_code_ = 0;
  int sigfd_ = -1;
  // The lease and the records.
  RunLease lease_;
  std::optional<LeaseHolder> mine_;
  records::SpoolMerger merger_;
  double next_lease_check_ = 0;
  // Children.
  pid_t preflight_ = -1, step_ = -1;
  double preflight_deadline_ = 0;
  std::map<std::string, pid_t> agents_;  // node -> its agent's srun here
  std::vector<pid_t> helpers_;           // background scancels, reaped on the way
  std::string hostfile_;
  bool watch_batch_host_ = false;
  bool agents_signalled_ = false;
  std::vector<std::string> declared_;            // nodes declared dead (their sruns wait for ever)
  std::map<std::string, std::string> node_env_;  // SLURM_JOB_NODELIST & co after a release
  std::string metrics_at_failure_;               // metrics.jsonl's last line when the step ended
  size_t node_faults_at_launch_ = 0;  // RUN/node_faults.jsonl's size when the step started
  // Detection.
  std::unique_ptr<Prober> prober_;             // heartbeats, and the probes after a failure
  std::unique_ptr<AsyncProbes> async_probes_;  // the tick's probes (orch/probe_async.h)
  std::unique_ptr<Detector> detector_;
  std::vector<std::string> watch_;
  double next_tick_ = 0;
};

}  // namespace ftrain::orch
