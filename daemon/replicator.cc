// The replication thread.
#include "daemon/replicator.h"

#include <netdb.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "daemon/peer_auth.h"
#include "daemon/peer_server.h"
#include "daemon/peer_wire.h"

namespace ftrain::ckptd {

using peer::PeerMsg;

namespace {

// The cap's burst: a quarter second at the rate, at least one chunk (a chunk never waits for
// tokens the bucket could not hold).
double BurstBytes(double mbps) {
  return std::max(0.25 * mbps * 1e6, static_cast<double>(peer::kChunkBytes));
}

}  // namespace

Replicator::Replicator(ReplicatorOptions options)
    : options_(std::move(options)), bucket_(options_.mbps * 1e6, BurstBytes(options_.mbps)) {
  worker_ = std::thread([this] { Run(); });
}

Replicator::~Replicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stopping_ = true;
  cv_.notify_all();
  worker_.join();
}

void Replicator::Offer(ReplicationJob job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job.rank);
  if (it != pending_.end()) {
    ++stats_[job.rank].superseded;
    it->second.reused->store(true);  // not sent: a newer snapshot of the rank replaces it
  }
  stats_[job.rank].pending_step = job.submit.step;
  pending_[job.rank] = std::move(job);
  cv_.notify_all();
}

std::map<int, RankReplication> Replicator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string Replicator::buddy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buddy_;
}

std::string Replicator::buddy_check() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buddy_check_;
}

StatusOr<std::string> Replicator::BuddyAddress() const {
  if (!options_.buddy.empty()) return options_.buddy;
  return ReadAddressFile(options_.buddy_file, options_.start);
}

bool Replicator::CheckBuddy() {
  auto address = BuddyAddress();
  if (!address.ok() && address.status().code() == Status::Code::kNotFound) return false;
  const std::string from = options_.buddy.empty() ? " (from " + options_.buddy_file + ")" : "";
  const std::string fix =
      "; replication to it fails until it does: give the buddy's daemon --peer-advertise "
      "(FTRAIN_PEER_ADVERTISE) with an interface or address every node resolves and reaches";
  std::string verdict;
  if (!address.ok()) {
    verdict = "the buddy's peer address" + from + " is unusable: " + address.status().message();
  } else {
    std::string host;
    int port = 0;
    (void)peer::ParseHostPort(*address, false, &host, &port);  // validated when read
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int e = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); e != 0) {
      verdict = "the buddy's peer address '" + *address + "'" + from +
                " does not resolve on this node: " + ::gai_strerror(e) + fix;
    } else {
      ::freeaddrinfo(res);
      Status s;
      for (int attempt = 0; attempt < 3; ++attempt) {  // a buddy given by address may start later
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
        auto conn = peer::ConnectPeer(*address, options_.timeout_s, options_.env);
        s = conn.ok() ? peer::AuthenticateAsClient(conn->get(), options_.secret, options_.job)
                      : conn.status();
        if (s.ok() || stopping_.load()) break;
      }
      if (!s.ok()) {
        verdict = "the buddy's peer address '" + *address + "'" + from +
                  " does not answer as a daemon of this job: " + s.message() + fix;
      }
    }
  }
  if (verdict.empty()) {
    FT_LOG(Info) << "ckptd: buddy " << *address << from
                 << " resolves and answers as a daemon of this job";
  } else {
    FT_LOG(Warning) << "ckptd: WARNING: " << verdict;
  }
  std::lock_guard<std::mutex> lock(mu_);
  buddy_check_ = verdict.empty() ? "ok" : verdict;
  return true;
}

Status Replicator::Send(const ReplicationJob& job, std::string* address) {
  FT_ASSIGN_OR_RETURN(*address, BuddyAddress());
  {
    std::lock_guard<std::mutex> lock(mu_);
    buddy_ = *address;
  }
  FT_ASSIGN_OR_RETURN(std::unique_ptr<peer::PeerConn> conn,
                      peer::ConnectPeer(*address, options_.timeout_s, options_.env));
  FT_RETURN_IF_ERROR(peer::AuthenticateAsClient(conn.get(), options_.secret, options_.job));
  peer::ReplicaHeader h;
  h.job = options_.job;
  h.rank = job.rank;
  h.step = job.submit.step;
  h.extent = peer::ImageExtent(job.submit);
  h.xxh3 = job.xxh3;
  h.submit = job.submit;
  std::string payload;
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kStore, peer::EncodeReplicaHeader(h)));
  FT_RETURN_IF_ERROR(conn->Expect(PeerMsg::kAccept, &payload));
  // Abandoned when the slot is reused, a newer offer supersedes it, or the daemon stops:
  // checked before every chunk (a reuse is noticed within one chunk).
  const uint8_t* base = job.seg->data();
  for (uint64_t pos = 0;; pos += peer::kChunkBytes) {
    if (job.reused->load() || stopping_.load()) {
      (void)conn->Send(PeerMsg::kAbort, "");  // ignored: the connection is dropped right after
      return Status::Aborted("abandoned (the slot was reused, or a newer snapshot came)");
    }
    if (pos >= h.extent) break;
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(peer::kChunkBytes, h.extent - pos));
    if (!Pace(n, job)) continue;  // abandoned: the check above says so
    FT_RETURN_IF_ERROR(conn->SendData(base + pos, n));
  }
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kEnd, ""));
  return conn->Expect(PeerMsg::kStoreOk, &payload);
}

