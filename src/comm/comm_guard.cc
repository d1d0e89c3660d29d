// CommGuard: first error, launch lock, watchdog, abort and grace exit (see comm_guard.h).
#include "comm/comm_guard.h"

#include <thread>

#include "core/log.h"

namespace ftrain::comm {

CommGuard::CommGuard(std::string name, std::string timeout_text, Backend backend, Timing timing)
    : name_(std::move(name)),
      timeout_text_(std::move(timeout_text)),
      backend_(std::move(backend)),
      timing_(timing) {}

CommGuard::~CommGuard() = default;

std::shared_ptr<CommGuard> CommGuard::Start(std::string name, std::string timeout_text,
                                            Backend backend, Timing timing) {
  std::shared_ptr<CommGuard> g(
      new CommGuard(std::move(name), std::move(timeout_text), std::move(backend), timing));
  // Detached, holding the guard: Stop() can leave a watchdog that is stuck in the backend
  // behind without anything it uses going away under it.
  std::thread([g] { g->Watch(); }).detach();
  return g;
}

Status CommGuard::Error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void CommGuard::Track(Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(op));
  }
  cv_.notify_all();
}

void CommGuard::FailLocked(const Status& s) { Fail(s, /*have_launch_lock=*/true); }

Status CommGuard::Health() {
  if (Failed()) return Error();
  auto launch = LockLaunch();
  if (Failed()) return Error();
  Status s = backend_.async_error ? backend_.async_error() : Status::Ok();
  if (s.ok()) return s;
  Fail(s, /*have_launch_lock=*/true);
  return Error();
}

void CommGuard::Fail(const Status& s, bool have_launch_lock) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;  // whoever recorded the first error aborts
    error_ = s;
    failed_ = true;
  }
  cv_.notify_all();
  FT_LOG(Error) << backend_.log_prefix << ": " << s.message()
                << "; aborting the communicator of group " << name_;
  StartGraceTimer();  // before the abort, which may itself hang
  if (have_launch_lock) {
    backend_.abort();
  } else {
    // A launch in progress sees Failed() and gives up; then the handle is ours to abort.
    auto launch = LockLaunch();
    backend_.abort();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    abort_done_ = true;
  }
  cv_.notify_all();
}

void CommGuard::StartGraceTimer() {
  std::shared_ptr<CommGuard> self = shared_from_this();
  std::thread([self] {
    std::unique_lock<std::mutex> lock(self->mu_);
    // The process is on its way out once the communicator is stopped after a finished abort.
    if (self->cv_.wait_for(lock, self->timing_.grace,
                           [&] { return self->stop_ && self->abort_done_; })) {
      return;
    }
    const std::string why =
        "group " + self->name_ + " was aborted (" + self->error_.message() + ")" +
        (self->abort_done_ ? "" : " and the abort did not return") +
        ", and the process did not stop within " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(self->timing_.grace).count()) +
        " s";
    lock.unlock();
    self->backend_.exit_process(why);
  }).detach();
}

void CommGuard::Watch() {
  if (backend_.on_watchdog_start) backend_.on_watchdog_start();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // With the predicate: a stop or failure notified before this thread first waits (it may
    // start late on a loaded machine) is not missed for a whole poll period.
    cv_.wait_for(lock, timing_.poll, [&] { return stop_ || !error_.ok(); });
    if (stop_ || !error_.ok()) break;  // aborted: the grace timer watches the exit
    Status verdict;
    while (!pending_.empty()) {
      Op& p = pending_.front();
      std::string why;
      const Progress progress = p.query(&why);
      if (progress == Progress::kDone) {
        pending_.pop_front();
        continue;
      }
      if (progress == Progress::kFailed) {
        verdict = Status::Unavailable(p.what + ": " + why);
      } else if (Clock::now() > p.deadline) {
        verdict = Status::DeadlineExceeded(p.what + " timed out after " + timeout_text_ +
                                           ": a peer is dead, hung or unreachable");
      }
      break;
    }
    lock.unlock();
    if (verdict.ok() && backend_.async_error) {
      // Only between launches: the handle is never read while another thread may abort it.
      std::unique_lock<std::mutex> launch(launch_mu_, std::try_to_lock);
      if (launch.owns_lock() && !Failed()) {
        Status s = backend_.async_error();
        if (!s.ok()) Fail(s, /*have_launch_lock=*/true);
      }
    }
    if (!verdict.ok()) Fail(verdict, /*have_launch_lock=*/false);
    lock.lock();
  }
  watchdog_done_ = true;
  cv_.notify_all();
}

bool CommGuard::Stop(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  const bool ended = cv_.wait_for(lock, bound, [&] { return watchdog_done_; });
  if (!ended) {
    FT_LOG(Error) << backend_.log_prefix << ": the watchdog of group " << name_
                  << " did not stop within "
                  << std::chrono::duration_cast<std::chrono::seconds>(bound).count()
                  << " s (stuck in the backend); leaving it behind and not finalizing the group";
  }
  return ended && error_.ok();
}

}  // namespace ftrain::comm
