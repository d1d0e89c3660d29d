// FaultyHttpServer: accept loop, request parsing, and the faults.
#include "data_http_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ftrain::data::testing {
namespace {

void SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return;  // the client went away: nothing more to send
    p += k;
    n -= size_t(k);
  }
}

void SendStatus(int fd, int status) {
  std::string r = "HTTP/1.1 " + std::to_string(status) +
                  " Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  SendAll(fd, r.data(), r.size());
}

}  // namespace

FaultyHttpServer::FaultyHttpServer(std::string root) : root_(std::move(root)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  ::listen(listen_fd_, 64);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FaultyHttpServer::~FaultyHttpServer() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> handlers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handlers.swap(handlers_);
  }
  for (auto& t : handlers) t.join();
}

void FaultyHttpServer::Inject(const std::string& part, Fault fault, int count, int status,
                              int skip) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back({part, fault, count, status, skip});
}

int FaultyHttpServer::Requests(const std::string& part) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& p : seen_) n += p.find(part) != std::string::npos;
  return n;
}

bool FaultyHttpServer::TakeFault(const std::string& path, Rule* rule) {
  std::lock_guard<std::mutex> lock(mu_);
  seen_.push_back(path);
  for (auto& r : rules_) {
    if (r.count > 0 && path.find(r.part) != std::string::npos) {
      if (r.skip > 0) {
        --r.skip;
        continue;
      }
      --r.count;
      *rule = r;
      return true;
    }
  }
  return false;
}

void FaultyHttpServer::AcceptLoop() {
  while (!stop_) {
    struct pollfd p = {listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    handlers_.emplace_back([this, fd] {
      Serve(fd);
      ::close(fd);
    });
  }
}

void FaultyHttpServer::Serve(int fd) {
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    req.append(buf, size_t(n));
  }
  std::istringstream in(req);
  std::string method, path, version;
  in >> method >> path >> version;
  long long first = -1, last = -1;
  std::string line;
  while (std::getline(in, line)) {
    if (strncasecmp(line.c_str(), "Range: bytes=", 13) == 0) {
      std::sscanf(line.c_str() + 13, "%lld-%lld", &first, &last);
    }
  }
  Rule rule;
  bool faulty = TakeFault(path, &rule);
  if (faulty && rule.fault == Fault::kStatus) return SendStatus(fd, rule.status);

  std::ifstream f(root_ + path, std::ios::binary);
  if (path.find("..") != std::string::npos || !f) return SendStatus(fd, 404);
  std::ostringstream all;
  all << f.rdbuf();
  const std::string file = all.str();
  std::string body = file, head;
  if (first >= 0) {
    if (first >= (long long)file.size()) return SendStatus(fd, 416);
    if (last < 0 || last >= (long long)file.size()) last = (long long)file.size() - 1;
    body = file.substr(size_t(first), size_t(last - first + 1));
    head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(first) + "-" +
           std::to_string(last) + "/" + std::to_string(file.size()) + "\r\n";
  } else {
    head = "HTTP/1.1 200 OK\r\n";
  }
  head += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  SendAll(fd, head.data(), head.size());
  if (faulty && rule.fault == Fault::kCorrupt && !body.empty()) body[body.size() / 2] ^= 0x20;
  if (faulty && (rule.fault == Fault::kStall || rule.fault == Fault::kTruncate)) {
    SendAll(fd, body.data(), body.size() / 2);
    if (rule.fault == Fault::kStall) {
      // Hold the connection open without sending until the client gives up or we stop.
      for (int i = 0; i < 600 && !stop_; ++i) {
        struct pollfd p = {fd, POLLIN, 0};
        if (::poll(&p, 1, 50) > 0) {
          if (::recv(fd, buf, sizeof(buf), 0) <= 0) return;  // client closed
        }
      }
    }
    return;
  }
  SendAll(fd, body.data(), body.size());
}

}  // namespace ftrain::data::testing
