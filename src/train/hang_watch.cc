// The hang guard's watchdog thread (hang_watch.h).
#include "train/hang_watch.h"

#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "comm/launch_count.h"
#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "records/json_lines.h"

namespace ftrain::train {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kRecentSteps = 20;  // the step times the automatic threshold is the median of

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int StackSignal() { return SIGRTMIN + 3; }
std::atomic<bool> g_stack_written{false};

void OnStackSignal(int) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  constexpr char kHead[] = "hang: stack of the main thread (addresses; `addr2line -e BINARY`):\n";
  ssize_t ignored = write(STDERR_FILENO, kHead, sizeof(kHead) - 1);
  (void)ignored;  // stderr is where the stack goes; nothing to do if it is closed
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  g_stack_written.store(true);
}

// Writes `text` to `path` through a temporary and a rename, so that a reader never sees a
// torn file. Not synced: the file says where a live rank is; a crash makes it moot.
bool WriteReplace(const std::string& path, const std::string& text, std::string* why) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    *why = "open " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    *why = "write " + tmp + ": " + (n < 0 ? std::strerror(write_errno) : "short write");
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "rename " + tmp + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

void InstallStackDumpHandler() {
  void* warm[2];
  backtrace(warm, 2);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction sa = {};
  sa.sa_handler = OnStackSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(StackSignal(), &sa, nullptr);
}

void DumpStackOf(std::thread::native_handle_type main) {
  g_stack_written.store(false);
  if (pthread_kill(main, StackSignal()) != 0) return;  // the thread is gone: no stack to show
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (!g_stack_written.load() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

HangWatch::HangWatch(Options o) : o_(std::move(o)), main_(pthread_self()) {
  InstallStackDumpHandler();
  // The directory may be made by every rank at once; one that exists is fine.
  Status s = CreateDirs(Env::Default(), RunLayout(o_.run_dir).progress_dir());
  if (!s.ok()) FT_LOG(Warning) << "hang guard: " << s.message() << " (no progress is published)";
  Publish(Snapshot(Sample{}, 0, o_.settings.startup_s));
  thread_ = std::thread([this] { Loop(); });
}

HangWatch::~HangWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The last word: where this rank ended (every rank of a clean run shows the same count).
  const Sample last{step_.load(), phase_.load(), comm::CollectivesLaunched().load()};
  Publish(Snapshot(last, 0, o_.settings.startup_s));
}

RankProgress HangWatch::Snapshot(const Sample& s, double stuck_s, double threshold_s) const {
  RankProgress p;
  p.rank = o_.rank;
  p.node = o_.node;
  p.host = o_.host;
  p.generation = o_.generation;
  p.step = s.step;
  p.phase = HangPhaseName(static_cast<HangPhase>(s.phase));
  p.launched = s.launched;
  p.stuck_s = stuck_s;
  p.threshold_s = threshold_s;
  p.time = UnixNow();
  p.pid = static_cast<int64_t>(getpid());
  return p;
}

void HangWatch::Publish(const RankProgress& p) {
  std::string why;
  if (WriteReplace(RunLayout(o_.run_dir).progress(o_.rank), ProgressJson(p), &why)) return;
  if (!write_warned_) {  // once: the guard is blind to this rank, the run goes on
    write_warned_ = true;
    FT_LOG(Warning) << "hang guard: cannot publish this rank's progress: " << why;
  }
}

std::vector<RankProgress> HangWatch::ReadAll() const {
  std::vector<RankProgress> out;
  const RunLayout layout(o_.run_dir);
  for (int r = 0; r < o_.world_size; ++r) {
    std::string text;
    RankProgress p;
    // A file that is missing or torn leaves that rank out: no verdict this time.
    if (!Env::Default()->ReadFile(layout.progress(r), &text).ok()) continue;
    if (!ParseProgress(text, &p) || p.generation != o_.generation || p.rank != r) continue;
    out.push_back(p);
  }
  return out;
}

void HangWatch::Loop() {
  Sample last;
  bool first = true;
  Clock::time_point since = Clock::now(), written = since;
  std::vector<int> previous;  // the ranks the previous look named: a verdict must repeat
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, o_.poll, [this] { return stop_; });
      if (stop_) return;
    }
    const Sample s{step_.load(std::memory_order_relaxed), phase_.load(std::memory_order_relaxed),
                   comm::CollectivesLaunched().load(std::memory_order_relaxed)};
    const Clock::time_point now = Clock::now();
    if (first || !(s == last)) {
      first = false;
      last = s;
      since = now;
    }
    if (const double t = step_time_.exchange(0); t > 0) {
      recent_.push_back(t);
      if (recent_.size() > kRecentSteps) recent_.erase(recent_.begin());
    }
    const double stuck = std::chrono::duration<double>(now - since).count();
    const RankProgress mine =
        Snapshot(s, stuck, HangThreshold(o_.settings, recent_, static_cast<HangPhase>(s.phase)));
    if (now - written >= std::chrono::seconds(1)) {
      Publish(mine);
      written = now;
    }
    // Judged only once this rank itself has waited a step's threshold (the least any rank
    // gets): until then there is nothing to read.
    if (stuck < HangThreshold(o_.settings, recent_, HangPhase::kCompute)) {
      previous.clear();
      continue;
    }
    const HangVerdict v = JudgeHang(ReadAll(), o_.world_size, o_.rank, UnixNow());
    std::vector<int> ranks;
    for (const RankProgress& h : v.hung) ranks.push_back(h.rank);
    if (ranks.empty() || ranks != previous) {
      previous = ranks;
      continue;
    }
    Act(v, mine);
    return;
  }
}

void HangWatch::Act(const HangVerdict& v, const RankProgress& mine) {
  std::string names;
  for (const RankProgress& h : v.hung) names += (names.empty() ? "" : "; ") + DescribeHung(h);
  if (v.me_hung) {
    FT_LOG(Error) << "hang guard: this rank is the one the others wait for: " << names
                  << " (threshold " << mine.threshold_s << " s); its main thread's stack "
                  << "follows; exiting with " << kExitHang;
    DumpStackOf(main_);
    // The lowest rank that is not hung writes the record; it judged on the same files.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    o_.exit_process(kExitHang);
    return;
  }
  if (o_.rank == v.recorder) {
    const std::string& job = o_.job_id;
    for (const RankProgress& h : v.hung) {
      nlohmann::json rec = {{"time", UnixNow()},      {"step", h.step},
                            {"rank", h.rank},         {"node", h.node},
                            {"host", h.host},         {"phase", h.phase},
                            {"stuck_s", h.stuck_s},   {"threshold_s", h.threshold_s},
                            {"detected_by", o_.rank}, {"generation", o_.generation},
                            {"launched", h.launched}};
      if (!job.empty()) rec["job"] = job;
      Status s = records::AppendJsonLine(RunLayout(o_.run_dir).hangs(), rec.dump());
      if (!s.ok()) FT_LOG(Error) << "hang guard: cannot record the hang: " << s.message();
    }
  } else {
    // The recorder judged on the same files within a look: give it that look before this
    // rank's exit makes srun or the launcher signal the job.
    std::this_thread::sleep_for(o_.poll);
  }
  FT_LOG(Error) << "hang guard: " << names << " while this rank (in " << mine.phase << " of step "
                << mine.step << ") waited for it in a collective; exiting with " << kExitHang
                << " to restart from the newest checkpoint";
  o_.exit_process(kExitHang);
}

}  // namespace ftrain::train
