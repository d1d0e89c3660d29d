// ckptd's peer listener (--peer-listen): accepts TCP connections of other daemons of the
// same job, one thread per connection up to kMaxPeerConns (more are closed at once, logged),
// authenticates them (peer_auth.h), then serves exactly one request per connection:
//   STORE: receive a replica into the ReplicaStore (whole + verified, or dropped);
//   FETCH: send the replica of (job, rank) if it is of the step asked for.
// A peer that is silent, slow, malformed, of another job or asking for another job's
// snapshot is disconnected and logged with its address; the others are not affected.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "replica_store.h"

namespace ftrain::ckptd {

constexpr int kMaxPeerConns = 8;

struct PeerServerStats {
  uint64_t replicas_received = 0;
  uint64_t bytes_received = 0;
  uint64_t replicas_served = 0;
  uint64_t bytes_served = 0;
  uint64_t refused = 0;       // STORE/FETCH declined (budget, older step, not held)
  uint64_t bad_peers = 0;     // disconnected for a protocol or authentication error
  std::string last_bad_peer;  // "ADDR: what was wrong"
};

class PeerServer {
 public:
  PeerServer(std::string job, std::string secret, double timeout_s, ReplicaStore* store);
  ~PeerServer();  // stops accepting, closes every connection, joins
  // Binds "HOST:PORT" (port 0: any free one) and starts the accept thread. The bound
  // address is address().
  Status Start(const std::string& listen);
  const std::string& address() const { return address_; }
  PeerServerStats stats() const;

 private:
  void AcceptLoop();
  void Serve(uint64_t id, int fd, std::string peer);
  void JoinDone();
  Status HandleStore(peer::PeerConn* conn, const std::string& payload);
  Status HandleFetch(peer::PeerConn* conn, const std::string& payload);
  void Bad(const std::string& peer, const Status& why);

  const std::string job_, secret_;
  const double timeout_s_;
  ReplicaStore* store_;
  int listen_fd_ = -1;
  int stop_[2] = {-1, -1};
  std::string address_;
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::thread> threads_;  // guarded by mu_
  std::vector<uint64_t> done_;               // guarded by mu_: finished, to be joined
  uint64_t next_id_ = 0;                     // guarded by mu_
  std::list<int> open_fds_;                  // guarded by mu_: shut down on stop
  int active_ = 0;                           // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  PeerServerStats stats_;                    // guarded by mu_
};

// Writes `address` to `path` (temp, fsync, rename): how other daemons find this one.
Status WriteAddressFile(const std::string& path, const std::string& address);
// The first line of `path`, validated as HOST:PORT; NotFound while it does not exist.
StatusOr<std::string> ReadAddressFile(const std::string& path);

}  // namespace ftrain::ckptd
