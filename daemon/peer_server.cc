// The peer listener: accept, authenticate, one STORE or FETCH per connection.
#include "daemon/peer_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/env.h"
#include "core/log.h"
#include "daemon/peer_address.h"
#include "daemon/peer_auth.h"

namespace ftrain::ckptd {

using peer::PeerMsg;

namespace {

std::string AddrOf(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
  port = ntohs(in6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

std::string HostOf(const std::string& who) { return who.substr(0, who.rfind(':')); }

std::string WithPort(const std::string& host, const std::string& port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

std::string Reason(const std::string& text) {
  const std::string t = text.substr(0, peer::kMaxReasonBytes);
  const uint32_t n = static_cast<uint32_t>(t.size());
  return std::string(reinterpret_cast<const char*>(&n), 4) + t;
}

}  // namespace

PeerServer::PeerServer(std::string job, std::string secret, double timeout_s, ReplicaStore* store,
                       Env* env)
    : job_(std::move(job)),
      secret_(std::move(secret)),
      timeout_s_(timeout_s),
      store_(store),
      env_(env) {}

PeerServer::~PeerServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes blocked polls at once
  }
  if (stop_[1] >= 0) {
    char b = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_[1], &b, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (auto& [id, t] : threads) t.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : stop_) {
    if (fd >= 0) ::close(fd);
  }
}

Status PeerServer::Start(const std::string& listen, const AdvertiseOptions& advertise) {
  std::string host;
  int port = 0;
  FT_RETURN_IF_ERROR(peer::ParseHostPort(listen, true, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host == "*" ? nullptr : host.c_str(), std::to_string(port).c_str(),
                            &hints, &res);
      e != 0) {
    return Status::InvalidArgument("--peer-listen '" + listen + "': " + ::gai_strerror(e));
  }
  listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  // Ignored: only lets a restarted daemon rebind a port in TIME_WAIT.
  (void)::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    const int err = errno;
    ::freeaddrinfo(res);
    return Status::FailedPrecondition("--peer-listen '" + listen + "': " + std::strerror(err));
  }
  ::freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  FT_RETURN_IF_ERROR(Publish(host, AddrOf(bound), advertise));
  if (::pipe2(stop_, O_CLOEXEC | O_NONBLOCK) != 0) return Status::IOError("pipe2 failed");
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

bool LogBudget::Allow(double now_s, uint64_t* dropped) {
  if (tokens_ < 0) tokens_ = burst_;
  tokens_ = std::min<double>(burst_, tokens_ + (now_s - last_s_) / refill_s_);
  last_s_ = now_s;
  if (tokens_ < 1) {
    ++dropped_;
    ++dropped_total_;
    return false;
  }
  tokens_ -= 1;
  *dropped = dropped_;
  dropped_ = 0;
  return true;
}

// address_ from the listen host, the bound "IP:PORT" and --peer-advertise.
Status PeerServer::Publish(const std::string& host, const std::string& bound,
                           const AdvertiseOptions& advertise) {
  const std::string port = bound.substr(bound.rfind(':') + 1);
  const bool wildcard = host == "*" || host == "0.0.0.0" || host == "::";
  std::string pub = bound.substr(0, bound.rfind(':'));
  std::string chosen = "--peer-listen '" + host + "'";  // who picked the address
  if (!advertise.advertise.empty()) {
    chosen = "--peer-advertise '" + advertise.advertise + "'";
    auto iface = InterfaceAddress(advertise.advertise);
    if (iface.ok()) {
      pub = *iface;
      chosen += " (" + pub + ")";
    } else if (iface.status().code() != Status::Code::kNotFound) {
      return Status::FailedPrecondition("--peer-advertise: " + iface.status().message());
    } else {
      pub = advertise.advertise;
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      if (int e = ::getaddrinfo(pub.c_str(), port.c_str(), &hints, &res); e != 0) {
        return Status::FailedPrecondition(chosen +
                                          " is neither an interface of this node nor a host "
                                          "name that resolves here: " +
                                          ::gai_strerror(e));
      }
      ::freeaddrinfo(res);
    }
  } else if (wildcard) {  // others need a name they can reach: this host's
    char name[256] = {0};
    ::gethostname(name, sizeof(name) - 1);
    pub = name;
  }
  if (pub.size() > 2 && pub.front() == '[') pub = pub.substr(1, pub.size() - 2);
  if (IsLoopbackHost(pub) && advertise.job_nodes > 1) {
    const std::string what = "the loopback address " + pub + " in a job of " +
                             std::to_string(advertise.job_nodes) +
                             " nodes: the other nodes cannot reach it";
    // A loopback literal (or interface) someone chose is refused; a host name that
    // resolves to loopback is only warned about: a local test cluster runs every node here.
    if (!advertise.advertise.empty() || IsLoopbackHost(host)) {
      return Status::FailedPrecondition(chosen + " is " + what +
                                        "; advertise the interface or address of the network "
                                        "the job's traffic uses (--peer-advertise, "
                                        "FTRAIN_PEER_ADVERTISE)");
    }
    FT_LOG(Warning) << "ckptd: the peer address " << pub << " (" << chosen << ") is " << what
                    << ", unless they all run on this host (a local test cluster); set "
                       "--peer-advertise (FTRAIN_PEER_ADVERTISE) to the fast network's "
                       "interface or address";
  }
  address_ = WithPort(pub, port);
  return Status::Ok();
}

void PeerServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{stop_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    JoinDone();
    if (fds[1].revents == 0) continue;
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::string who = AddrOf(from);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    const std::string refused = AdmitLocked(HostOf(who));
    if (!refused.empty()) {
      ++stats_.over_limit;
      stats_.last_bad_peer = who + ": " + refused;
      LogLimitedLocked("ckptd: peer " + who + ": " + refused + "; closed");
      ::close(fd);
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // ignored: latency
    open_fds_.push_back(fd);
    const uint64_t id = next_id_++;
    threads_[id] = std::thread([this, id, fd, who] { Serve(id, fd, who); });
  }
}

std::string PeerServer::AdmitLocked(const std::string& host) {
  if (pre_auth_ >= kMaxPreAuthConns) {
    return "over the limit of " + std::to_string(kMaxPreAuthConns) +
           " connections in the handshake";
  }
  int& mine = pre_auth_by_host_[host];
  if (mine >= kMaxPreAuthPerAddress) {
    return "over the limit of " + std::to_string(kMaxPreAuthPerAddress) +
           " connections in the handshake from one address";
  }
  ++mine;
  ++pre_auth_;
  return "";
}

void PeerServer::LogLimitedLocked(const std::string& line) {
  uint64_t dropped = 0;
  if (!log_budget_.Allow(NowSeconds(env_), &dropped)) return;
  FT_LOG(Warning) << line
                  << (dropped > 0 ? " (" + std::to_string(dropped) +
                                        " more peer warnings were not logged: rate limit)"
                                  : std::string());
}

void PeerServer::Bad(const std::string& peer, const Status& why, bool authenticated) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.bad_peers;
  stats_.last_bad_peer = peer + ": " + why.message();
  const std::string line = "ckptd: disconnecting peer " + peer + ": " + why.message();
  if (authenticated) {
    FT_LOG(Warning) << line;  // a member of this job: always worth a line
  } else {
    LogLimitedLocked(line);
  }
}

void PeerServer::JoinDone() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t id : done_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    done_.clear();
  }
  for (auto& t : done) t.join();  // they only return after marking themselves done
}

