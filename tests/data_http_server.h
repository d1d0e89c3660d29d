// A tiny HTTP/1.1 file server on 127.0.0.1 for fault-injection tests of the HTTP source: real
// sockets, GET with Range, one request per connection. Faults are injected per path: an HTTP
// status (404, 500, 503), a stall after half the body, a truncated body, a corrupted byte.
// Not a general server: tests only.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ftrain::data::testing {

class FaultyHttpServer {
 public:
  enum class Fault { kStatus, kStall, kTruncate, kCorrupt };

  explicit FaultyHttpServer(std::string root);  // serves files under root
  ~FaultyHttpServer();                          // stops and joins every thread
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // After `skip` clean ones, the next `count` requests whose path contains `path_part` get
  // `fault` (`status` is the HTTP code of kStatus).
  void Inject(const std::string& path_part, Fault fault, int count, int status = 500, int skip = 0);
  // Requests seen so far whose path contains `path_part`.
  int Requests(const std::string& path_part) const;

 private:
  struct Rule {
    std::string part;
    Fault fault;
    int count;
    int status;
    int skip;
  };
  void AcceptLoop();
  void Serve(int fd);
  bool TakeFault(const std::string& path, Rule* rule);

  std::string root_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<Rule> rules_;            // guarded by mu_
  std::vector<std::string> seen_;      // guarded by mu_: request paths
  std::vector<std::thread> handlers_;  // guarded by mu_
};

}  // namespace ftrain::data::testing
