// orch/sim_world.h - the simulated world of `ftrain sim` (sim.h), internal to src/orch: the
// cluster (a pool of nodes, slurmctld, the shared file system), the job and its persistent run
// directory, the training step's progress and the timed events between them. sim_world.cc runs
// the seed (starts, steps, faults), sim_exec.cc plays each action the policy emits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "orch/job_policy.h"
#include "orch/sim.h"

namespace ftrain::orch::sim {

// The records the simulated trainer and runner append (records/quarantine.h, records/hangs.h).
inline QuarantineLine SimQuarantine(const std::string& host, const std::string& cause, int64_t step,
                                    int rank) {
  QuarantineLine q;
  q.host = host;
  q.cause = cause;
  q.step = step;
  q.rank = rank;
  return q;
}
inline HangLine SimHang(const std::string& host, int64_t step) {
  HangLine h;
  h.host = host;
  h.step = step;
  h.rank = 0;
  h.node = 0;
  return h;
}

// splitmix64: the same numbers on every platform (std:: distributions are not specified).
class Rng {
 public:
  // The seed is mixed first: seeds k and k+1 must not start one step apart in one stream.
  explicit Rng(uint64_t seed) : s_(Mix(seed ^ 0x2545F4914F6CDD1Dull)) {}
  uint64_t Next() { return Mix(s_ += 0x9E3779B97F4A7C15ull); }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double a, double b) { return a + (b - a) * Unit(); }
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  bool Chance(double p) { return Unit() < p; }

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_;
};

struct Node {
  std::string name;
  double down_until = -1;  // crashed (slurmd silent) until then
  double hung_until = -1;  // paused until then
  bool bad_gpu = false;    // alive, fails every check and step until repaired
};

// A fault of the schedule, as the world plays it (the public SimFault is its report).
struct Fault {
  std::string kind;            // node_crash rack gpu_lost node_hang fs_outage slurmctld_outage
                               // rank_exit usr1 term_running scancel preempt
  double t = 0, duration = 0;  // its nodes are picked when it fires
  int rc = 0;                  // rank_exit
  int64_t step = -1;           // persistent: the poison step
  size_t report = 0;           // index into facts_.faults
};

// `gen` is the start an event belongs to, `launch` the launch (-1: none).
enum class Ev {
  kObserve,     // deliver its observation (aux 1: an answer to a question)
  kTick,        // the runner's tick (aux: the tick generation; older ones are stale)
  kFault,       // aux: index into faults_
  kTrainBegin,  // the launch finished resuming: the ranks train
  kStepEnd,     // the launch exits with its observation's rc (ok: a checkpoint first)
  kPoison,      // the persistent fault `aux` is reached by the launch
  kTimeLimit,   // the start `gen` reached its time limit (TERM)
  kKillWait,    // Slurm's KillWait after a TERM of the start `gen` ended
  kSlurmNode,   // Slurm notices the node `aux` is dead (SlurmdTimeout)
  kRepair,      // the node `aux` is repaired (a lost GPU)
  kPendingDone  // the requeued job may start
};

