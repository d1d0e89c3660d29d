// `ckptd`: the per-node checkpoint daemon. Flag parsing, validation (configuration errors
// exit 2 with one clear line), signal handling; the work is in server.cc and persist.cc.
// Does not link LibTorch.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "ckpt/ckptd_protocol.h"
#include "cli/cli_util.h"
#include "core/env.h"
#include "core/log.h"
#include "daemon/peer_auth.h"
#include "daemon/peer_wire.h"
#include "daemon/server.h"
#include "daemon/shm_slots.h"
#include "records/launch_context.h"

namespace {

namespace po = boost::program_options;
using ftrain::Status;

int g_stop_pipe[2] = {-1, -1};

void OnSignal(int) {
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &b, 1);
}

// Every flag, before it is checked.
struct Flags {
  ftrain::ckptd::ServerOptions o;
  int threads = 2, nice = 10, zstd = 1, keep = 3, slots = 2;
  int64_t keep_every = 0;
  double memory_gb = 8, max_mb_s = 0;
  int64_t test_uid = -1;
  std::string secret_file;
  ftrain::records::LaunchContext launch;  // read once, here
};

po::options_description DescribeFlags(Flags* f) {
  ftrain::ckptd::ServerOptions& o = f->o;
  po::options_description opts(
      "ckptd --root CKPT_ROOT --run-dir RUN [--log-level debug|info|warning|error] [options]");
  auto add = opts.add_options();
  add("help,h", "show this help");
  add("root", po::value<std::string>(&o.root), "checkpoint root (shared by all nodes)");
  add("run-dir", po::value<std::string>(&o.run_dir), "run directory (the socket goes under it)");
  add("node", po::value<std::string>(&o.node),
      "node id (default: $FTRAIN_CKPTD_NODE or host name)");
  add("threads", po::value<int>(&f->threads), "compression threads per shard (1..64, default 2)");
  add("nice", po::value<int>(&f->nice), "nice level of the persist thread (0..19, default 10)");
  add("zstd-level", po::value<int>(&f->zstd), "zstd level (0 = none, 1..19, default 1)");
  add("keep", po::value<int>(&f->keep), "complete checkpoints kept by rotation (>= 1, default 3)");
  add("keep-every", po::value<int64_t>(&f->keep_every),
      "rotation also keeps steps divisible by this (milestones; 0 = none, default)");
  add("max-mb-s", po::value<double>(&f->max_mb_s),
      "pace each shard's persist to this many MB/s of state (0 = unlimited, default)");
  add("memory-gb", po::value<double>(&f->memory_gb), "shared memory for slots (GiB, default 8)");
  add("slots-per-rank", po::value<int>(&f->slots), "snapshot slots per rank (2..16, default 2)");
  add("prom-dir", po::value<std::string>(&o.prom_dir),
      "write Prometheus metrics to ckptd-[JOB-]NODE.prom in this directory (node_exporter's "
      "textfile collector directory; default: none)");
  add("peer-listen", po::value<std::string>(&o.peer.listen),
      "buddy replication: accept peers' replicas and fetches on HOST:PORT (port 0: any; the "
      "published address goes to RUN/ckptd-NODE/peer-addr)");
  add("peer-advertise", po::value<std::string>(&o.peer.advertise),
      "the address other daemons dial: an interface of this node (its IP address) or a host "
      "name or address (default: the bound address; the host name for a wildcard)");
  add("buddy", po::value<std::string>(&o.peer.buddy),
      "replicate every persisted snapshot to the daemon at HOST:PORT");
  add("buddy-file", po::value<std::string>(&o.peer.buddy_file),
      "replicate to the address in this file (e.g. RUN/ckptd-NEXT/peer-addr), read when it "
      "appears and again before every connection");
  add("job-secret-file", po::value<std::string>(&f->secret_file),
      "the per-job secret peers must prove (mode 0600, this user's; default: "
      "$FTRAIN_JOB_SECRET)");
  add("job-id", po::value<std::string>(&o.peer.job),
      "job id bound into the peer handshake (default: $SLURM_JOB_ID)");
  add("replica-memory-gb", po::value<double>(&o.peer.replica_memory_gb),
      "memory for replicas held for other nodes (GiB, default 8)");
  add("peer-timeout-s", po::value<double>(&o.peer.timeout_s),
      "peer connect/handshake/frame timeout (seconds, default 10)");
  add("replication-mbps", po::value<double>(&o.peer.replication_mbps),
      "cap replication to the buddy at this many MB/s (token bucket; 0 = unlimited, default)");
  add("test-allowed-uid", po::value<int64_t>(&f->test_uid),
      "tests only: the uid allowed to connect");
  add("cleanup",
      "do not serve: unlink the shared memory a dead daemon of this run and node left "
      "behind, then exit (refused while a daemon serves it)");
  return opts;
}

