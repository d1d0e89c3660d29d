// The hang guard's watchdog: the main thread says where it is (step, phase) through atomics;
// a thread of this rank publishes that, with how many collectives the rank has launched
// (comm/launch_count.h), to RUN/progress/rank-<R>.json once a second, and keeps doing so
// while the main thread is stuck. When this rank has not moved for longer than its threshold,
// it reads every rank's file and judges (train/config/hang_verdict.h): twice the same verdict
// naming the ranks the others wait for, and every rank ends itself with kExitHang, the lowest
// rank that is not hung having appended the record to RUN/hangs.jsonl, the hung rank having
// logged its phase and its main thread's stack. The collective timeout (Gloo's, NCCL's
// watchdog) stays the backstop. Files only (shared run directory), no sockets. No LibTorch.
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
#include "train/config/hang_verdict.h"

namespace ftrain::train {

// "A rank hung; restart" (records/exit_codes.h).
using ftrain::kExitHang;

class HangWatch {
 public:
  struct Options {
    std::string run_dir;
    int rank = 0;
    int world_size = 1;
    int node = 0;
    std::string host;
    std::string generation;  // this start's (every rank's file carries it)
    std::string job_id;      // SLURM_JOB_ID as main read it (the record's "job"); "" = none
    HangSettings settings;
    // Ends the process with the code (the main thread may be stuck: it cannot return).
    std::function<void(int code)> exit_process;
    std::chrono::milliseconds poll{500};
  };

  // Creates RUN/progress, writes this rank's first file and starts the thread. Call it on the
  // main thread: its stack is the one a hang dumps.
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
  void Publish(const RankProgress& p);
  std::vector<RankProgress> ReadAll() const;
  void Act(const HangVerdict& v, const RankProgress& mine);

  const Options o_;
  const std::thread::native_handle_type main_;  // the thread that made this watch
  std::atomic<int64_t> step_{0};
  std::atomic<int> phase_{0};
  std::atomic<double> step_time_{0};
  std::vector<double> recent_;  // the watchdog thread's: the last step times it saw
  bool write_warned_ = false;   // the watchdog thread's
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
