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

#include "comm/launch_count.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/log.h"
#include "core/run_layout.h"
#include "records/hangs.h"
#include "records/progress.h"

namespace ftrain::train {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kRecentSteps = 20;  // the step times the automatic threshold is the median of
// A node-local entry older than this (its writer's CLOCK_MONOTONIC, same host) is of a rank
// whose watchdog is not running: it cannot lead its node.
constexpr double kFreshS = 5;
// A judge that found a rank behind but under its threshold looks again when the threshold
// could be reached, but at least this often (the rank may change phase meanwhile).
constexpr double kMaxJudgeWaitS = 30;

double Secs(std::chrono::milliseconds ms) { return std::chrono::duration<double>(ms).count(); }

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

namespace {

// The intervals at most a quarter of the smallest threshold (a test's or a tiny model's few
// seconds): a hang is then still named within about 2 x the threshold. The defaults hold for
// thresholds of 12 s and more (production: 60 s and more).
HangWatch::Options Tuned(HangWatch::Options o) {
  const double least = o.settings.timeout_s > 0 ? o.settings.timeout_s : o.settings.floor_s;
  const auto cap = std::max(o.poll, std::chrono::milliseconds(static_cast<int64_t>(least * 250)));
  o.judge_every = std::min(o.judge_every, cap);
  o.publish_every = std::min(o.publish_every, cap);
  return o;
}

}  // namespace

HangWatch::HangWatch(Options o)
    : o_(Tuned(std::move(o))),
      main_(pthread_self()),
      local_(NodeLocalProgress::DirFor(o_.local_root, o_.run_dir, o_.generation, o_.node), o_.rank,
             o_.generation, o_.env) {
  InstallStackDumpHandler();
  // The directory may be made by every rank at once; one that exists is fine.
  Status s = CreateDirs(o_.env, RunLayout(o_.run_dir).progress_dir());
  if (!s.ok()) FT_LOG(Warning) << "hang guard: " << s.message() << " (no progress is published)";
  if (Status l = local_.Open(); !l.ok()) {
    const std::string shared = NodeLocalProgress::DirFor(RunLayout(o_.run_dir).progress_dir(),
                                                         o_.run_dir, o_.generation, o_.node);
    FT_LOG(Warning) << "hang guard: node-local directory: " << l.message() << "; sharing "
                    << "through " << shared << " on the run's file system instead";
    local_ = NodeLocalProgress(shared, o_.rank, o_.generation, o_.env);
    if (Status l2 = local_.Open(); !l2.ok()) FT_LOG(Warning) << "hang guard: " << l2.message();
  }
  ShareLocal(Snapshot(Sample{}, 0, o_.settings.startup_s));
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
  ShareLocal(Snapshot(last, 0, o_.settings.startup_s));
  const std::vector<RankProgress> local = local_.ReadAll();
  if (IsNodeLeader(local)) PublishNode(local);
  local_.Remove();
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
  p.time = UnixSeconds();
  p.pid = static_cast<int64_t>(getpid());
  p.mono = MonotonicSeconds();
  return p;
}

void HangWatch::ShareLocal(const RankProgress& p) {
  Status s = local_.Write(p);
  if (s.ok() || local_warned_) return;
  local_warned_ = true;  // once: the guard is blind to this rank, the run goes on
  FT_LOG(Warning) << "hang guard: cannot share this rank's progress: " << s.message();
}

bool HangWatch::IsNodeLeader(const std::vector<RankProgress>& local) const {
  const double now = MonotonicSeconds();
  for (const RankProgress& p : local) {
    if (p.rank < o_.rank && now - p.mono <= kFreshS) return false;
  }
  return true;
}

void HangWatch::PublishNode(const std::vector<RankProgress>& local) {
  NodeProgress n;
  n.node = o_.node;
  n.host = o_.host;
  n.generation = o_.generation;
  n.time = UnixSeconds();
  n.ranks = local;
  Status s = records::WriteNodeProgress(RunLayout(o_.run_dir).node_progress(o_.node), n);
  if (s.ok() || node_warned_) return;
  node_warned_ = true;  // once: the guard is blind to this node, the run goes on
  FT_LOG(Warning) << "hang guard: cannot publish this node's progress: " << s.message();
}

std::vector<RankProgress> HangWatch::ReadNodes() const {
  std::vector<RankProgress> out;
  const RunLayout layout(o_.run_dir);
  for (int n = 0; n < o_.num_nodes; ++n) {
    NodeProgress np;
    // A file that is missing or torn leaves that node's ranks out: no verdict this time.
    if (!records::ReadNodeProgress(layout.node_progress(n), &np, o_.env)) continue;
    if (np.generation != o_.generation || np.node != n) continue;
    for (RankProgress& p : np.ranks) out.push_back(std::move(p));
  }
  return out;
}

bool HangWatch::JudgeOnce(std::vector<int>* previous, double* wait_s) {
  *wait_s = 0;
  const HangVerdict v =
      JudgeHang(ages_.Aged(ReadNodes(), MonotonicSeconds()), o_.world_size, o_.rank);
  std::vector<int> ranks;
  for (const RankProgress& h : v.hung) ranks.push_back(h.rank);
  if (ranks.empty() || ranks != *previous) {
    *previous = ranks;
    *wait_s = v.wait_s;
    return false;
  }
  if (Status s = local_.WriteVerdict(v); !s.ok()) {
    FT_LOG(Error) << "hang guard: cannot hand the verdict to this node's ranks: " << s.message();
  }
  return true;
}

void HangWatch::Loop() {
  Sample last;
  bool first = true;
  Clock::time_point since = Clock::now(), published = since - o_.publish_every, next_look = since;
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
    ShareLocal(mine);
    HangVerdict v;
    if (local_.ReadVerdict(&v)) {
      Act(v, mine);
      return;
    }
    const std::vector<RankProgress> local = local_.ReadAll();
    if (!IsNodeLeader(local)) continue;
    if (now - published >= o_.publish_every) {
      PublishNode(local);
      published = now;
    }
    // Judged only while a rank of this node has waited past its own threshold: until then
    // there is nothing to read.
    const bool over = std::any_of(local.begin(), local.end(),
                                  [](const RankProgress& p) { return p.stuck_s >= p.threshold_s; });
    if (!over) {
      previous.clear();
      continue;
    }
    if (now < next_look) continue;
    double wait = 0;
    if (JudgeOnce(&previous, &wait)) continue;  // the verdict is read back at the next poll
    const double next = std::max(Secs(o_.judge_every), std::min(wait, kMaxJudgeWaitS));
    next_look =
        now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(next));
  }
}

