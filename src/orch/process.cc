// orch/process.cc - fork/exec with pipes and deadlines (process.h). The child gets an empty
// signal mask and default dispositions (the controller blocks its signals for signalfd), and
// its own process group only when asked (RunCommand always: so that a timeout kills the
// command's children too, as `timeout` does).
#include "orch/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/clock.h"

extern char** environ;

namespace ftrain::orch {
namespace {

int CodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> EnvOf(const std::optional<std::vector<std::string>>& env,
                               const std::vector<std::string>& add) {
  std::vector<std::string> e = env ? *env : CurrentEnvironment();
  for (const auto& kv : add) {
    const std::string name = kv.substr(0, kv.find('='));
    for (auto it = e.begin(); it != e.end();) {
      it = it->compare(0, name.size() + 1, name + "=") == 0 ? e.erase(it) : it + 1;
    }
    e.push_back(kv);
  }
  return e;
}

// In the child, after fork: clean signals, cwd, stdio, then exec. Never returns.
[[noreturn]] void ExecChild(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& cwd, int out_fd,
                            int err_fd, bool new_group) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) {
    signal(sig, SIG_DFL);
  }
  if (new_group) setpgid(0, 0);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  if (out_fd >= 0) dup2(out_fd, 1);
  if (err_fd >= 0) dup2(err_fd, 2);
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
    dprintf(2, "cannot enter '%s': %s\n", cwd.c_str(), strerror(errno));
    _exit(127);
  }
  std::vector<char*> a = CStrings(argv), e = CStrings(env);
  execvpe(a[0], a.data(), e.data());
  dprintf(2, "cannot run '%s': %s\n", argv[0].c_str(), strerror(errno));
  _exit(127);
}

}  // namespace

std::string RunResult::Describe(double timeout_s) const {
  if (!started) return "could not run: " + out;
  if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "timed out after %g s", timeout_s);
    return buf;
  }
  std::string first = err.empty() ? out : err;
  first = first.substr(0, first.find('\n'));
  return "exit " + std::to_string(exit_code) + (first.empty() ? "" : ": " + first);
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

RunResult RunCommand(const std::vector<std::string>& argv, const RunOptions& opt) {
  RunResult r;
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (opt.capture && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    r.started = false;
    r.out = std::string("pipe: ") + strerror(errno);
    return r;
  }
  const std::vector<std::string> env = EnvOf(opt.env, opt.add_env);
  const pid_t pid = fork();
  if (pid < 0) {
    r.started = false;
    r.out = std::string("fork: ") + strerror(errno);
    return r;
  }
  if (pid == 0) ExecChild(argv, env, opt.cwd, out_pipe[1], err_pipe[1], true);
  if (opt.capture) {
    close(out_pipe[1]);
    close(err_pipe[1]);
  }
  const double deadline = MonotonicSeconds() + opt.timeout_s;
  double kill_at = -1;
  int status = 0;
  bool reaped = false;
  std::vector<pollfd> fds;
  if (opt.capture) fds = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  char buf[4096];
  while (true) {
    if (!reaped && waitpid(pid, &status, WNOHANG) == pid) reaped = true;
    bool open_fds = false;
    for (const auto& f : fds) open_fds = open_fds || f.fd >= 0;
    if (reaped && !open_fds) break;
    const double now = MonotonicSeconds();
    if (!reaped && !r.timed_out && now >= deadline) {
      r.timed_out = true;
      kill(-pid, SIGTERM);
      kill_at = now + opt.kill_after_s;
    }
    if (!reaped && kill_at >= 0 && now >= kill_at) {
      kill(-pid, SIGKILL);
      kill_at = now + 3600;
    }
    // A grandchild may hold the pipes: once the child is gone, read what is there and stop.
    if (reaped && r.timed_out) break;
    if (open_fds) {
      poll(fds.data(), fds.size(), 20);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n > 0) {
          (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          close(fds[i].fd);
          fds[i].fd = -1;
        }
      }
      if (reaped) {
        bool any = false;
        for (const auto& f : fds) any = any || f.fd >= 0;
        if (any && MonotonicSeconds() > deadline + opt.kill_after_s + 1) break;
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (const auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (!reaped) {
    waitpid(pid, &status, 0);
  }
  r.exit_code = CodeOf(status);
  if (r.exit_code == 127 && r.err.rfind("cannot run", 0) == 0) {
    r.started = false;
    r.out = r.err;
  }
  return r;
}

StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& opt) {
  int out_fd = -1;
  if (!opt.stdout_path.empty()) {
    out_fd = open(opt.stdout_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (out_fd < 0) {
      return Status::IOError("cannot open '" + opt.stdout_path + "': " + strerror(errno));
    }
  }
  const std::vector<std::string> env = EnvOf(opt.env, opt.add_env);
  const pid_t pid = fork();
  if (pid < 0) {
    if (out_fd >= 0) close(out_fd);
    return Status::IOError(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) ExecChild(argv, env, opt.cwd, out_fd, out_fd, opt.new_process_group);
  if (out_fd >= 0) close(out_fd);
  return pid;
}

std::optional<int> TryReap(pid_t pid) {
  int status = 0;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid) return CodeOf(status);
  if (r < 0 && errno == ECHILD) return -1;  // not ours, or reaped already
  return std::nullopt;
}

std::optional<int> WaitFor(pid_t pid, double timeout_s) {
  const double deadline = MonotonicSeconds() + timeout_s;
  while (true) {
    if (auto code = TryReap(pid)) return code;
    if (MonotonicSeconds() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

}  // namespace ftrain::orch
