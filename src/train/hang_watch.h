// The hang guard's watchdog: the main thread says where it is (step, phase) through atomics;
// a thread of this rank samples that, with how many collectives the rank has launched
// (comm/launch_count.h), twice a second and shares it with the other ranks of its node through
// node-local files (train/hang_local.h). One rank per node (the lowest whose watchdog is alive)
// writes RUN/progress/node-<N>.json with all of them every publish_every, and, only while a
// rank of its node has not moved for longer than its threshold, reads the N node files every
// judge_every or later and judges (train/verdicts/hang_verdict.h) on its own monotonic clock:
// twice the same verdict naming the ranks the others wait for, written to the node-local
// verdict that every rank of the node reads. Then every rank ends itself with kExitHang, the
// lowest rank that is not hung having appended the record to RUN/hangs.jsonl, the hung rank
// having logged its phase and its main thread's stack. The collective timeout (Gloo's, NCCL's
// watchdog) stays the backstop. Plain files (node-local and the shared run directory), no
// sockets. No LibTorch.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "records/exit_codes.h"
#include "train/hang_local.h"
#include "train/verdicts/hang_verdict.h"

namespace ftrain::train {

// "A rank hung; restart" (records/exit_codes.h).
using ftrain::kExitHang;

class HangWatch {
 public:
  struct Options {
    std::string run_dir;
    Env* env = nullptr;  // the files and the clock (the main's Env); required
    int rank = 0;
    int world_size = 1;
    int node = 0;
    int num_nodes = 1;  // the node files a judge reads: node-0 .. node-<num_nodes-1>
    std::string host;
    std::string generation;  // this start's (every rank's file carries it)
    std::string job_id;      // SLURM_JOB_ID as main read it (the record's "job"); "" = none
    HangSettings settings;
    // Ends the process with the code (the main thread may be stuck: it cannot return).
    std::function<void(int code)> exit_process;
    // True once the launcher asked the process to stop (SIGTERM/SIGUSR1): the waits after a
    // verdict end then, so that the exit code is this guard's 78 and not srun's SIGKILL a
    // KillWait later (a step whose task was killed ends 137 and reads as a crash). Unset: never.
    std::function<bool()> stop_asked;
    std::chrono::milliseconds poll{500};
    // Where the ranks of a node share their progress (tmpfs); the run directory when it
    // cannot be used (slower: every rank's file on the shared file system again).
    std::string local_root = "/dev/shm";
    std::chrono::milliseconds publish_every{2000};  // the node file's rewrite interval
    std::chrono::milliseconds judge_every{3000};    // the least time between two judge looks
  };

  // Creates RUN/progress and the node-local directory, writes this rank's first entry and
  // starts the thread. Call it on the main thread: its stack is the one a hang dumps.
  explicit HangWatch(Options o);
  ~HangWatch();  // stops the thread
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // The main thread, at each phase change: two relaxed stores.
  void Enter(int64_t step, HangPhase phase) {
    step_.store(step, std::memory_order_relaxed);
    phase_.store(static_cast<int>(phase), std::memory_order_relaxed);
  }
  // The main thread, after a step (not the first of a start): its wall time, for the threshold.
  void StepTook(double seconds) { step_time_.store(seconds, std::memory_order_relaxed); }

 private:
  struct Sample {
    int64_t step = 0;
    int phase = 0;
    uint64_t launched = 0;
    bool operator==(const Sample& o) const {
      return step == o.step && phase == o.phase && launched == o.launched;
    }
  };
  void Loop();
  RankProgress Snapshot(const Sample& s, double stuck_s, double threshold_s) const;
  void ShareLocal(const RankProgress& p);
  // The rank of the node that publishes and judges: the lowest whose entry is fresh.
  bool IsNodeLeader(const std::vector<RankProgress>& local) const;
  void PublishNode(const std::vector<RankProgress>& local);
  std::vector<RankProgress> ReadNodes() const;
  // The node judge's look; true once a verdict repeated (it is then in the node-local file).
  bool JudgeOnce(std::vector<int>* previous, double* wait_s);
  void Act(const HangVerdict& v, const RankProgress& mine);
  // Sleeps d, or less once Options::stop_asked says the launcher is ending the process.
  void WaitUnlessStopped(std::chrono::milliseconds d) const;

  const Options o_;
  const std::thread::native_handle_type main_;  // the thread that made this watch
  std::atomic<int64_t> step_{0};
  std::atomic<int> phase_{0};
  std::atomic<double> step_time_{0};
  NodeLocalProgress local_;
  std::vector<double> recent_;  // the watchdog thread's: the last step times it saw
  ProgressAges ages_;           // the watchdog thread's: the judge's view of every rank
  bool local_warned_ = false;   // the watchdog thread's
  bool node_warned_ = false;    // the watchdog thread's
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// Installs the handler that writes the main thread's stack to stderr when the watchdog asks
// (a real-time signal, so that nothing else's is taken); the first call also loads the
// unwinder, so that the handler does not allocate.
void InstallStackDumpHandler();
// Asks thread `main` for its stack (written by its own handler) and waits up to 1 s for it.
void DumpStackOf(std::thread::native_handle_type main);

}  // namespace ftrain::train
