// Async-signal-safe stop flag.
#include "train/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace ftrain::train {
namespace {

std::atomic<int> g_stop{0};
std::atomic<int> g_terms{0};

void OnSignal(int sig) {
  if (sig == SIGTERM && g_terms.fetch_add(1) >= 1) {
    static const char kMsg[] = "second SIGTERM: exiting now without a checkpoint\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    _exit(128 + SIGTERM);
  }
  int expected = 0;
  g_stop.compare_exchange_strong(expected, sig);
}

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int StopRequested() { return g_stop.load(); }

}  // namespace ftrain::train