void HangWatch::WaitUnlessStopped(std::chrono::milliseconds d) const {
  const Clock::time_point end = Clock::now() + d;
  while (Clock::now() < end && !(o_.stop_asked && o_.stop_asked())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void HangWatch::Act(const HangVerdict& v, const RankProgress& mine) {
  // This rank has the verdict: its entry goes now, before the waits below, during which srun
  // or the launcher may kill it; the last rank of the node removes the directory.
  local_.Remove();
  std::string names;
  for (const RankProgress& h : v.hung) names += (names.empty() ? "" : "; ") + DescribeHung(h);
  if (v.me_hung) {
    FT_LOG(Error) << "hang guard: this rank is the one the others wait for: " << names
                  << " (threshold " << mine.threshold_s << " s); its main thread's stack "
                  << "follows; exiting with " << kExitHang;
    DumpStackOf(main_);
    // The lowest rank that is not hung writes the record once its node's judge has looked
    // (at most a judge interval later).
    WaitUnlessStopped(o_.judge_every + std::chrono::seconds(2));
    o_.exit_process(kExitHang);
    return;
  }
  if (o_.rank == v.recorder) {
    const std::string& job = o_.job_id;
    for (const RankProgress& h : v.hung) {
      records::HangRecord rec;
      rec.time = UnixSeconds();
      rec.step = h.step;
      rec.rank = h.rank;
      rec.node = h.node;
      rec.host = h.host;
      rec.phase = h.phase;
      rec.stuck_s = h.stuck_s;
      rec.threshold_s = h.threshold_s;
      rec.detected_by = o_.rank;
      rec.generation = o_.generation;
      rec.launched = h.launched;
      if (!job.empty()) rec.job = job;
      Status s = records::AppendHang(RunLayout(o_.run_dir).hangs(), rec);
      if (!s.ok()) FT_LOG(Error) << "hang guard: cannot record the hang: " << s.message();
    }
  } else {
    // The recorder's node judges on the same files within a judge interval: give it that look
    // before this rank's exit makes srun or the launcher signal the job.
    WaitUnlessStopped(o_.judge_every + o_.poll);
  }
  FT_LOG(Error) << "hang guard: " << names << " while this rank (in " << mine.phase << " of step "
                << mine.step << ") waited for it in a collective; exiting with " << kExitHang
                << " to restart from the newest checkpoint";
  o_.exit_process(kExitHang);
}

}  // namespace ftrain::train