void PeerServer::Serve(uint64_t id, int fd, std::string who) {
  {
    // Strangers get a short handshake deadline in a pool of their own; only a proven
    // member of the job reaches the serving slots.
    peer::PeerConn conn(fd, who, std::min(timeout_s_, kPreAuthTimeoutS), env_);
    Status s = peer::AuthenticateAsServer(&conn, secret_, job_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pre_auth_;
      auto it = pre_auth_by_host_.find(HostOf(who));
      if (it != pre_auth_by_host_.end() && --it->second == 0) pre_auth_by_host_.erase(it);
    }
    if (s.ok()) {
      conn.set_timeout(timeout_s_);
      s = ServeAuthenticated(&conn);
      if (!s.ok() && s.code() == Status::Code::kAborted) {
        FT_LOG(Info) << "ckptd: peer " << who << ": " << s.message();
      } else if (!s.ok()) {
        Bad(who, s, true);
      }
    } else if (conn.closed_between_frames() && !conn.received_any()) {
      FT_LOG(Debug) << "ckptd: peer " << who << " closed before the handshake (a probe)";
    } else {
      Bad(who, s, false);
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.remove(fd);
  }  // closes fd, after it left open_fds_ (no shutdown of a reused fd number)
  std::lock_guard<std::mutex> lock(mu_);
  done_.push_back(id);
}

Status PeerServer::ServeAuthenticated(peer::PeerConn* conn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (serving_ >= kMaxPeerConns) {
      ++stats_.over_limit;
      LogLimitedLocked("ckptd: peer " + conn->peer() + ": already serving " +
                       std::to_string(kMaxPeerConns) + " peers; closed (it retries)");
      return Status::Ok();
    }
    ++serving_;
  }
  std::string payload;
  Status s;
  auto type = conn->Receive(&payload);
  if (!type.ok()) {
    s = type.status();
  } else if (*type == PeerMsg::kStore) {
    s = HandleStore(conn, payload);
  } else if (*type == PeerMsg::kFetch) {
    s = HandleFetch(conn, payload);
  } else {
    s = Status::InvalidArgument(std::string("sent ") + peer::PeerMsgName(*type) +
                                " where STORE or FETCH was expected");
  }
  if (!type.ok() && conn->closed_between_frames()) {
    // A buddy's start-up check (authenticate, then hang up): not a fault.
    s = Status::Aborted("closed after the handshake (a reachability check)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  --serving_;
  return s;
}

Status PeerServer::HandleStore(peer::PeerConn* conn, const std::string& payload) {
  FT_ASSIGN_OR_RETURN(peer::ReplicaHeader h, peer::DecodeReplicaHeader(payload, uint64_t{1} << 42));
  if (h.job != job_) {
    return Status::FailedPrecondition("tried to store a snapshot of job '" + h.job +
                                      "' (it authenticated for job '" + job_ + "')");
  }
  auto res = store_->Reserve(h);
  if (!res.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.refused;
    }
    return conn->Send(PeerMsg::kRefused, Reason(res.status().message()));
  }
  std::unique_ptr<ReplicaStore::Reservation> r = std::move(res).value();
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kAccept, ""));
  const auto t0 = std::chrono::steady_clock::now();
  FT_RETURN_IF_ERROR(conn->ReceiveImage(r->data(), h.extent));
  Status v = peer::VerifyPieces(h.submit, h.xxh3, r->data());
  if (!v.ok()) {
    FT_LOG(Warning) << "ckptd: replica from peer " << conn->peer() << " dropped: " << v.message();
    return conn->Send(PeerMsg::kRefused, Reason(v.message()));  // the older replica stays
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  FT_LOG(Info) << "ckptd: replica received rank=" << h.rank << " step=" << h.step
               << " bytes=" << h.extent << " from peer " << conn->peer() << " seconds=" << s
               << " (whole, every piece's XXH3 verified)";
  store_->Commit(std::move(r), conn->peer());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.replicas_received;
    stats_.bytes_received += h.extent;
  }
  return conn->Send(PeerMsg::kStoreOk, "");
}

