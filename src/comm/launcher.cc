// Local launcher: fork/exec N ranks, host the TCPStore, supervise, propagate failure.
#include "comm/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/log.h"

namespace ftrain::comm {
namespace {

std::atomic<int> g_pending_signal{0};

void OnSignal(int sig) { g_pending_signal.store(sig); }

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "stopped";
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool LooksLikeProgram(const std::string& arg) {
  if (arg.find('/') == std::string::npos) return false;
  struct stat st;
  return stat(arg.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR);
}

Status Validate(const LaunchOptions& options) {
  if (options.nproc < 1) return Status::InvalidArgument("--nproc must be at least 1");
  if (options.nodes < 1 || options.nproc % options.nodes != 0) {
    return Status::InvalidArgument("--nodes " + std::to_string(options.nodes) +
                                   " must divide --nproc " + std::to_string(options.nproc));
  }
  if (options.command.empty()) {
    return Status::InvalidArgument("nothing to launch: give the command after '--'");
  }
  return Status::Ok();
}

// The launcher hosts the store, so no rank has to win a race for the port.
StatusOr<c10::intrusive_ptr<c10d::TCPStore>> StartStore() {
  c10d::TCPStoreOptions store_opts;
  store_opts.port = 0;
  store_opts.isServer = true;
  store_opts.waitWorkers = false;
  try {
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_opts);
  } catch (const std::exception& e) {
    return Status::FailedPrecondition(std::string("cannot start the rendezvous store on "
                                                  "127.0.0.1: ") +
                                      e.what());
  }
}

// In the forked child of rank `r`: die with the launcher, get the rendezvous env, become the
// program. Own process group, so a stop reaches everything the rank started (helpers, shells).
[[noreturn]] void ExecRank(const LaunchOptions& options, const std::vector<std::string>& argv,
                           int r, int port, pid_t launcher_pid) {
  const int per_node = options.nproc / options.nodes;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher_pid) _exit(127);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaction(sig, &dfl, nullptr);
  setenv("RANK", std::to_string(r).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(r % per_node).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(per_node).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(r / per_node).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("FTRAIN_STORE_HOSTED", "1", 1);
  // Each simulated node has its own checkpoint daemon (ckptd --node launch-node<k>).
  if (options.nodes > 1) {
    setenv("FTRAIN_CKPTD_NODE", ("launch-node" + std::to_string(r / per_node)).c_str(), 1);
  }
  // A launched rank is not a Slurm step rank even inside an allocation.
  unsetenv("SLURM_STEP_ID");
  unsetenv("PMIX_RANK");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  execv(cargv[0], cargv.data());
  fprintf(stderr, "ftrain launch: cannot execute %s: %s\n", cargv[0], strerror(errno));
  _exit(127);
}

// Forks every rank; the pids in rank order.
StatusOr<std::vector<pid_t>> StartRanks(const LaunchOptions& options, int port) {
  std::vector<std::string> argv = options.command;
  if (!LooksLikeProgram(argv[0])) argv.insert(argv.begin(), options.self_exe);
  const pid_t launcher_pid = getpid();
  std::vector<pid_t> pids(static_cast<size_t>(options.nproc), -1);
  for (int r = 0; r < options.nproc; ++r) {
    pid_t pid = fork();
    if (pid < 0) return Status::IOError(std::string("fork failed: ") + strerror(errno));
    if (pid == 0) ExecRank(options, argv, r, port, launcher_pid);
    setpgid(pid, pid);  // also here, so there is no window before the child runs setpgid
    pids[static_cast<size_t>(r)] = pid;
  }
  return pids;
}

// Waits for every rank, forwarding signals; the first failure stops the others (SIGTERM,
// SIGKILL after the grace period). Returns the job's exit code.
int Supervise(const LaunchOptions& options, std::vector<pid_t> pids) {
  int alive = options.nproc;
  int result = 0;
  int failed_rank = -1;
  std::chrono::steady_clock::time_point kill_deadline{};
  bool killed = false;
  // Signals go to each rank's whole process group; groups of ranks that already exited
  // are signalled too, so nothing a dead rank left behind survives the job.
  const std::vector<pid_t> groups = pids;
  auto signal_all = [&](int sig) {
    for (pid_t g : groups) kill(-g, sig);  // ESRCH for an empty group is fine
  };
  while (alive > 0) {
    int sig = g_pending_signal.exchange(0);
    if (sig != 0) {
      FT_LOG(Info) << "launch: forwarding signal " << sig << " (" << strsignal(sig) << ") to "
                   << alive << " ranks";
      signal_all(sig);
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < options.nproc; ++r) {
        if (pids[static_cast<size_t>(r)] != pid) continue;
        pids[static_cast<size_t>(r)] = -1;
        --alive;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
          failed_rank = r;
          result = ExitCodeOf(status);
          FT_LOG(Error) << "launch: rank " << r << " (pid " << pid << ") " << DescribeExit(status)
                        << "; stopping the other " << alive << " rank(s)";
          signal_all(SIGTERM);
          kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.grace_s);
        } else if (!ok) {
          FT_LOG(Info) << "launch: rank " << r << " " << DescribeExit(status);
        }
      }
      continue;
    }
    if (failed_rank >= 0 && !killed && std::chrono::steady_clock::now() > kill_deadline) {
      FT_LOG(Warning) << "launch: " << alive << " rank(s) still alive after " << options.grace_s
                      << " s; sending SIGKILL";
      signal_all(SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  signal_all(SIGKILL);  // leftovers of ranks that exited (their groups are otherwise empty)
  if (failed_rank >= 0) {
    FT_LOG(Error) << "launch: job failed: rank " << failed_rank << " exit code " << result;
  }
  return result;
}

}  // namespace

StatusOr<int> RunLocalJob(const LaunchOptions& options) {
  FT_RETURN_IF_ERROR(Validate(options));
  FT_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::TCPStore> store, StartStore());
  const int port = store->getPort();
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
  FT_ASSIGN_OR_RETURN(std::vector<pid_t> pids, StartRanks(options, port));
  FT_LOG(Info) << "launch: started " << options.nproc << " ranks (store 127.0.0.1:" << port << ")";
  return Supervise(options, std::move(pids));
}

}  // namespace ftrain::comm
