// Fetching a replica from a peer into a local slot.
#include "daemon/peer_fetch.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>

#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "daemon/peer_auth.h"
#include "daemon/peer_server.h"
#include "daemon/peer_wire.h"

namespace ftrain::ckptd {

using peer::PeerMsg;

PeerFetcher::PeerFetcher(FetcherOptions options, std::function<void(FetchResult)> on_done)
    : options_(std::move(options)),
      unreachable_(options_.env),
      queue_([this](const FetchJob& job) { return Fetch(job); }, std::move(on_done)) {}

double SteadyNowS(Env* env) { return NowSeconds(env); }

UnreachablePeers::UnreachablePeers(Env* env, double remember_s)
    : env_(env), remember_s_(remember_s) {}

double UnreachablePeers::Now() const { return NowSeconds(env_); }

bool UnreachablePeers::Skip(const std::string& address, double now) const {
  auto it = dead_since_.find(address);
  return it != dead_since_.end() && now - it->second < remember_s_;
}

void UnreachablePeers::MarkDead(const std::string& address, double now) {
  dead_since_[address] = now;
}

void UnreachablePeers::MarkAlive(const std::string& address) { dead_since_.erase(address); }

std::vector<std::pair<std::string, PeerAddress>> PeerFetcher::PeerFiles(
    const std::string& run_dir) {
  std::vector<std::pair<std::string, PeerAddress>> out;
  DIR* d = ::opendir(run_dir.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> nodes;
  while (dirent* e = ::readdir(d)) {
    const std::string node = RunLayout::NodeOfDaemonDir(e->d_name);
    if (!node.empty()) nodes.push_back(node);
  }
  ::closedir(d);
  std::sort(nodes.begin(), nodes.end());
  for (const auto& node : nodes) {
    auto a = ReadPeerAddressFile(RunLayout(run_dir).daemon_peer_addr(node));
    if (a.ok()) out.emplace_back(node, std::move(a).value());
  }
  return out;
}

std::vector<std::string> PeerFetcher::PeersOf(const std::string& run_dir, const std::string& node,
                                              const std::string& start,
                                              std::vector<std::string>* skipped, std::string* own) {
  std::vector<std::string> out;
  for (const auto& [other, a] : PeerFiles(run_dir)) {
    if (a.start != start) {
      if (skipped != nullptr) skipped->push_back(other);  // an earlier start's daemon
      continue;
    }
    if (other == node && own != nullptr) {
      *own = a.address;
    } else if (other == node) {
      out.insert(out.begin(), a.address);
    } else {
      out.push_back(a.address);
    }
  }
  return out;
}

std::vector<std::string> PeerFetcher::Reachable(const std::vector<std::string>& peers,
                                                std::string* tried) {
  const double now = unreachable_.Now();
  std::vector<std::string> ask;
  for (const auto& a : peers) {
    if (unreachable_.Skip(a, now)) {
      *tried += (tried->empty() ? "" : "; ") + a + ": did not answer a moment ago (skipped)";
    } else {
      ask.push_back(a);
    }
  }
  if (ask.size() <= 1) return ask;
  std::vector<Status> st(ask.size());
  std::vector<std::thread> probes;
  for (size_t i = 0; i < ask.size(); ++i) {
    probes.emplace_back(
        [&, i] { st[i] = peer::ConnectPeer(ask[i], options_.timeout_s, options_.env).status(); });
  }
  for (auto& t : probes) t.join();
  std::vector<std::string> out;
  for (size_t i = 0; i < ask.size(); ++i) {
    if (st[i].ok()) {
      unreachable_.MarkAlive(ask[i]);
      out.push_back(ask[i]);
      continue;
    }
    unreachable_.MarkDead(ask[i], now);
    FT_LOG(Info) << "ckptd: peer " << ask[i] << " does not answer (" << st[i].message()
                 << "); not asked for replicas for " << unreachable_.remember_s() << " s";
    *tried += (tried->empty() ? "" : "; ") + ask[i] + ": " + st[i].message();
  }
  return out;
}

Status PeerFetcher::FetchFrom(const std::string& address, const FetchJob& job, FetchResult* out) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<peer::PeerConn> conn,
                      peer::ConnectPeer(address, options_.timeout_s, options_.env));
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
  r.id = job.id;
  r.rank = job.rank;
  r.step = job.step;
  r.slot = job.slot;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> skipped;
  std::string tried;
  auto attempt = [&](const std::string& a) {
    Status s = FetchFrom(a, job, &r);
    if (s.ok()) {
      r.source = "peer " + a;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return true;
    }
    FT_LOG(Info) << "ckptd: fetch of rank " << job.rank << " step " << job.step << " from peer "
                 << a << ": " << s.message();
    tried += (tried.empty() ? "" : "; ") + a + ": " + s.message();
    return false;
  };
  std::vector<std::string> peers{job.address};
  if (job.address.empty()) {
    // This daemon's own replica store first, without waiting for any probe: on a spare that
    // was the dead node's buddy, the replica is already here (its own listener serves it).
    std::string own;
    peers = PeersOf(options_.run_dir, options_.node, options_.start, &skipped, &own);
    if (!own.empty() && attempt(own)) return r;
    peers = Reachable(peers, &tried);
  }
  for (const auto& a : peers) {
    if (job.deadline_s > 0 && SteadyNowS(options_.env) >= job.deadline_s) {
      tried += (tried.empty() ? "" : "; ") + std::string("out of time before asking ") + a;
      break;
    }
    if (attempt(a)) return r;
  }
  std::string none =
      " (no peer addresses of this start under " + options_.run_dir + "/ckptd-*/peer-addr";
  if (!skipped.empty())
    none += "; " + std::to_string(skipped.size()) + " of earlier starts skipped";
  none += ")";
  r.status =
      Status::NotFound("no peer holds rank " + std::to_string(job.rank) + " step " +
                       std::to_string(job.step) + (tried.empty() ? none : " (" + tried + ")"));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ftrain::ckptd