Status PeerServer::HandleFetch(peer::PeerConn* conn, const std::string& payload) {
  FT_ASSIGN_OR_RETURN(peer::Fetch f, peer::DecodeFetch(payload));
  if (f.job != job_) {
    return Status::FailedPrecondition("tried to fetch a snapshot of job '" + f.job +
                                      "' (it authenticated for job '" + job_ + "')");
  }
  int64_t newest = -1;
  std::shared_ptr<const Replica> r = store_->Find(f.job, f.rank, f.step, &newest);
  if (r == nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.refused;
    }
    return conn->Send(
        PeerMsg::kRefused,
        Reason("no replica of rank " + std::to_string(f.rank) + " step " + std::to_string(f.step) +
               " here" +
               (newest >= 0 ? " (newest: step " + std::to_string(newest) + ")" : std::string())));
  }
  FT_RETURN_IF_ERROR(conn->Send(PeerMsg::kOffer, peer::EncodeReplicaHeader(r->header)));
  FT_RETURN_IF_ERROR(conn->SendImage(r->image->data(), r->header.extent, nullptr));
  std::string ack;
  FT_RETURN_IF_ERROR(conn->Expect(PeerMsg::kStoreOk, &ack));
  FT_LOG(Info) << "ckptd: replica of rank " << f.rank << " step " << f.step << " served to peer "
               << conn->peer();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.replicas_served;
  stats_.bytes_served += r->header.extent;
  return Status::Ok();
}

PeerServerStats PeerServer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PeerServerStats s = stats_;
  s.not_logged = log_budget_.dropped_total();
  return s;
}

}  // namespace ftrain::ckptd
