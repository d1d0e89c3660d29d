// One background thread working through a FIFO queue of jobs: the scaffolding ckptd's persist
// worker (persist.h) and FETCH_PEER worker (peer_fetch.h) share. The constructor starts the
// thread (at a nice level, if given: Linux nice values are per thread and inherited by the
// threads it creates); each job's result goes to `done` on that thread, after busy() is false
// again; the destructor lets the queue drain (a queued job is a promise the daemon made), then
// joins. Never touches sockets.
#pragma once

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "core/log.h"

namespace ftrain::ckptd {

template <typename Job, typename Result>
class WorkQueue {
 public:
  // `what` names the thread in the warning when its nice level cannot be set.
  WorkQueue(std::function<Result(const Job&)> work, std::function<void(Result)> done,
            std::optional<int> nice = std::nullopt, std::string what = "worker")
      : work_(std::move(work)), done_(std::move(done)), nice_(nice), what_(std::move(what)) {
    worker_ = std::thread([this] { Run(); });
  }
  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Enqueue(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  size_t queued() const {  // waiting, not yet started
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }
  bool busy() const {  // a job is being worked on
    std::lock_guard<std::mutex> lock(mu_);
    return busy_;
  }

 private:
  void Run() {
    if (nice_ &&
        ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), *nice_) != 0) {
      FT_LOG(Warning) << "ckptd: could not set nice " << *nice_ << " on the " << what_;
    }
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Drains the queue before stopping.
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      Result r = work_(job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      done_(std::move(r));
    }
  }

  const std::function<Result(const Job&)> work_;
  const std::function<void(Result)> done_;
  const std::optional<int> nice_;
  const std::string what_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  bool busy_ = false;      // guarded by mu_
  bool stop_ = false;      // guarded by mu_
  std::thread worker_;     // last: started once everything above exists
};

}  // namespace ftrain::ckptd
