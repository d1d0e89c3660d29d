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
#include "daemon/peer_auth.h"
#include "daemon/peer_fetch.h"
#include "daemon/peer_server.h"
#include "daemon/replica_store.h"
#include "daemon/replicator.h"
#include "daemon/server.h"

namespace ftrain::ckptd {

namespace proto = ckpt::proto;
using proto::MsgType;

// Never fails the daemon: without replication it still serves its trainers (asynchronous
// checkpoints) and says so loudly, in the log and in the status.
void Server::StartPeers() {
  if (!options_.peer.enabled()) return;
  Status s = TryStartPeers();
  if (s.ok()) return;
  replication_error_ = s.message();
  StopPeers();
  FT_LOG(Error) << "ckptd: BUDDY REPLICATION IS OFF on node " << options_.node << ": "
                << replication_error_
                << ". This daemon still takes asynchronous checkpoints; its ranks are not "
                   "replicated, it holds no replicas and cannot fetch any. Fix the setting "
                   "and restart the job to get replication back.";
}

// The start this daemon belongs to, and the newest step committed when the start's first
// daemon came up (inherited from any peer-addr file of the same start: a daemon restarted
// within the start, or one that came up later, keeps the start's value).
void Server::FindStartSince() {
  const PeerOptions& p = options_.peer;
  start_id_ = peer::StartIdOf(p.secret, p.job);
  since_ = last_committed_step_;
  for (const auto& [node, a] : PeerFetcher::PeerFiles(options_.run_dir)) {
    if (a.start == start_id_ && a.since < since_) since_ = a.since;
  }
}

Status Server::TryStartPeers() {
  const PeerOptions& p = options_.peer;
  peer_addr_file_ = RunLayout(options_.run_dir).daemon_peer_addr(options_.node);
  FindStartSince();
  ::unlink(peer_addr_file_.c_str());  // ignored: usually absent; a stale one would mislead
  if (!p.listen.empty()) {
    replicas_ = std::make_unique<ReplicaStore>(
        static_cast<uint64_t>(p.replica_memory_gb * static_cast<double>(uint64_t{1} << 30)));
    peer_server_ =
        std::make_unique<PeerServer>(p.job, p.secret, p.timeout_s, replicas_.get(), options_.env);
    FT_RETURN_IF_ERROR(peer_server_->Start(p.listen, {p.advertise, p.job_nodes}));
    MaybePublishAddress();
  }
  if (!p.buddy.empty() || !p.buddy_file.empty()) {
    ReplicatorOptions ro;
    ro.job = p.job;
    ro.secret = p.secret;
    ro.start = start_id_;
    ro.buddy = p.buddy;
    ro.buddy_file = p.buddy_file;
    ro.timeout_s = p.timeout_s;
    ro.env = options_.env;
    ro.nice = std::min(19, options_.persist.nice + 10);
    ro.mbps = p.replication_mbps;
    replicator_ = std::make_unique<Replicator>(ro);
  }
  FetcherOptions fo{p.job, p.secret, options_.run_dir, options_.node, start_id_, p.timeout_s};
  fo.env = options_.env;
  fetcher_ = std::make_unique<PeerFetcher>(fo, [this](FetchResult r) {
    {
      std::lock_guard<std::mutex> lock(results_mu_);
      fetch_results_.push_back(std::move(r));
    }
    char b = 1;
    // Ignored: a full pipe already guarantees a wake-up.
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  });
  FT_LOG(Info) << "ckptd: buddy replication for job " << p.job << " (start " << start_id_
               << ", replicas possible after step " << since_ << "): peer listener "
               << (peer_server_ ? peer_server_->address() + " (in " + peer_addr_file_ + ")"
                                : std::string("off"))
               << ", buddy "
               << (!p.buddy.empty()        ? p.buddy
                   : !p.buddy_file.empty() ? "from " + p.buddy_file
                                           : "none")
               << ", replica memory " << p.replica_memory_gb << " GB, peer timeout " << p.timeout_s
               << " s, replication cap " << p.replication_mbps << " MB/s (0: none)";
  return Status::Ok();
}

// Publishes (or retries publishing) RUN/ckptd-NODE/peer-addr: a transient error of the
// shared file system must not cost the node its replicas. Loop thread.
void Server::MaybePublishAddress() {
  if (peer_server_ == nullptr || address_published_) return;
  const double now = SteadyNowS(options_.env);
  if (now < address_retry_at_) return;
  Status s = WriteAddressFile(peer_addr_file_, {peer_server_->address(), start_id_, since_});
  ++address_attempts_;
  if (s.ok()) {
    address_published_ = true;
    if (address_attempts_ > 1) {
      FT_LOG(Info) << "ckptd: published the peer address in " << peer_addr_file_ << " after "
                   << address_attempts_ << " attempts";
    }
    return;
  }
  const double wait_s =
      std::min(30.0, 0.5 * static_cast<double>(1u << std::min(6, address_attempts_)));
  address_retry_at_ = now + wait_s;
  FT_LOG(Warning) << "ckptd: cannot publish the peer address (attempt " << address_attempts_
                  << "): " << s.message() << "; other daemons cannot find this one until it is; "
                  << "retrying in " << wait_s << " s";
}

void Server::StopPeers() {
  fetcher_.reset();
  replicator_.reset();
  peer_server_.reset();
  replicas_.reset();
  if (!peer_addr_file_.empty()) ::unlink(peer_addr_file_.c_str());  // ignored: best effort
}

void Server::MarkReused(Slot& slot) {
  if (slot.reused) slot.reused->store(true);
  slot.reused.reset();
  slot.sending.reset();
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
  slot.sending = std::make_shared<std::atomic<bool>>(false);
  job.sending = slot.sending;
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
    return refuse(!replication_error_.empty()
                      ? "buddy replication is off on this node: " + replication_error_
                      : "this daemon does not replicate (start it with --peer-listen, --job-id "
                        "and a job secret)");
  }
  if (c.fetch_id != 0) return refuse("a FETCH_PEER of this connection is already in flight");
  if (req->address.empty() && req->step <= since_) {
    // A requeued start (or the first): every replica store of this start began empty
    // after step since_ was committed, so asking the peers cannot succeed.
    proto::FetchPeerOk none;
    none.step = req->step;
    none.detail = "step " + std::to_string(req->step) +
                  " is not newer than the newest committed when this start's daemons came up (" +
                  std::to_string(since_) + "): no peer memory can hold it (a new start)";
    FT_LOG(Info) << "ckptd: rank " << c.rank << " fetch of step " << req->step
                 << " skipped: " << none.detail;
    Send(fd, MsgType::kFetchOk, proto::EncodeFetchPeerOk(none));
    return true;
  }
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
  c.fetch_id = next_fetch_id_++;
  c.fetch_step = req->step;
  // Half the client's wait: the answer (found or not) always arrives while it listens.
  c.fetch_deadline_s = req->timeout_s > 0 ? SteadyNowS(options_.env) + req->timeout_s / 2 : 0;
  FT_LOG(Info) << "ckptd: rank " << c.rank << " asks for step " << req->step << " from "
               << (req->address.empty() ? "the peers" : "peer " + req->address) << " (slot " << pick
               << ")";
  fetcher_->Enqueue({c.fetch_id, c.rank, req->step, static_cast<uint32_t>(pick), slot.seg,
                     std::move(req->address), c.fetch_deadline_s});
  return true;
}

