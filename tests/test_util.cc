// Test helpers: temp directories, substring checks, processes, ports.
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ftrain::testing {

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  const std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  if (keep_) {
    std::fprintf(stderr, "kept %s\n", path_.c_str());
    return;
  }
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) {
    return ::remove(p) == 0 || errno == ENOENT ? 0 : -1;
  };
  if (::nftw(path_.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    // A leftover temp dir is not a test failure; say so for whoever looks.
    std::fprintf(stderr, "warning: could not remove %s: %s\n", path_.c_str(), std::strerror(errno));
  }
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

CommandResult RunCommand(const std::string& command, int timeout_s) {
  CommandResult r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  auto deadline = start + std::chrono::seconds(timeout_s);
  char buf[4096];
  for (;;) {
    int left_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline - std::chrono::steady_clock::now())
                                       .count());
    if (left_ms <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int n = poll(&p, 1, std::min(left_ms, 200));
    if (n > 0) {
      ssize_t got = read(fds[0], buf, sizeof(buf));
      if (got <= 0) break;
      r.output.append(buf, static_cast<size_t>(got));
    }
  }
  // Drain whatever is left after a kill or EOF.
  for (;;) {
    ssize_t got = read(fds[0], buf, sizeof(buf));
    if (got <= 0) break;
    r.output.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  // Reap anything the command left behind in its group (launched ranks after a timeout).
  kill(-pid, SIGKILL);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exit_code = 128 + WTERMSIG(status);
  return r;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<struct sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

int SignalAndReap(int pid, int sig) {
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

std::string BinDir() { return FTRAIN_BIN_DIR; }
std::string Ftrain() { return BinDir() + "/ftrain"; }

CommandResult PackLicenses(const std::string& out, const std::string& extra) {
  return RunCommand(Ftrain() + " pack --train-tokenizer --vocab-size 512 --seq-len 32 " + extra +
                        " --progress none --out " + out + " /usr/share/common-licenses",
                    300);
}

std::string CachedDir(const std::string& name, const std::string& inputs,
                      const std::function<bool(const std::string& dir)>& make) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : inputs) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  const char* base = std::getenv("TMPDIR");
  const std::string root = std::string(base && *base ? base : "/tmp") + "/ftrain-test-cache";
  const std::string dir = root + "/" + name + "-" + hex;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return dir;
  (void)::mkdir(root.c_str(), 0755);  // EEXIST is fine; any other error fails at mkdtemp
  std::string tmpl = dir + ".tmp.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  if (!make(tmpl)) {
    RunCommand("rm -rf '" + tmpl + "'", 60);
    return "";
  }
  if (::rename(tmpl.c_str(), dir.c_str()) != 0) {
    RunCommand("rm -rf '" + tmpl + "'", 60);  // another process made it first: use theirs
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  }
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<int, std::string> Losses(const std::string& run_dir) {
  std::map<int, std::string> out;
  std::istringstream in(ReadFile(run_dir + "/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    auto s = line.find("\"step\":"), l = line.find("\"loss\":");
    if (s == std::string::npos || l == std::string::npos) continue;
    out[std::atoi(line.c_str() + s + 7)] = line.substr(l + 7, line.find(',', l) - l - 7);
  }
  return out;
}

std::string StepDir(const std::string& run_dir, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08d", step);
  return run_dir + "/checkpoints/" + name;
}

std::vector<int> RankPids(const std::string& tag, int rank) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  while (struct dirent* e = d ? readdir(d) : nullptr) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string env = ReadFile("/proc/" + std::to_string(pid) + "/environ");
    for (auto& c : env) {
      if (c == '\0') c = '\n';
    }
    if (env.find("\nFTRAIN_TEST_TAG=" + tag + "\n") != std::string::npos &&
        ("\n" + env).find("\nRANK=" + std::to_string(rank) + "\n") != std::string::npos) {
      out.push_back(pid);
    }
  }
  if (d) closedir(d);
  return out;
}

}  // namespace ftrain::testing