bool Replicator::Pace(uint64_t bytes, const ReplicationJob& job) {
  double wait = bucket_.Reserve(bytes, MonotonicSeconds());
  if (wait <= 0) return true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    throttled_s_ += wait;
  }
  // In slices, so that a reused slot or a stop is noticed within 50 ms.
  while (wait > 0) {
    if (job.reused->load() || stopping_.load()) return false;
    const double slice = std::min(wait, 0.05);
    std::this_thread::sleep_for(std::chrono::duration<double>(slice));
    wait -= slice;
  }
  return true;
}

void Replicator::WarnCapTooLow(const ReplicationJob& job, uint64_t abandoned) {
  if (abandoned > 10 && abandoned % 100 != 0) return;
  FT_LOG(Warning) << "ckptd: replication of step " << job.submit.step << " rank " << job.rank
                  << " ABANDONED while it waited for the replication cap (" << options_.mbps
                  << " MB/s): the trainer needed its slot (every other one was busy). Snapshots "
                  << "come faster than the cap lets them through, so fewer steps, or none, become "
                  << "restorable from memory: raise --replication-mbps (FTRAIN_REPLICATION_MBPS) "
                  << "above a snapshot's bytes / (3 x the memory interval), or lengthen "
                  << "ckpt.memory_every_* (" << abandoned << " abandoned so far for this rank)";
}

double Replicator::throttled_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return throttled_s_;
}

void Replicator::Run() {
  // Below the persist thread: replication only uses what the persist leaves.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), options_.nice) != 0) {
    FT_LOG(Warning) << "ckptd: could not set nice " << options_.nice
                    << " on the replication thread";
  }
  double backoff_s = 0;
  bool checked = false;
  for (;;) {
    if (!checked) checked = CheckBuddy();
    ReplicationJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (backoff_s > 0) {
        cv_.wait_for(lock, std::chrono::duration<double>(backoff_s), [&] { return stop_; });
      }
      auto ready = [&] { return stop_ || !pending_.empty(); };
      if (checked) {
        cv_.wait(lock, ready);
      } else {  // look for the buddy's address again in a moment
        cv_.wait_for(lock, std::chrono::milliseconds(500), ready);
      }
      if (stop_) return;
      if (pending_.empty()) continue;
      // The oldest pending step first (the ranks take turns).
      auto pick = pending_.begin();
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->second.submit.step < pick->second.submit.step) pick = it;
      }
      job = std::move(pick->second);
      pending_.erase(pick);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double throttled0 = throttled_s();
    std::string address;
    if (job.sending) job.sending->store(true);
    Status s = job.reused->load() ? Status::Aborted("abandoned before it started (slot reused)")
                                  : Send(job, &address);
    if (job.sending) job.sending->store(false);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t bytes = peer::ImageExtent(job.submit);
    std::lock_guard<std::mutex> lock(mu_);
    RankReplication& st = stats_[job.rank];
    if (st.pending_step == job.submit.step && pending_.count(job.rank) == 0) st.pending_step = -1;
    if (s.ok()) {
      backoff_s = 0;
      if (job.submit.step > st.newest_step) {
        st.previous_step = st.newest_step;
        st.newest_step = job.submit.step;
      }
      st.bytes += bytes;
      FT_LOG(Info) << "ckptd: replicated step=" << job.submit.step << " rank=" << job.rank
                   << " to buddy " << address << " bytes=" << bytes << " seconds=" << secs
                   << " MB/s=" << (secs > 0 ? static_cast<double>(bytes) / secs / 1e6 : 0.0);
      continue;
    }
    if (s.code() == Status::Code::kAborted) {
      ++st.superseded;
      if (throttled_s_ > throttled0) WarnCapTooLow(job, st.superseded);
      continue;
    }
    ++st.failures;
    st.last_error = s.message();
    const bool refused = s.code() == Status::Code::kFailedPrecondition &&
                         s.message().find("refused:") != std::string::npos;
    FT_LOG(Warning) << "ckptd: replication of step " << job.submit.step << " rank " << job.rank
                    << " to buddy " << (address.empty() ? "(unknown yet)" : address)
                    << " FAILED: " << s.message()
                    << (refused ? "" : "; retrying (training is not affected)");
    // Retry the same snapshot unless the buddy declined it or a newer one is waiting.
    if (!refused && pending_.count(job.rank) == 0 && !job.reused->load()) {
      st.pending_step = job.submit.step;
      pending_[job.rank] = std::move(job);
      backoff_s = std::min(5.0, backoff_s == 0 ? 0.5 : backoff_s * 2);
    }
  }
}

}  // namespace ftrain::ckptd
