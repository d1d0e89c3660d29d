// `ftrain health --run-dir RUN [--gpus N]`: can this node run its share of the training? The
// job controller runs it on every node (srun, one task each) after a failed step instead of
// `true`: a node whose slurmd answers but whose run directory is not writable, or whose GPUs
// are gone (the driver not loaded, a GPU fallen off the bus), is not healthy. Torch-free and
// quick: no CUDA context, no NCCL. It does not check the data, the network, or that a GPU
// computes (the pre-flight commcheck does that). Exit 0 healthy, 1 unhealthy (one line per
// problem on stderr), 2 usage.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace ftrain::cli {
namespace {

constexpr char kHelp[] =
    "usage: ftrain health --run-dir RUN [--gpus N]\n"
    "  Checks that this node can run its ranks: RUN is writable (a temporary file created\n"
    "  exclusively, fsynced and removed) and, with --gpus N > 0, that at least N GPUs are\n"
    "  visible (/dev/nvidia0, /dev/nvidia1, ...). The job controller runs it on each node\n"
    "  after a failed training step.\n"
    "exit codes: 0 healthy, 1 a check failed (each on stderr), 2 usage\n";

std::string Errno(int e) { return std::strerror(e); }

// Create RUN/.health-<host>-<pid> exclusively (no link followed), write, fsync, remove.
std::string CheckWritable(const std::string& run_dir) {
  char host[256] = {};
  // Without a host name the file is still unique by pid on this node's view of RUN.
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string path =
      run_dir + "/.health-" + std::string(host) + "-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return "run directory " + run_dir + " is not writable: create " + path + ": " + Errno(errno);
  const char byte = 'x';
  std::string err;
  if (::write(fd, &byte, 1) != 1) {
    err = "write " + path + ": " + Errno(errno);
  } else if (::fsync(fd) != 0) {
    err = "fsync " + path + ": " + Errno(errno);
  }
  if (::close(fd) != 0 && err.empty()) err = "close " + path + ": " + Errno(errno);
  if (::unlink(path.c_str()) != 0 && err.empty()) err = "remove " + path + ": " + Errno(errno);
  return err.empty() ? "" : "run directory " + run_dir + " is not usable: " + err;
}

// The GPU device files the driver made: nvidia0, nvidia1, ... (not nvidiactl, nvidia-uvm).
int CountGpus(const std::string& dev_dir, std::string* err) {
  DIR* d = ::opendir(dev_dir.c_str());
  if (d == nullptr) {
    *err = "cannot list " + dev_dir + ": " + Errno(errno);
    return 0;
  }
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++n;
    }
  }
  ::closedir(d);
  return n;
}

}  // namespace

int RunHealth(int argc, char** argv) {
  const std::string program = "ftrain health";
  std::string run_dir, dev_dir = "/dev";
  int gpus = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kHelp;
      return kExitOk;
    }
    // --dev-dir is for tests: a stand-in /dev.
    const bool takes_value = a == "--run-dir" || a == "--gpus" || a == "--dev-dir";
    if (!takes_value || i + 1 >= argc) {
      return Fail(program, Status::InvalidArgument("unexpected argument '" + a +
                                                   "' (see 'ftrain health --help')"));
    }
    const std::string v = argv[++i];
    if (a == "--run-dir") {
      run_dir = v;
    } else if (a == "--dev-dir") {
      dev_dir = v;
    } else if (v.empty() || v.size() > 4 ||
               v.find_first_not_of("0123456789") != std::string::npos) {
      return Fail(program, Status::InvalidArgument("--gpus wants a count, not '" + v + "'"));
    } else {
      gpus = std::stoi(v);
    }
  }
  if (run_dir.empty()) {
    return Fail(program, Status::InvalidArgument("--run-dir RUN is required"));
  }
  std::vector<std::string> problems;
  if (std::string w = CheckWritable(run_dir); !w.empty()) problems.push_back(w);
  if (gpus > 0) {
    std::string err;
    const int seen = CountGpus(dev_dir, &err);
    if (!err.empty()) {
      problems.push_back("GPUs: " + err);
    } else if (seen < gpus) {
      problems.push_back("GPUs: " + std::to_string(seen) + " visible (" + dev_dir +
                         "/nvidia[0-9]*), this node's ranks need " + std::to_string(gpus) +
                         " (driver not loaded, or a GPU lost)");
    }
  }
  // "ftrain health: node HOST: problem", Slurm's name of the node when it runs under Slurm:
  // the job controller reads these lines to know which nodes failed (orch/quarantine.h).
  std::string host;
  if (const char* n = std::getenv("SLURMD_NODENAME"); n != nullptr && *n != '\0') host = n;
  char name[256] = {};
  if (host.empty() && ::gethostname(name, sizeof(name) - 1) == 0) host = name;
  for (const auto& p : problems) std::cerr << program << ": node " << host << ": " << p << "\n";
  return problems.empty() ? kExitOk : kExitBad;
}

}  // namespace ftrain::cli
