// The replication thread.
#include "replicator.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "core/log.h"
#include "peer_auth.h"
#include "peer_server.h"
#include "peer_wire.h"

namespace ftrain::ckptd {

using peer::PeerMsg;

Replicator::Replicator(ReplicatorOptions options) : options_(std::move(options)) {
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

Status Replicator::Send(const ReplicationJob& job, std::string* address) {
  if (!options_.buddy.empty()) {
    *address = options_.buddy;
  } else {
    FT_ASSIGN_OR_RETURN(*address, ReadAddressFile(options_.buddy_file));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    buddy_ = *address;
  }
  FT_ASSIGN_OR_RETURN(std::unique_ptr<peer::PeerConn> conn,
                      peer::ConnectPeer(*address, options_.timeout_s));
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
    FT_RETURN_IF_ERROR(conn->SendData(base + pos, n));
  }
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kEnd, ""));
  return conn->Expect(PeerMsg::kStoreOk, &payload);
}

void Replicator::Run() {
  // Below the persist thread: replication only uses what the persist leaves.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), options_.nice) != 0) {
    FT_LOG(Warning) << "ckptd: could not set nice " << options_.nice
                    << " on the replication thread";
  }
  double backoff_s = 0;
  for (;;) {
    ReplicationJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (backoff_s > 0) {
        cv_.wait_for(lock, std::chrono::duration<double>(backoff_s), [&] { return stop_; });
      }
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      // The oldest pending step first (the ranks take turns).
      auto pick = pending_.begin();
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->second.submit.step < pick->second.submit.step) pick = it;
      }
      job = std::move(pick->second);
      pending_.erase(pick);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string address;
    Status s = job.reused->load() ? Status::Aborted("abandoned before it started (slot reused)")
                                  : Send(job, &address);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t bytes = peer::ImageExtent(job.submit);
    std::lock_guard<std::mutex> lock(mu_);
    RankReplication& st = stats_[job.rank];
    if (st.pending_step == job.submit.step && pending_.count(job.rank) == 0) st.pending_step = -1;
    if (s.ok()) {
      backoff_s = 0;
      st.newest_step = std::max(st.newest_step, job.submit.step);
      st.bytes += bytes;
      FT_LOG(Info) << "ckptd: replicated step=" << job.submit.step << " rank=" << job.rank
                   << " to buddy " << address << " bytes=" << bytes << " seconds=" << secs
                   << " MB/s=" << (secs > 0 ? static_cast<double>(bytes) / secs / 1e6 : 0.0);
      continue;
    }
    if (s.code() == Status::Code::kAborted) {
      ++st.superseded;
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
