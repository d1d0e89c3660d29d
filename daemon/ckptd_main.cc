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
#include "peer_auth.h"
#include "peer_wire.h"
#include "server.h"
#include "shm_slots.h"

namespace {

int g_stop_pipe[2] = {-1, -1};

void OnSignal(int) {
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &b, 1);
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  using ftrain::Status;
  const std::string prog = "ckptd";
  ftrain::ckptd::ServerOptions o;
  int threads = 2, nice = 10, zstd = 1, keep = 3, slots = 2;
  int64_t keep_every = 0;
  double memory_gb = 8, max_mb_s = 0;
  int64_t test_uid = -1;
  std::string secret_file;
  const Status log = ftrain::cli::InitLogLevel(&argc, argv);  // --log-level, FTRAIN_LOG_LEVEL
  if (!log.ok()) return ftrain::cli::Fail(prog, log);
  po::options_description opts(
      "ckptd --root CKPT_ROOT --run-dir RUN [--log-level debug|info|warning|error] [options]");
  opts.add_options()("help,h", "show this help")("root", po::value<std::string>(&o.root),
                                                 "checkpoint root (shared by all nodes)")(
      "run-dir", po::value<std::string>(&o.run_dir), "run directory (the socket goes under it)")(
      "node", po::value<std::string>(&o.node),
      "node id (default: $FTRAIN_CKPTD_NODE or host name)")(
      "threads", po::value<int>(&threads), "compression threads per shard (1..64, default 2)")(
      "nice", po::value<int>(&nice), "nice level of the persist thread (0..19, default 10)")(
      "zstd-level", po::value<int>(&zstd), "zstd level (0 = none, 1..19, default 1)")(
      "keep", po::value<int>(&keep), "complete checkpoints kept by rotation (>= 1, default 3)")(
      "keep-every", po::value<int64_t>(&keep_every),
      "rotation also keeps steps divisible by this (milestones; 0 = none, default)")(
      "max-mb-s", po::value<double>(&max_mb_s),
      "pace each shard's persist to this many MB/s of state (0 = unlimited, default)")(
      "memory-gb", po::value<double>(&memory_gb), "shared memory for slots (GiB, default 8)")(
      "slots-per-rank", po::value<int>(&slots), "snapshot slots per rank (2..16, default 2)")(
      "prom-dir", po::value<std::string>(&o.prom_dir),
      "write Prometheus metrics to ckptd-[JOB-]NODE.prom in this directory (node_exporter's "
      "textfile collector directory; default: none)")(
      "peer-listen", po::value<std::string>(&o.peer.listen),
      "buddy replication: accept peers' replicas and fetches on HOST:PORT (port 0: any; the "
      "bound address goes to RUN/ckptd-NODE/peer-addr)")(
      "buddy", po::value<std::string>(&o.peer.buddy),
      "replicate every persisted snapshot to the daemon at HOST:PORT")(
      "buddy-file", po::value<std::string>(&o.peer.buddy_file),
      "replicate to the address in this file (e.g. RUN/ckptd-NEXT/peer-addr), read when it "
      "appears and again before every connection")(
      "job-secret-file", po::value<std::string>(&secret_file),
      "the per-job secret peers must prove (mode 0600, this user's; default: "
      "$FTRAIN_JOB_SECRET)")("job-id", po::value<std::string>(&o.peer.job),
                             "job id bound into the peer handshake (default: $SLURM_JOB_ID)")(
      "replica-memory-gb", po::value<double>(&o.peer.replica_memory_gb),
      "memory for replicas held for other nodes (GiB, default 8)")(
      "peer-timeout-s", po::value<double>(&o.peer.timeout_s),
      "peer connect/handshake/frame timeout (seconds, default 10)")(
      "test-allowed-uid", po::value<int64_t>(&test_uid), "tests only: the uid allowed to connect")(
      "cleanup",
      "do not serve: unlink the shared memory a dead daemon of this run and node left "
      "behind, then exit (refused while a daemon serves it)");
  po::variables_map vm;
  Status s = ftrain::cli::ParseFlags(prog, argc, argv, opts, {}, &vm);
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  if (vm.count("help")) return (std::cout << opts << "\n", 0);
  auto bad = [&](const std::string& m) {
    return ftrain::cli::Fail(prog, Status::InvalidArgument(m));
  };
  if (o.root.empty()) return bad("--root is required (the checkpoint root shared by all nodes)");
  if (o.run_dir.empty()) return bad("--run-dir is required");
  struct stat st {};
  if (::stat(o.run_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return bad("--run-dir '" + o.run_dir + "' does not exist or is not a directory");
  }
  if (o.node.empty()) o.node = ftrain::ckpt::proto::DefaultNodeId();
  if (!ftrain::ckpt::proto::IsSafeNodeId(o.node))
    return bad("--node '" + o.node + "' must be [A-Za-z0-9._-]{1,64}");
  if (threads < 1 || threads > 64)
    return bad("--threads " + std::to_string(threads) + " is outside 1..64");
  if (nice < 0 || nice > 19) return bad("--nice " + std::to_string(nice) + " is outside 0..19");
  if (zstd < 0 || zstd > 19)
    return bad("--zstd-level " + std::to_string(zstd) + " is outside 0..19");
  if (keep < 1) return bad("--keep must be at least 1");
  if (keep_every < 0) return bad("--keep-every must be >= 0");
  if (!(memory_gb > 0) || memory_gb > 4096) return bad("--memory-gb must be in (0, 4096]");
  if (slots < 2 || slots > 16)
    return bad("--slots-per-rank " + std::to_string(slots) + " is outside 2..16");
  if (!(max_mb_s >= 0) || max_mb_s > 1e6) return bad("--max-mb-s must be in [0, 1e6]");
  if (o.peer.enabled()) {
    if (o.peer.job.empty()) {
      const char* j = std::getenv("SLURM_JOB_ID");
      o.peer.job = j != nullptr ? j : "";
    }
    if (o.peer.job.empty())
      return bad(
          "buddy replication needs --job-id (or $SLURM_JOB_ID): it is part of the handshake");
    if (!ftrain::ckptd::peer::IsSafeJobId(o.peer.job))
      return bad("--job-id '" + o.peer.job + "' must be [A-Za-z0-9._-]{1,64}");
    auto secret = !secret_file.empty() ? ftrain::ckptd::peer::ReadSecretFile(secret_file)
                                       : ftrain::ckptd::peer::SecretFromEnv();
    if (!secret.ok()) {
      if (secret.status().code() == Status::Code::kNotFound) {
        return bad(
            "buddy replication needs the job secret: --job-secret-file PATH (mode 0600) "
            "or $FTRAIN_JOB_SECRET");
      }
      return bad(secret.status().message());
    }
    o.peer.secret = std::move(secret).value();
    std::string host;
    int port = 0;
    if (!o.peer.listen.empty()) {
      Status a = ftrain::ckptd::peer::ParseHostPort(o.peer.listen, true, &host, &port);
      if (!a.ok()) return bad("--peer-listen: " + a.message());
    }
    if (!o.peer.buddy.empty()) {
      Status a = ftrain::ckptd::peer::ParseHostPort(o.peer.buddy, false, &host, &port);
      if (!a.ok()) return bad("--buddy: " + a.message());
    }
    if (!o.peer.buddy.empty() && !o.peer.buddy_file.empty())
      return bad("give --buddy or --buddy-file, not both");
    if (!(o.peer.replica_memory_gb > 0) || o.peer.replica_memory_gb > 4096)
      return bad("--replica-memory-gb must be in (0, 4096]");
    if (!(o.peer.timeout_s >= 0.1) || o.peer.timeout_s > 3600)
      return bad("--peer-timeout-s must be in [0.1, 3600]");
  } else if (!secret_file.empty() || vm.count("replica-memory-gb")) {
    return bad("--job-secret-file / --replica-memory-gb need --peer-listen or --buddy");
  }
  if (vm.count("cleanup")) {
    // Only when no daemon holds the node lock: its slots are in use.
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
  o.persist = {threads, nice, zstd, keep, max_mb_s, keep_every};
  o.memory_gb = memory_gb;
  o.slots_per_rank = slots;
  o.allowed_uid = test_uid >= 0 ? static_cast<uid_t>(test_uid) : ::getuid();
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
  s = server.Start();
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  s = server.Serve(g_stop_pipe[0]);
  if (!s.ok()) return ftrain::cli::Fail(prog, s);
  FT_LOG(Info) << "ckptd: stopped";
  return 0;
}
