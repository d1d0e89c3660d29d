// Threads for fan-out work, in one place: how many threads "0 = as many as the hardware has"
// means (DefaultThreads / ResolveThreads), a bounded fan-out over an index range
// (ParallelFor), and a small fixed pool for pipelines whose results the calling thread
// consumes in order (ThreadPool: HDF5 chunk compression and decompression). Long-lived
// service threads (ckptd's persister, the data producer) are not here.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"

namespace ftrain {

// The hardware's concurrency, at least 1.
int DefaultThreads();
// `requested` when > 0, else DefaultThreads().
int ResolveThreads(int requested);

// Runs fn(i) for every i in [0, n) on min(threads, n) threads, the calling thread being one
// of them (threads <= 1: all on the calling thread, in order). Indices are handed out in
// increasing order; after the first failure no new index starts, and that failure is
// returned (the others already running finish). fn must be safe to call concurrently.
Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn);

// A fixed set of worker threads running submitted tasks in submission order. The destructor
// runs what is queued, then joins. Threads exit with the pool, so thread_local state of the
// tasks (zstd contexts) lives as long as the pool.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  template <typename F>
  std::future<Status> Submit(F fn) {
    auto task = std::make_shared<std::packaged_task<Status()>>(std::move(fn));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut;
  }
  size_t size() const { return workers_.size(); }

 private:
  void Loop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
};

}  // namespace ftrain
