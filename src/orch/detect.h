// orch/detect.h - ftrain's own node-failure detection, shared by the job controller (it watches
// the training nodes) and the node agents (two of them watch the batch host). Slurm marks a
// dead node DOWN only after SlurmdTimeout (300 s by default); ftrain does not wait for it.
//
// Signs, each on its own path:
//   - the heartbeat: every agent bumps a counter in RUN/.heartbeats/<node> (a plain file on
//     the shared file system, `HeartbeatLine`); its silence is measured on the watcher's
//     monotonic clock from the last time the counter was seen to change (no clocks compared,
//     so a clock step or skew is never silence);
//   - the node's slurmd: a TCP connect to NodeAddr:Port (refused: the node's kernel says
//     nothing listens, the slurmd died; timeout: the host is gone, or the network is;
//     unreachable (ENETUNREACH, EHOSTUNREACH): this side's network or a router said no, judged
//     like a timeout, never dead at once);
//   - the watcher's own view: a probe timeout convicts only when another node's slurmd (or
//     slurmctld) still answers from here and the silence outlasted FTRAIN_BLIP_S, so a network
//     or file-system blip of a few seconds convicts nobody, and a watcher cut off itself
//     convicts nobody either;
//   - a task on the node (`srun --overlap ... true`) for a node that is silent but whose
//     kernel answers: declared "hung" after FTRAIN_HUNG_AFTER_S when no task starts.
// A node that is only slow or paused completes the TCP handshake in its kernel and is noted
// "late" (once per silence), never dead.
//
// The decisions (HeartbeatMonitor, Judge) are pure; Detector does the I/O through the
// Prober interface (SlurmCli-backed in orch/slurm.h, fakes in the tests). With AsyncProbes
// (orch/probe_async.h, the job controller's) the probes run on threads of their own and a look
// only reads heartbeats and takes the probes' finished answers: it never waits on a network.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/env.h"
#include "orch/settings.h"
#include "records/restarts.h"

namespace ftrain::orch {

// RUN/.heartbeats/<node>: "COUNTER PID JOB [start=N] [ckptd=up|down|starting]": the agent's
// job and that job's restart count (a file left by an earlier start is not this start's), and
// whether the agent's own daemon answers on its node (through its socket, on that node): the
// controller's readiness wait reads it, so nothing crosses hosts through a socket file.
struct HeartbeatLine {
  std::string counter, pid, job, start, ckptd;
};
std::optional<HeartbeatLine> ParseHeartbeat(const std::string& text);
std::string FormatHeartbeat(const HeartbeatLine& h);
// Does this heartbeat say that the daemon of this start (job, restart count) answers on its
// node? (A file left by an earlier start or another job says nothing.)
bool DaemonReady(const std::string& heartbeat_text, const std::string& job, int restart_count);

// Silence per node on the monotonic clock: a change of any kind of the file's text is life.
class HeartbeatMonitor {
 public:
  // Every node counts as just heard from (a new step: its agent ran all along).
  void Reset(const std::vector<std::string>& nodes, double now);
  // Seconds since `node`'s text last changed (0 when it just did, or on the first look).
  double Observe(const std::string& node, const std::string& text, double now);
  // A verdict about the node was logged for this silence already ("late" is said once).
  bool Noted(const std::string& node) const;
  void SetNoted(const std::string& node);

