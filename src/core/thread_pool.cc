// Thread counts, ParallelFor and ThreadPool.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace ftrain {

int DefaultThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

int ResolveThreads(int requested) { return requested > 0 ? requested : DefaultThreads(); }

Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex err_mu;
  Status first_error;  // guarded by err_mu
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first_error.ok()) return;
      }
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.ok()) first_error = std::move(s);
        return;
      }
    }
  };
  const size_t t = std::max<size_t>(1, std::min<size_t>(threads > 0 ? threads : 1, n));
  std::vector<std::thread> pool;
  for (size_t k = 1; k < t; ++k) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  return first_error;
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

}  // namespace ftrain
