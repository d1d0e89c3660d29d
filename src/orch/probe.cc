// orch/probe.cc - the probes of a watcher on a cluster (probe.h).
#include "orch/probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "orch/files.h"
#include "orch/process.h"

namespace ftrain::orch {
namespace {

std::string ConnectOnce(const std::string& host, int port, double timeout_s) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return "unknown";
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return "unknown";
  }
  std::string verdict;
  if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    verdict = "open";
  } else if (errno != EINPROGRESS) {
    verdict = ClassifyConnectError(errno);  // the network said no at once: which no?
  } else {
    pollfd p{fd, POLLOUT, 0};
    const int r = poll(&p, 1, static_cast<int>(timeout_s * 1000));
    if (r <= 0) {
      verdict = "timeout";
    } else {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      verdict = ClassifyConnectError(err);
    }
  }
  close(fd);
  freeaddrinfo(res);
  return verdict;
}

}  // namespace

const char* ClassifyConnectError(int err) {
  switch (err) {
    case 0:
      return "open";
    case ECONNREFUSED:
      return "refused";  // a RST from the node's own address: its kernel, nothing listens
    case ETIMEDOUT:
      return "timeout";
    default:
      // ENETUNREACH, EHOSTUNREACH (a link flap here, a router's ICMP), anything else: the
      // network said no, not the node. Judged like a timeout, never dead at once.
      return "unreachable";
  }
}

std::string ConnectProbe(const std::string& host, int port, double timeout_s) {
  // A timeout (or an unreachable network) is tried once more (a loaded prober can be slow
  // too, a link flap can end): both must fail.
  std::string v = ConnectOnce(host, port, timeout_s);
  if (v == "timeout" || v == "unreachable") v = ConnectOnce(host, port, timeout_s);
  return v;
}

std::string SlurmProber::ReadHeartbeat(const std::string& node) {
  auto t = ReadText(dir_ + "/" + node);
  return t.ok() ? *t : "";
}

bool SlurmProber::HeartbeatExists(const std::string& node) {
  return access((dir_ + "/" + node).c_str(), F_OK) == 0;
}

StatusOr<std::string> SlurmProber::Address(const std::string& node) {
  std::lock_guard<std::mutex> lock(slurm_mu_);
  return slurm_->SlurmdAddress(node);
}

std::string SlurmProber::SlurmdAddress(const std::string& node) {
  auto a = Address(node);
  if (!a.ok()) return "?";
  std::string s = *a;
  const size_t sp = s.find(' ');
  return sp == std::string::npos ? s : s.substr(0, sp) + ":" + s.substr(sp + 1);
}

std::string SlurmProber::ProbeTcp(const std::string& node) {
  auto a = Address(node);
  if (!a.ok()) return "unknown";
  const size_t sp = a->find(' ');
  if (sp == std::string::npos) return "unknown";
  return ConnectProbe(a->substr(0, sp), std::atoi(a->c_str() + sp + 1), timeout_s_);
}

bool SlurmProber::ProbeTask(const std::string& node) {
  // Bounded with a KILL after 1 s: srun answers SIGTERM by cancelling the step and waiting
  // for its tasks, which on a hung node never comes.
  RunOptions o;
  o.timeout_s = timeout_s_ + 3;
  o.kill_after_s = 1;
  RunResult r = RunCommand({"srun", "--overlap", "--mpi=none", "--nodelist=" + node, "--nodes=1",
                            "--ntasks=1", "--quiet", "--job-name=ftrain-probe", "true"},
                           o);
  return r.ok();
}

bool SlurmProber::OthersAnswer(const std::vector<std::string>& nodes, const std::string& except) {
  for (const auto& n : nodes) {
    if (n != except && ProbeTcp(n) == "open") return true;
  }
  std::lock_guard<std::mutex> lock(slurm_mu_);
  return slurm_->Ping();
}

}  // namespace ftrain::orch