// Answers the fetches whose client would stop listening soon: not found, "out of time".
// The fetch itself goes on; its result fills the slot but is sent to no one.
void Server::ExpireFetches() {
  const double now = SteadyNowS(options_.env);
  for (auto& [fd, c] : conns_) {
    if (c.fetch_id == 0 || c.fetch_deadline_s <= 0 || now < c.fetch_deadline_s) continue;
    proto::FetchPeerOk none;
    none.step = c.fetch_step;
    none.detail = "the peers did not deliver step " + std::to_string(c.fetch_step) +
                  " within half of the trainer's timeout; read it from disk";
    ++fetch_failures_;
    FT_LOG(Warning) << "ckptd: fetch for rank " << c.rank << ": " << none.detail;
    c.fetch_id = 0;
    Send(fd, MsgType::kFetchOk, proto::EncodeFetchPeerOk(none));
  }
}

// Milliseconds until the next fetch deadline, at most `cap_ms`.
int Server::NextDeadlineMs(int cap_ms) const {
  const double now = SteadyNowS(options_.env);
  int ms = cap_ms;
  for (const auto& [fd, c] : conns_) {
    if (c.fetch_id == 0 || c.fetch_deadline_s <= 0) continue;
    ms = std::min(ms, std::max(0, static_cast<int>((c.fetch_deadline_s - now) * 1000) + 1));
  }
  return ms;
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
    auto waiting = std::find_if(conns_.begin(), conns_.end(),
                                [&](const auto& fc) { return fc.second.fetch_id == r.id; });
    if (waiting == conns_.end()) {
      FT_LOG(Info) << "ckptd: fetch of rank " << r.rank << " step " << r.step << " ended ("
                   << (r.status.ok() ? "found" : r.status.message())
                   << ") after its trainer stopped waiting; not answered";
      continue;
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
    waiting->second.fetch_id = 0;
    Send(waiting->first, MsgType::kFetchOk, proto::EncodeFetchPeerOk(ok));
  }
}

nlohmann::json Server::ReplicationJson() const {
  const PeerOptions& p = options_.peer;
  nlohmann::json j = {{"enabled", p.enabled() && replication_error_.empty()}};
  if (!p.enabled()) return j;
  if (!replication_error_.empty()) {
    j["error"] = replication_error_;
    return j;
  }
  j["job_id"] = p.job;
  j["start"] = start_id_;
  j["since_step"] = since_;
  j["address_published"] = address_published_;
  j["peer_address"] = peer_server_ ? peer_server_->address() : "";
  j["buddy"] = replicator_ ? replicator_->buddy() : "";
  j["buddy_check"] = replicator_ ? replicator_->buddy_check() : "";
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
    j["peer_connections_over_limit"] = s.over_limit;
    j["peer_warnings_not_logged"] = s.not_logged;
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