Status Bad(const std::string& m) { return Status::InvalidArgument(m); }

// The daemon's own settings (not replication's).
Status CheckServing(Flags* f) {
  ftrain::ckptd::ServerOptions& o = f->o;
  if (o.root.empty()) return Bad("--root is required (the checkpoint root shared by all nodes)");
  if (o.run_dir.empty()) return Bad("--run-dir is required");
  struct stat st {};
  if (::stat(o.run_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Bad("--run-dir '" + o.run_dir + "' does not exist or is not a directory");
  }
  if (o.node.empty()) o.node = f->launch.CkptdNodeId();
  if (!ftrain::ckpt::proto::IsSafeNodeId(o.node))
    return Bad("--node '" + o.node + "' must be [A-Za-z0-9._-]{1,64}");
  if (f->threads < 1 || f->threads > 64)
    return Bad("--threads " + std::to_string(f->threads) + " is outside 1..64");
  if (f->nice < 0 || f->nice > 19)
    return Bad("--nice " + std::to_string(f->nice) + " is outside 0..19");
  if (f->zstd < 0 || f->zstd > 19)
    return Bad("--zstd-level " + std::to_string(f->zstd) + " is outside 0..19");
  if (f->keep < 1) return Bad("--keep must be at least 1");
  if (f->keep_every < 0) return Bad("--keep-every must be >= 0");
  if (!(f->memory_gb > 0) || f->memory_gb > 4096) return Bad("--memory-gb must be in (0, 4096]");
  if (f->slots < 2 || f->slots > 16)
    return Bad("--slots-per-rank " + std::to_string(f->slots) + " is outside 2..16");
  if (!(f->max_mb_s >= 0) || f->max_mb_s > 1e6) return Bad("--max-mb-s must be in [0, 1e6]");
  return Status::Ok();
}

// Replication's settings: the job id, the secret, the addresses and the budgets.
Status CheckPeers(Flags* f, const po::variables_map& vm) {
  ftrain::ckptd::PeerOptions& p = f->o.peer;
  if (!p.enabled()) {
    if (!f->secret_file.empty() || vm.count("replica-memory-gb") || vm.count("peer-advertise"))
      return Bad(
          "--job-secret-file / --replica-memory-gb / --peer-advertise need --peer-listen "
          "or --buddy");
    return Status::Ok();
  }
  if (p.job.empty()) {
    const char* j = std::getenv("SLURM_JOB_ID");
    p.job = j != nullptr ? j : "";
  }
  if (p.job.empty())
    return Bad("buddy replication needs --job-id (or $SLURM_JOB_ID): it is part of the handshake");
  if (!ftrain::ckptd::peer::IsSafeJobId(p.job))
    return Bad("--job-id '" + p.job + "' must be [A-Za-z0-9._-]{1,64}");
  auto secret = !f->secret_file.empty()
                    ? ftrain::ckptd::peer::ReadSecretFile(f->secret_file)
                    : ftrain::ckptd::peer::SecretFromEnvValue(std::getenv("FTRAIN_JOB_SECRET"));
  if (!secret.ok()) {
    if (secret.status().code() == Status::Code::kNotFound) {
      return Bad(
          "buddy replication needs the job secret: --job-secret-file PATH (mode 0600) "
          "or $FTRAIN_JOB_SECRET");
    }
    return Bad(secret.status().message());
  }
  p.secret = std::move(secret).value();
  std::string host;
  int port = 0;
  if (!p.listen.empty()) {
    Status a = ftrain::ckptd::peer::ParseHostPort(p.listen, true, &host, &port);
    if (!a.ok()) return Bad("--peer-listen: " + a.message());
  }
  if (!p.buddy.empty()) {
    Status a = ftrain::ckptd::peer::ParseHostPort(p.buddy, false, &host, &port);
    if (!a.ok()) return Bad("--buddy: " + a.message());
  }
  if (!p.buddy.empty() && !p.buddy_file.empty())
    return Bad("give --buddy or --buddy-file, not both");
  if (!p.advertise.empty() && p.listen.empty()) return Bad("--peer-advertise needs --peer-listen");
  if (!(p.replica_memory_gb > 0) || p.replica_memory_gb > 4096)
    return Bad("--replica-memory-gb must be in (0, 4096]");
  if (!(p.timeout_s >= 0.1) || p.timeout_s > 3600)
    return Bad("--peer-timeout-s must be in [0.1, 3600]");
  if (!(p.replication_mbps >= 0) || p.replication_mbps > 1e6)
    return Bad("--replication-mbps must be in [0, 1e6] (0 = unlimited)");
  for (const char* v : {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}) {
    const char* n = std::getenv(v);
    if (n != nullptr && std::atoi(n) > 0) {
      p.job_nodes = std::atoi(n);
      break;
    }
  }
  return Status::Ok();
}

// --cleanup: only when no daemon holds the node lock (its slots are in use).
int Cleanup(const std::string& prog, const ftrain::ckptd::ServerOptions& o) {
  const std::string lock =
      ftrain::JoinPath(ftrain::ckpt::proto::SocketDir(o.run_dir, o.node), "lock");
  int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return ftrain::cli::Fail(
        prog, Status::FailedPrecondition("a ckptd still serves node '" + o.node + "' of '" +
                                         o.run_dir + "'; stop it first (SIGTERM)"));
  }
  const int n =
      ftrain::ckptd::UnlinkStaleSegments(ftrain::ckpt::proto::ShmPrefix(o.run_dir, o.node));
  ::unlink(ftrain::ckpt::proto::SocketPath(o.run_dir, o.node).c_str());  // ignored: may be gone
  if (fd >= 0) ::close(fd);
  std::cout << "ckptd: cleanup of node '" << o.node << "': " << n
            << " shared-memory segment(s) unlinked\n";
  return 0;
}

