// peer-addr files and the choice of the address a daemon publishes.
#include "daemon/peer_address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "daemon/peer_wire.h"

namespace ftrain::ckptd {

StatusOr<std::string> InterfaceAddress(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return Status::IOError(std::string("getifaddrs: ") + std::strerror(errno));
  bool named = false;
  std::string v4, v6;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr || iface != i->ifa_name) continue;
    named = true;
    if (i->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, buf,
                  sizeof(buf));
      v4 = buf;
    } else if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;  // needs a scope id: not portable
      ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
      v6 = buf;
    }
  }
  ::freeifaddrs(list);
  if (!named) return Status::NotFound("no interface '" + iface + "'");
  if (v4.empty() && v6.empty())
    return Status::FailedPrecondition("interface '" + iface + "' has no usable IP address");
  return v4.empty() ? v6 : v4;
}

bool IsLoopbackHost(const std::string& host) {
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return host == "localhost";
}

Status WriteAddressFile(const std::string& path, const PeerAddress& a) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::IOError("open '" + tmp + "': " + std::strerror(errno));
  const std::string text =
      a.address + "\nstart=" + a.start + " since=" + std::to_string(a.since) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::IOError("write '" + tmp + "': " + std::strerror(err));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::IOError("rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

StatusOr<PeerAddress> ReadPeerAddressFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound("'" + path + "' does not exist (yet)");
  PeerAddress a;
  std::string line;
  std::getline(f, a.address);
  std::string host;
  int port = 0;
  Status s = peer::ParseHostPort(a.address, false, &host, &port);
  if (!s.ok()) return Status::InvalidArgument("'" + path + "': " + s.message());
  if (std::getline(f, line)) {
    std::istringstream in(line);
    std::string word;
    while (in >> word) {
      if (word.rfind("start=", 0) == 0) a.start = word.substr(6);
      // A garbled number only loses the skip of a hopeless fetch: -1 is "may hold anything".
      if (word.rfind("since=", 0) == 0) a.since = std::strtoll(word.c_str() + 6, nullptr, 10);
    }
  }
  return a;
}

StatusOr<std::string> ReadAddressFile(const std::string& path, const std::string& start) {
  FT_ASSIGN_OR_RETURN(PeerAddress a, ReadPeerAddressFile(path));
  if (!start.empty() && a.start != start) {
    return Status::NotFound("'" + path + "' is of another start of the job (start '" + a.start +
                            "', this one is '" + start + "'): waiting for the new one");
  }
  return a.address;
}

}  // namespace ftrain::ckptd
