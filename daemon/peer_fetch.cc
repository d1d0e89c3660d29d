// Fetching a replica from a peer into a local slot.
#include "peer_fetch.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>

#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "peer_auth.h"
#include "peer_server.h"
#include "peer_wire.h"

namespace ftrain::ckptd {

using peer::PeerMsg;

PeerFetcher::PeerFetcher(FetcherOptions options, std::function<void(FetchResult)> on_done)
    : options_(std::move(options)), on_done_(std::move(on_done)) {
  worker_ = std::thread([this] { Run(); });
}

PeerFetcher::~PeerFetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void PeerFetcher::Enqueue(FetchJob job) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(job));
  cv_.notify_all();
}

std::vector<std::string> PeerFetcher::PeersOf(const std::string& run_dir, const std::string& node) {
  std::vector<std::string> out;
  DIR* d = ::opendir(run_dir.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> dirs;
  while (dirent* e = ::readdir(d)) {
    const std::string other = RunLayout::NodeOfDaemonDir(e->d_name);
    if (!other.empty() && other != node) dirs.push_back(other);
  }
  ::closedir(d);
  std::sort(dirs.begin(), dirs.end());
  // This daemon's own replica store first: on a spare that was the dead node's buddy, the
  // replica is already here (its own peer listener serves it; no other node is involved).
  dirs.insert(dirs.begin(), node);
  for (const auto& dir : dirs) {
    auto a = ReadAddressFile(RunLayout(run_dir).daemon_peer_addr(dir));
    if (a.ok()) out.push_back(*a);
  }
  return out;
}

void PeerFetcher::Run() {
  for (;;) {
    FetchJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    on_done_(Fetch(job));
  }
}

Status PeerFetcher::FetchFrom(const std::string& address, const FetchJob& job, FetchResult* out) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<peer::PeerConn> conn,
                      peer::ConnectPeer(address, options_.timeout_s));
  FT_RETURN_IF_ERROR(peer::AuthenticateAsClient(conn.get(), options_.secret, options_.job));
  FT_RETURN_IF_ERROR(
      conn->Send(PeerMsg::kFetch, peer::EncodeFetch({options_.job, job.rank, job.step})));
  std::string payload;
  FT_RETURN_IF_ERROR(conn->Expect(PeerMsg::kOffer, &payload));
  FT_ASSIGN_OR_RETURN(peer::ReplicaHeader h, peer::DecodeReplicaHeader(payload, job.seg->size()));
  if (h.job != options_.job || h.rank != job.rank || h.step != job.step) {
    return Status::InvalidArgument("peer " + address + " offered job " + h.job + " rank " +
                                   std::to_string(h.rank) + " step " + std::to_string(h.step) +
                                   " for a FETCH of rank " + std::to_string(job.rank) + " step " +
                                   std::to_string(job.step));
  }
  FT_RETURN_IF_ERROR(conn->ReceiveImage(job.seg->data(), h.extent));
  FT_RETURN_IF_ERROR(peer::VerifyPieces(h.submit, h.xxh3, job.seg->data()));
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kStoreOk, ""));
  out->submit = std::move(h.submit);
  out->submit.slot = job.slot;
  out->bytes = h.extent;
  return Status::Ok();
}

FetchResult PeerFetcher::Fetch(const FetchJob& job) {
  FetchResult r;
  r.rank = job.rank;
  r.step = job.step;
  r.slot = job.slot;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> peers = job.address.empty() ? PeersOf(options_.run_dir, options_.node)
                                                       : std::vector<std::string>{job.address};
  std::string tried;
  for (const auto& a : peers) {
    Status s = FetchFrom(a, job, &r);
    if (s.ok()) {
      r.source = "peer " + a;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return r;
    }
    FT_LOG(Info) << "ckptd: fetch of rank " << job.rank << " step " << job.step << " from peer "
                 << a << ": " << s.message();
    tried += (tried.empty() ? "" : "; ") + a + ": " + s.message();
  }
  r.status = Status::NotFound(
      "no peer holds rank " + std::to_string(job.rank) + " step " + std::to_string(job.step) +
      (peers.empty() ? " (no peer addresses under " + options_.run_dir + "/ckptd-*/peer-addr)"
                     : " (" + tried + ")"));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ftrain::ckptd