// Small: an observation it carries waits in World::obs_ under its seq.
struct Event {
  double t = 0;
  uint64_t seq = 0;
  Ev kind = Ev::kTick;
  int gen = 0;          // the start it belongs to
  int64_t aux = 0;      // see Ev
  int64_t launch = -1;  // the launch it belongs to (-1: none)
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class World {
 public:
  explicit World(const SimOptions& o);
  SimFacts Run();

 private:
  // sim_world.cc: the seed, its starts, the step's progress, the faults.
  void Setup();
  void ScheduleFaults();
  void AddFault(Fault f, const std::string& detail, bool may_fail);
  void Push(double t, Ev kind, int64_t aux = 0, int64_t launch = -1);
  void PushObs(double t, Observation o, bool answer, int64_t launch = -1);
  void Handle(const Event& e);
  void Deliver(Observation o);
  void FlushHeld();
  void ScheduleTick();
  void BeginStart();
  void EndStart(bool killed);
  void Finish(SimOutcome outcome, int code);
  void StepEnded(const Observation& o);
  void SettleProgress();
  void BeginTraining();
  // sim_faults.cc: what each fault does to the world.
  int PickJobNode();
  void FireFault(const Fault& f);
  void FirePoison(const Fault& f);
  void CrashNode(int n, double repair_s, size_t report);
  void HangNode(int n, double d, size_t report);
  void LoseGpu(int n, double repair_s, size_t report);
  void SlurmNoticed(int n);
  void SignalJob(const std::string& sig);
  void MarkHit(size_t report);  // what a fault costs: the interruption it opens
  void CloseInterruption();
  // sim_exec.cc: one action of the current start's decision, and the answers.
  void Execute(const Action& a);
  bool Ask(const Action& a);
  void Answer(Observation o, double latency);
  void Launch(const Action& a);
  void SignalStep(const std::string& sig);
  void EndStepAfter(int rc, double after_s, bool commit = false);
  void Requeue(double budget, bool unless_cancelled);
  void Exclude(const Action& a);
  void Exit(int code);
  Observation JobStateAnswer();
  bool SlurmctldUp(double t) const;
  bool EmptyAnswer() { return rng_.Chance(0.01); }
  double SlurmLatency() { return SlurmctldUp(t_) ? rng_.Uniform(0.02, 0.5) : 20; }
  bool NodeOk(int n) const { return nodes_[n].down_until <= t_ && nodes_[n].hung_until <= t_; }
  bool NodeHealthy(int n) const { return NodeOk(n) && !nodes_[n].bad_gpu; }
  // The newest complete checkpoint's name as the runner reports it ("none": none yet).
  std::string Newest() const {
    return committed_ > 0 ? "step_" + std::to_string(committed_) : "none";
  }
  bool FsUp(double t) const;
  int NodeIndex(const std::string& name) const;
  std::vector<std::string> Names(const std::vector<int>& idx) const;
  bool Recorded(const std::string& host) const;
  void Trace(const std::string& line);

  SimOptions opt_;
  Rng rng_;
  SimFacts facts_;
  JobSettings settings_;
  double t_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::map<uint64_t, Observation> obs_;  // the observations events carry, by seq
  std::vector<Node> nodes_;
  std::vector<Fault> faults_;
  struct Outage {
    double t0, t1;
    size_t report;
  };
  std::vector<Outage> fs_out_, ctl_out_;
  // The run directory and Slurm's facts of the job, across starts.
  int train_n_ = 0, spare_n_ = 0, num_nodes_ = 0, restart_count_ = 0, train_count_ = 0;
  bool elastic_ = false;  // FTRAIN_ELASTIC: a dead training node without a spare shrinks the run
  int64_t epoch_ = 0;
  std::vector<std::string> exclude_;
  std::vector<int> excluded_faulty_;  // excluded as faulty by some requeue, not repaired since
  std::vector<QuarantineLine> quarantine_;
  std::vector<HangLine> hangs_;
  std::string failed_starts_, last_stop_;
  std::string node_requeues_;  // RUN/.node_requeues ("NEWEST COUNT\n"; "": none)
  int rollbacks_ = 0;          // RUN/rollbacks.jsonl's records (rank 0 appends one per 79)
  double step_s_ = 1, time_limit_s_ = 86400, pending_since_ = -1, external_wait_s_ = 0;
  int64_t total_ = 0, every_ = 0, committed_ = 0, best_committed_ = 0;
  bool cancelled_ = false, preempted_ = false, timed_out_ = false, ended_ = false;
  // The current start.
  std::unique_ptr<JobPolicy> policy_;
  int gen_ = 0;
  int64_t tick_gen_ = 0;
  bool start_live_ = false;
  std::vector<int> job_nodes_;        // indexes, the batch host first
  std::vector<std::string> records_;  // this start's record texts
  std::vector<Observation> held_;     // observations waiting for the answers due
  int answers_due_ = 0;
  double answer_t_ = 0;  // the last answer's time: answers come in the order asked
  // The current launch (the training step).
  bool step_live_ = false, training_ = false, stopping_ = false;
  int64_t launch_ = -1, s0_ = 0;
  double t_train_ = 0;
  std::vector<int> step_nodes_;
  std::vector<std::string> watch_;
  bool hit_ = false, hit_excused_ = false;  // a fault hit this launch (at hit_t_)
  double hit_t_ = 0;
  // The open interruption (a fault ended a launch; closed when the ranks train again).
  bool intr_open_ = false;
  SimInterruption intr_;
  double intr_wait0_ = 0, end_lost_s_ = 0;
};

}  // namespace ftrain::orch::sim