// Serves until SIGTERM/SIGINT, then finishes what it holds.
int Serve(const std::string& prog, const ftrain::ckptd::ServerOptions& o) {
  ftrain::SetLogPrefix("ckptd " + o.node);
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0)
    return ftrain::cli::Fail(prog, Status::IOError("pipe2"));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  ftrain::ckptd::Server server(o);
  Status s = server.Start();
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  s = server.Serve(g_stop_pipe[0]);
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  FT_LOG(Info) << "ckptd: stopped";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string prog = "ckptd";
  const Status log = ftrain::cli::InitLogLevel(&argc, argv);  // --log-level, FTRAIN_LOG_LEVEL
  if (!log.ok()) return ftrain::cli::Fail(prog, log);
  Flags f;
  f.launch = ftrain::records::LaunchContext::FromEnvironment();
  f.o.job_id = f.launch.job_id;
  const po::options_description opts = DescribeFlags(&f);
  po::variables_map vm;
  Status s = ftrain::cli::ParseFlags(prog, argc, argv, opts, {}, &vm);
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  if (vm.count("help")) return (std::cout << opts << "\n", 0);
  s = CheckServing(&f);
  if (s.ok()) s = CheckPeers(&f, vm);
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  if (vm.count("cleanup")) return Cleanup(prog, f.o);
  ftrain::ckptd::ServerOptions& o = f.o;
  o.env = ftrain::Env::Default();  // the daemon's files and clock, passed to every part
  o.persist = {f.threads, f.nice, f.zstd, f.keep, f.max_mb_s, f.keep_every};
  o.memory_gb = f.memory_gb;
  o.slots_per_rank = f.slots;
  o.allowed_uid = f.test_uid >= 0 ? static_cast<uid_t>(f.test_uid) : ::getuid();
  return Serve(prog, o);
}
