// The server's side of buddy replication: starting the peer listener, the replication
// thread and the fetcher; handing persisted snapshots to the replicator; FETCH_PEER (a
// rank's replica pulled from a peer into one of its slots, then served by RESTORE); the
// replication part of the status and the metrics. Loop thread only, except the fetcher's
// callback (results_mu_ + the wake pipe, like the persister's).
#include <unistd.h>

#include <algorithm>

#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "peer_fetch.h"
#include "peer_server.h"
#include "replica_store.h"
#include "replicator.h"
#include "server.h"

namespace ftrain::ckptd {

namespace proto = ckpt::proto;
using proto::MsgType;

Status Server::StartPeers() {
  const PeerOptions& p = options_.peer;
  if (!p.enabled()) return Status::Ok();
  peer_addr_file_ = RunLayout(options_.run_dir).daemon_peer_addr(options_.node);
  ::unlink(peer_addr_file_.c_str());  // ignored: usually absent; a stale one would mislead
  if (!p.listen.empty()) {
    replicas_ = std::make_unique<ReplicaStore>(
        static_cast<uint64_t>(p.replica_memory_gb * static_cast<double>(uint64_t{1} << 30)));
    peer_server_ = std::make_unique<PeerServer>(p.job, p.secret, p.timeout_s, replicas_.get());
    FT_RETURN_IF_ERROR(peer_server_->Start(p.listen));
    FT_RETURN_IF_ERROR(WriteAddressFile(peer_addr_file_, peer_server_->address()));
  }
  if (!p.buddy.empty() || !p.buddy_file.empty()) {
    ReplicatorOptions ro;
    ro.job = p.job;
    ro.secret = p.secret;
    ro.buddy = p.buddy;
    ro.buddy_file = p.buddy_file;
    ro.timeout_s = p.timeout_s;
    ro.nice = std::min(19, options_.persist.nice + 10);
    replicator_ = std::make_unique<Replicator>(ro);
  }
  FetcherOptions fo{p.job, p.secret, options_.run_dir, options_.node, p.timeout_s};
  fetcher_ = std::make_unique<PeerFetcher>(fo, [this](FetchResult r) {
    {
      std::lock_guard<std::mutex> lock(results_mu_);
      fetch_results_.push_back(std::move(r));
    }
    char b = 1;
    // Ignored: a full pipe already guarantees a wake-up.
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  });
  FT_LOG(Info) << "ckptd: buddy replication for job " << p.job << ": peer listener "
               << (peer_server_ ? peer_server_->address() + " (in " + peer_addr_file_ + ")"
                                : std::string("off"))
               << ", buddy "
               << (!p.buddy.empty()        ? p.buddy
                   : !p.buddy_file.empty() ? "from " + p.buddy_file
                                           : "none")
               << ", replica memory " << p.replica_memory_gb << " GB, peer timeout " << p.timeout_s
               << " s";
  return Status::Ok();
}

void Server::StopPeers() {
  fetcher_.reset();
  replicator_.reset();
  peer_server_.reset();
  if (!peer_addr_file_.empty()) ::unlink(peer_addr_file_.c_str());  // ignored: best effort
}

void Server::MarkReused(Slot& slot) {
  if (slot.reused) slot.reused->store(true);
  slot.reused.reset();
}

void Server::OfferReplica(const PersistResult& r, Slot& slot) {
  if (replicator_ == nullptr) return;
  ReplicationJob job;
  job.rank = r.rank;
  job.seg = slot.seg;
  job.submit = slot.submit;
  // The persist's hashes of each piece: the ones the manifest records.
  for (const auto& p : slot.submit.pieces) {
    auto it = std::find_if(r.datasets.begin(), r.datasets.end(), [&](const auto& d) {
      return d.is_blob == p.is_blob && d.kind == p.kind && d.name == p.name &&
             d.length == p.length && (p.is_blob || d.offset == p.offset);
    });
    if (it == r.datasets.end()) {
      FT_LOG(Warning) << "ckptd: step " << r.step << " rank " << r.rank << ": no recorded hash of "
                      << p.kind << "/" << p.name << "; not replicated";
      return;
    }
    job.xxh3.push_back(it->xxh3);
  }
  MarkReused(slot);
  slot.reused = std::make_shared<std::atomic<bool>>(false);
  job.reused = slot.reused;
  replicator_->Offer(std::move(job));
}

bool Server::StartFetch(int fd, Conn& c, const std::string& payload) {
  if (c.rank < 0) return Disconnect(fd, "FETCH_PEER before HELLO"), false;
  auto req = proto::DecodeFetchPeer(payload);
  if (!req.ok()) return Disconnect(fd, req.status().message()), false;
  auto refuse = [&](const std::string& why) {
    FT_LOG(Warning) << "ckptd: refused a FETCH_PEER of pid " << c.pid << ": " << why;
    Send(fd, MsgType::kError, why);
    return true;
  };
  if (fetcher_ == nullptr) {
    return refuse(
        "this daemon does not replicate (start it with --peer-listen, --job-id and a job secret)");
  }
  if (c.waiting_fetch) return refuse("a FETCH_PEER of this connection is already in flight");
  RankSlots& rs = ranks_[c.rank];
  int pick = -1;
  for (uint32_t i = 0; i < rs.slots.size() && pick < 0; ++i) {
    if (rs.slots[i].state == SlotState::kFree) pick = static_cast<int>(i);
  }
  for (uint32_t i = 0; i < rs.slots.size() && pick < 0; ++i) {
    if (rs.slots[i].state == SlotState::kRetained) pick = static_cast<int>(i);
  }
  if (pick < 0) return refuse("rank " + std::to_string(c.rank) + " has no free slot to fetch into");
  Slot& slot = rs.slots[pick];
  MarkReused(slot);
  slot.state = SlotState::kFetching;
  slot.step = -1;
  c.waiting_fetch = true;
  FT_LOG(Info) << "ckptd: rank " << c.rank << " asks for step " << req->step << " from "
               << (req->address.empty() ? "the peers" : "peer " + req->address) << " (slot " << pick
               << ")";
  fetcher_->Enqueue(
      {c.rank, req->step, static_cast<uint32_t>(pick), slot.seg, std::move(req->address)});
  return true;
}

void Server::DrainPeerResults() {
  std::vector<FetchResult> results;
  {
    std::lock_guard<std::mutex> lock(results_mu_);
    results.swap(fetch_results_);
  }
  for (auto& r : results) {
    auto& rs = ranks_[r.rank];
    if (r.slot < rs.slots.size() && rs.slots[r.slot].state == SlotState::kFetching) {
      Slot& slot = rs.slots[r.slot];
      if (r.status.ok()) {
        // Now the rank's newest in-memory snapshot, as if it had been written here.
        for (auto& s : rs.slots) {
          if (s.state == SlotState::kRetained) s.state = SlotState::kFree;
        }
        slot.state = SlotState::kRetained;
        slot.step = r.step;
        slot.submit = r.submit;
      } else {
        slot.state = SlotState::kFree;
      }
    }
    proto::FetchPeerOk ok;
    ok.found = r.status.ok();
    ok.step = r.step;
    ok.bytes = r.bytes;
    ok.seconds = r.seconds;
    ok.source = r.source;
    if (r.status.ok()) {
      ++fetches_;
      fetched_bytes_ += r.bytes;
      FT_LOG(Info) << "ckptd: rank " << r.rank << " step " << r.step << " fetched from " << r.source
                   << " bytes=" << r.bytes << " seconds=" << r.seconds << " MB/s="
                   << (r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e6 : 0.0)
                   << " (every piece's XXH3 verified; RESTORE serves it)";
    } else {
      ++fetch_failures_;
      ok.detail = r.status.message();
      FT_LOG(Warning) << "ckptd: fetch of rank " << r.rank << " step " << r.step
                      << " from peer memory failed: " << ok.detail;
    }
    for (auto& [fd, c] : conns_) {
      if (c.rank == r.rank && c.waiting_fetch) {
        c.waiting_fetch = false;
        Send(fd, MsgType::kFetchOk, proto::EncodeFetchPeerOk(ok));
      }
    }
  }
}

nlohmann::json Server::ReplicationJson() const {
  const PeerOptions& p = options_.peer;
  nlohmann::json j = {{"enabled", p.enabled()}};
  if (!p.enabled()) return j;
  j["job_id"] = p.job;
  j["peer_address"] = peer_server_ ? peer_server_->address() : "";
  j["buddy"] = replicator_ ? replicator_->buddy() : "";
  nlohmann::json ranks = nlohmann::json::array();
  uint64_t bytes = 0, failures = 0;
  if (replicator_) {
    for (const auto& [rank, st] : replicator_->Stats()) {
      ranks.push_back({{"rank", rank},
                       {"newest_step_replicated", st.newest_step},
                       {"pending_step", st.pending_step},
                       {"bytes", st.bytes},
                       {"failures", st.failures},
                       {"superseded", st.superseded},
                       {"last_error", st.last_error}});
      bytes += st.bytes;
      failures += st.failures;
    }
  }
  j["to_buddy"] = ranks;
  j["to_buddy_bytes"] = bytes;
  j["to_buddy_failures"] = failures;
  nlohmann::json held = nlohmann::json::array();
  if (replicas_) {
    for (const auto& h : replicas_->List()) {
      held.push_back({{"job", h.job},
                      {"rank", h.rank},
                      {"step", h.step},
                      {"bytes", h.bytes},
                      {"from", h.from}});
    }
    j["replica_bytes"] = replicas_->used();
    j["replica_budget_bytes"] = replicas_->budget();
  }
  j["replicas_held"] = held;
  if (peer_server_) {
    const PeerServerStats s = peer_server_->stats();
    j["replicas_received"] = s.replicas_received;
    j["replica_bytes_received"] = s.bytes_received;
    j["replicas_served"] = s.replicas_served;
    j["replica_bytes_served"] = s.bytes_served;
    j["peer_requests_refused"] = s.refused;
    j["bad_peers"] = s.bad_peers;
    j["last_bad_peer"] = s.last_bad_peer;
  }
  j["fetches"] = fetches_;
  j["fetch_failures"] = fetch_failures_;
  j["fetched_bytes"] = fetched_bytes_;
  return j;
}

std::vector<PromSample> Server::PeerPromSamples() const {
  if (!options_.peer.enabled()) return {};
  auto d = [](auto v) { return static_cast<double>(v); };
  int64_t oldest_newest = -1;
  uint64_t bytes = 0, failures = 0;
  if (replicator_) {
    bool first = true;
    for (const auto& [rank, st] : replicator_->Stats()) {
      oldest_newest = first ? st.newest_step : std::min(oldest_newest, st.newest_step);
      first = false;
      bytes += st.bytes;
      failures += st.failures;
    }
  }
  std::vector<PromSample> out = {
      {"ckptd_replicated_step",
       "Oldest over this node's ranks of the newest step the buddy holds whole; -1 for none.",
       false, d(oldest_newest)},
      {"ckptd_replication_bytes_total", "Snapshot bytes replicated to the buddy.", true, d(bytes)},
      {"ckptd_replication_failures_total", "Failed replications to the buddy.", true, d(failures)},
      {"ckptd_peer_fetches_total", "Snapshots fetched from peer memory.", true, d(fetches_)},
  };
  if (replicas_) {
    out.push_back({"ckptd_replicas_held", "Replicas held for other nodes' ranks.", false,
                   d(replicas_->List().size())});
    out.push_back({"ckptd_replica_bytes", "Memory used by replicas (incl. transfers).", false,
                   d(replicas_->used())});
  }
  if (peer_server_) {
    const PeerServerStats s = peer_server_->stats();
    out.push_back({"ckptd_replicas_received_total", "Replicas received whole and verified.", true,
                   d(s.replicas_received)});
    out.push_back({"ckptd_peer_bad_connections_total",
                   "Peer connections dropped for a protocol or authentication error.", true,
                   d(s.bad_peers)});
  }
  return out;
}

}  // namespace ftrain::ckptd
