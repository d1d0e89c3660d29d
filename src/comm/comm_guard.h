// CommGuard: how a communicator with a background watchdog fails (NCCL today), apart from the
// backend: the group's first error, the launch lock under which the backend's handle is used,
// the collectives in flight with their deadlines, the watchdog thread that aborts the group,
// and the grace-period exit. No CUDA and no NCCL here: the backend hands in how to query a
// collective, read its asynchronous error and abort, so that tests drive it with fakes.
//
// The rules it enforces:
//   - The handle is aborted exactly once, and only under the launch lock: a launch that
//     checked Error() can never enqueue onto a freed communicator.
//   - The error is recorded before the abort waits for the launch lock, so a launch that
//     is settling gives up (Failed()) instead of holding the lock until its own timeout.
//   - The grace-period exit runs on its own thread, started before the abort: an abort that
//     hangs still ends the process.
//   - Stop() waits a bounded time for the watchdog; a watchdog stuck in the backend is left
//     behind (it holds only this shared object, never the communicator's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"

namespace ftrain::comm {

class CommGuard : public std::enable_shared_from_this<CommGuard> {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Progress { kDone, kRunning, kFailed };

  struct Backend {
    // Runs first on the watchdog thread (CUDA: bind the device).
    std::function<void()> on_watchdog_start;
    // The backend's asynchronous error; called under the launch lock, never after the abort.
    std::function<Status()> async_error;
    // Aborts the backend's handle: called once, under the launch lock. May hang.
    std::function<void()> abort;
    // The grace period after an abort passed and the process is still here.
    std::function<void(const std::string& why)> exit_process;
    std::string log_prefix = "comm";  // of the guard's log lines ("nccl: ... aborting ...")
  };
  struct Timing {
    std::chrono::milliseconds poll{100};     // how often the watchdog looks
    std::chrono::milliseconds grace{30000};  // abort -> exit, unless Stop() came first
  };

  // One collective in flight: `query` says whether it finished (on kFailed it fills `why`).
  struct Op {
    std::function<Progress(std::string* why)> query;
    Clock::time_point deadline;
    std::string what;
  };

  // Starts the watchdog of group `name`; `timeout_text` is what a missed deadline says.
  static std::shared_ptr<CommGuard> Start(std::string name, std::string timeout_text,
                                          Backend backend, Timing timing);
  ~CommGuard();

  // Serialises every use of the backend handle (launches, splits, the async error, abort).
  std::unique_lock<std::mutex> LockLaunch() { return std::unique_lock<std::mutex>(launch_mu_); }

  Status Error();
  bool Failed() const { return failed_.load(); }
  // Records `s` as the group's error, if it is the first, and aborts. The caller holds the
  // launch lock (a launch that failed half-way).
  void FailLocked(const Status& s);
  // Hands a launched collective to the watchdog.
  void Track(Op op);
  // The recorded error, or the backend's asynchronous one (which then fails the group).
  // Takes the launch lock.
  Status Health();
  // Ends the watchdog, waiting at most `bound`. True: it ended and no abort is running, so
  // the caller may use (finalize) the handle. False: aborted, or the watchdog is stuck and
  // was left behind: the handle must not be touched.
  bool Stop(std::chrono::milliseconds bound);

 private:
  CommGuard(std::string name, std::string timeout_text, Backend backend, Timing timing);
  void Watch();
  // Records `s` if it is the group's first error; then the grace timer and, under the launch
  // lock (taken here unless `have_launch_lock`), the abort.
  void Fail(const Status& s, bool have_launch_lock);
  void StartGraceTimer();

  const std::string name_;
  const std::string timeout_text_;
  const Backend backend_;
  const Timing timing_;
  std::mutex launch_mu_;
  std::atomic<bool> failed_{false};  // set with error_, readable without mu_
  std::mutex mu_;
  std::condition_variable cv_;
  Status error_;                // guarded by mu_: the first error
  bool stop_ = false;           // guarded by mu_
  bool watchdog_done_ = false;  // guarded by mu_
  bool abort_done_ = false;     // guarded by mu_: the abort returned
  std::deque<Op> pending_;      // guarded by mu_, in issue order
};

}  // namespace ftrain::comm
