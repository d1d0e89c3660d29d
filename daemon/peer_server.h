// ckptd's peer listener (--peer-listen): accepts TCP connections of other daemons of the
// same job, authenticates them (peer_auth.h), then serves exactly one request per connection:
//   STORE: receive a replica into the ReplicaStore (whole + verified, or dropped);
//   FETCH: send the replica of (job, rank) if it is of the step asked for.
// Unauthenticated connections get a short handshake deadline and their own, smaller pool
// with a per-address share, so strangers can never hold the slots of authenticated peers.
// A peer that is silent, slow, malformed, of another job or asking for another job's
// snapshot is disconnected and logged (rate-limited) with its address; the others are not
// affected.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "daemon/peer_address.h"
#include "daemon/replica_store.h"

namespace ftrain::ckptd {

constexpr int kMaxPeerConns = 8;          // authenticated connections served at once
constexpr int kMaxPreAuthConns = 16;      // connections still in the handshake
constexpr int kMaxPreAuthPerAddress = 4;  // of those, from one source address
constexpr double kPreAuthTimeoutS = 2;    // per handshake frame (at most --peer-timeout-s)

// A log line budget: bursts of up to `burst` lines, then one per `refill_s` seconds.
class LogBudget {
 public:
  explicit LogBudget(int burst = 20, double refill_s = 10) : burst_(burst), refill_s_(refill_s) {}
  // Whether to log now; *dropped: lines not logged since the last one that was.
  bool Allow(double now_s, uint64_t* dropped);
  uint64_t dropped_total() const { return dropped_total_; }

 private:
  const int burst_;
  const double refill_s_;
  double tokens_ = -1;  // -1: full (first use)
  double last_s_ = 0;
  uint64_t dropped_ = 0;
  uint64_t dropped_total_ = 0;
};

struct PeerServerStats {
  uint64_t replicas_received = 0;
  uint64_t bytes_received = 0;
  uint64_t replicas_served = 0;
  uint64_t bytes_served = 0;
  uint64_t refused = 0;       // STORE/FETCH declined (budget, older step, not held)
  uint64_t bad_peers = 0;     // disconnected for a protocol or authentication error
  uint64_t over_limit = 0;    // connections closed at once: a connection limit was reached
  uint64_t not_logged = 0;    // warnings about peers dropped by the log rate limit
  std::string last_bad_peer;  // "ADDR: what was wrong"
};

class PeerServer {
 public:
  PeerServer(std::string job, std::string secret, double timeout_s, ReplicaStore* store, Env* env);
  ~PeerServer();  // stops accepting, closes every connection, joins
  // Binds "HOST:PORT" (port 0: any free one) and starts the accept thread. address() is
  // what others should dial (see AdvertiseOptions).
  Status Start(const std::string& listen, const AdvertiseOptions& advertise = {});
  const std::string& address() const { return address_; }
  PeerServerStats stats() const;

 private:
  void AcceptLoop();
  void Serve(uint64_t id, int fd, std::string peer);
  void JoinDone();
  Status HandleStore(peer::PeerConn* conn, const std::string& payload);
  Status HandleFetch(peer::PeerConn* conn, const std::string& payload);
  void Bad(const std::string& peer, const Status& why, bool authenticated);
  // Admits a new connection from `host` or says why not (under mu_).
  std::string AdmitLocked(const std::string& host);
  // Serves the request of an authenticated connection, if there is room for it.
  Status ServeAuthenticated(peer::PeerConn* conn);
  void LogLimitedLocked(const std::string& line);
  Status Publish(const std::string& host, const std::string& bound,
                 const AdvertiseOptions& advertise);

  const std::string job_, secret_;
  const double timeout_s_;
  ReplicaStore* store_;
  Env* env_;  // the clock of the deadlines and the log budget
  int listen_fd_ = -1;
  int stop_[2] = {-1, -1};
  std::string address_;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::thread> threads_;      // guarded by mu_
  std::vector<uint64_t> done_;                   // guarded by mu_: finished, to be joined
  uint64_t next_id_ = 0;                         // guarded by mu_
  std::list<int> open_fds_;                      // guarded by mu_: shut down on stop
  int pre_auth_ = 0;                             // guarded by mu_: in the handshake
  std::map<std::string, int> pre_auth_by_host_;  // guarded by mu_
  int serving_ = 0;                              // guarded by mu_: authenticated
  LogBudget log_budget_;                         // guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
  PeerServerStats stats_;                        // guarded by mu_
};

}  // namespace ftrain::ckptd