 private:
  struct Seen {
    std::string text;
    double since = 0;
    bool noted = false;
  };
  std::map<std::string, Seen> seen_;
};

enum class Verdict { kAlive, kLate, kDead, kHung };
const char* VerdictName(Verdict v);

// What the probes said about one silent node.
struct Evidence {
  double silent_s = 0;
  std::string tcp;            // open | refused | timeout | unreachable | unknown (no address)
  bool others_answer = true;  // another node's slurmd (or slurmctld) answers from here
  std::optional<bool> task_started;  // asked only once silent past hung_after_s with tcp open
  std::string address;               // the slurmd's "addr:port" (for the record; "" not asked)
  double probe_s = -1;               // how long the probes took (-1: not measured)
};
Verdict Judge(const DetectSettings& s, const Evidence& e);
// Whether Judge needs the task probe for this evidence (silent long enough, kernel answers).
bool NeedsTaskProbe(const DetectSettings& s, const Evidence& e);
// Whether a probe timeout still needs the watcher's own view (Evidence::others_answer).
bool NeedsOthersProbe(const DetectSettings& s, const Evidence& e);

// The probes, as the watcher does them.
class Prober {
 public:
  virtual ~Prober() = default;
  virtual std::string ReadHeartbeat(const std::string& node) = 0;  // "" when unreadable
  virtual bool HeartbeatExists(const std::string& node) = 0;
  virtual std::string ProbeTcp(const std::string& node) = 0;  // open | refused | timeout | unknown
  virtual std::string SlurmdAddress(const std::string& node) = 0;  // "addr:port" for evidence
  virtual bool ProbeTask(const std::string& node) = 0;             // a task started in time
  // Another of `nodes` (not `except`) answers, or slurmctld does: this watcher is not cut off.
  virtual bool OthersAnswer(const std::vector<std::string>& nodes, const std::string& except) = 0;
};

// The probes of one node silent for `silent_s`, in Judge's order: its slurmd, then the
// watcher's own view or a task as the evidence needs them. Blocks for as long as they take.
Evidence GatherEvidence(const DetectSettings& s, Prober* prober, const std::string& node,
                        const std::vector<std::string>& nodes, double silent_s);

class AsyncProbes;  // orch/probe_async.h

// What a look found: a node declared (dead or hung) with its evidence, or a late one.
struct Finding {
  std::string node;
  Verdict verdict = Verdict::kAlive;
  std::vector<records::Field> fields;  // the record's detection fields (or heartbeat_late's)
  std::string log;                     // the line the watcher logs
};

class Detector {
 public:
  // With `async`, the probes run there and `prober` only reads heartbeats.
  Detector(DetectSettings s, Prober* prober, Env* env, AsyncProbes* async = nullptr)
      : s_(s), prober_(prober), env_(env), async_(async) {}
  void Reset(const std::vector<std::string>& nodes) { monitor_.Reset(nodes, NowSeconds(env_)); }
  // One look at every node of `nodes` (read the heartbeats, probe the silent ones). Returns
  // the first node declared dead or hung, else any late ones noted for the first time. With
  // AsyncProbes a silent node's probes are asked for and judged at a later look, once
  // answered (an answer asked before the node's current silence began is dropped).
  std::vector<Finding> Look(const std::vector<std::string>& nodes);
  // After a failed step nobody declared: the nodes whose slurmd does not answer get the time
  // their heartbeat needs to confirm (refused: the heartbeat timeout; a timeout: the blip
  // window) + 2 s. Returns the node declared, if any. `sleep` waits and returns false when the
  // wait must end at once (a signal came: nothing is declared). With AsyncProbes the nodes'
  // slurmds are probed in parallel, and the wait for them is `sleep`'s too.
  std::optional<Finding> ConfirmAfterFailure(const std::vector<std::string>& nodes,
                                             const std::function<bool(double)>& sleep,
                                             const std::function<void(const std::string&)>& log);

 private:
  Finding Declare(const std::string& node, Verdict v, const Evidence& e);
  Finding Late(const std::string& node, const Evidence& e) const;
  // Each node's slurmd, probed (in parallel with AsyncProbes); nothing when `sleep` said stop.
  std::optional<std::map<std::string, std::string>> ProbeAll(
      const std::vector<std::string>& nodes, const std::function<bool(double)>& sleep);
  DetectSettings s_;
  Prober* prober_;
  Env* env_;  // its clocks only: silences on the monotonic one, the record's stamp on the wall
  AsyncProbes* async_;
  HeartbeatMonitor monitor_;
};

}  // namespace ftrain::orch
