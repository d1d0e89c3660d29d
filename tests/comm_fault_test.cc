// A failed communicator on CPU, through fakes (no GPU here; the names say Fake): a Comm whose
// collectives "finish" but whose Health() reports what an NCCL watchdog abort or an
// asynchronous NCCL error would (an NCCL Wait() returns before the collective ran, so that is
// how such a failure shows), and the backend hooks of the CommGuard that NcclComm runs on
// (abort, asynchronous error, grace exit) replaced by fakes that record, fail or hang.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "ckpt_fixture.h"
#include "comm/collectives.h"
#include "comm/comm_guard.h"
#include "core/config.h"
#include "fsdp/engine.h"
#include "model/llama.h"
#include "test_util.h"
#include "train/checkpoint/sink.h"

namespace ftrain::testing {
namespace {

using comm::CommGuard;

class DoneWork : public comm::Work {
 public:
  Status Wait() override { return Status::Ok(); }
};

// A group of one rank: every collective is the identity and "succeeds"; Health() says what
// the test sets (what NcclComm reports after its watchdog aborted a collective).
class FakeNcclComm : public comm::Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "fake-nccl"; }
  std::unique_ptr<comm::Work> AllReduce(const at::Tensor&, comm::ReduceOp) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> AllGather(const at::Tensor& out, const at::Tensor& in) override {
    out.copy_(in);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> ReduceScatter(const at::Tensor& out, const at::Tensor& in,
                                            comm::ReduceOp) override {
    out.copy_(in);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> Broadcast(const at::Tensor&, int) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> Barrier() override { return std::make_unique<DoneWork>(); }
  Status Health() override { return health; }

  Status health;

 private:
  std::string name_ = "world";
};

const Status kAborted = Status::Unavailable(
    "all_reduce on group world (rank 0 of 1) timed out after 600 s (dist.timeout_s): a peer is "
    "dead, hung or unreachable");

LlamaConfig TinyModel() {
  auto config = Config::LoadFile(std::string(FTRAIN_SOURCE_DIR) + "/configs/tiny.cfg");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto cfg = LlamaConfig::FromConfig(*config);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  return *cfg;
}

// The optimizer step reads the gradient norm (the host waits for the device), then finds
// that a collective of the step was aborted: the gradients are partially reduced, and
// nothing of them may reach the master weights or the moments a checkpoint saves.
TEST(FakeNccl, EngineStepAppliesNothingAfterAnAbortedCollective) {
  torch::manual_seed(0);
  LlamaConfig mcfg = TinyModel();
  model::LlamaModel model(mcfg);
  FakeNcclComm group;
  fsdp::FsdpConfig fc;
  fc.init_seed = 7;
  fsdp::FsdpGroups groups;
  groups.shard = &group;
  groups.world_size = 1;
  auto engine = fsdp::FsdpEngine::Create(model, fc, groups);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  fsdp::FsdpEngine& e = **engine;
  const int64_t T = 8;
  torch::Tensor tokens = torch::arange(2 * (T + 1), torch::kLong).remainder(mcfg.vocab_size);
  tokens = tokens.view({2, T + 1});
  fsdp::AdamWConfig adamw;
  // One good step first: the check does not get in the way of a healthy group.
  ASSERT_TRUE(e.ForwardBackward(tokens, 1.0, true).ok());
  ASSERT_TRUE(e.Step(adamw, 1e-3, 1.0).ok());
  std::vector<torch::Tensor> before;
  for (const auto& p : e.StatePieces()) before.push_back(p.data.clone());
  ASSERT_TRUE(e.ForwardBackward(tokens, 1.0, true).ok());
  group.health = kAborted;  // the watchdog aborted this step's gradient all-reduce
  auto step = e.Step(adamw, 1e-3, 1.0);
  ASSERT_FALSE(step.ok()) << "an optimizer step ran on the gradients of an aborted collective";
  EXPECT_NE(step.status().message().find("timed out"), std::string::npos)
      << step.status().message();
  EXPECT_EQ(e.optimizer_step(), 1);
  const auto after = e.StatePieces();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(torch::equal(after[i].data, before[i]))
        << after[i].kind << " " << after[i].name << " changed after the abort";
  }
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A rank whose communicator failed neither begins a snapshot nor lets the save vote pass.
TEST(FakeNccl, SaveBeginsNoSnapshotAfterACommunicatorFailed) {
  TempDir tmp;
  FakeNcclComm control;  // the Gloo control group of the votes: healthy
  Status nccl_health;
  train::CheckpointSinkOptions o;
  o.env = Env::Default();
  o.daemon = train::DaemonMode::kOff;
  o.run_dir = tmp.path();
  o.root = tmp / "checkpoints";
  o.comm_health = [&] { return nccl_health; };
  train::CheckpointSink ckpt(o, &control);
  ASSERT_TRUE(ckpt.Start(1 << 20).ok());
  RankState good(1, 0, 1);
  auto saved = ckpt.Save(FixtureMeta(1, 1), good.contents(), /*durable=*/false);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(Exists(tmp / "checkpoints/step-00000001"));

  nccl_health = kAborted;
  RankState suspect(2, 0, 1);
  auto refused = ckpt.Save(FixtureMeta(2, 1), suspect.contents(), /*durable=*/true);
  ASSERT_FALSE(refused.ok()) << "a checkpoint was saved after a communicator failed";
  EXPECT_NE(refused.status().message().find("refused"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(Exists(tmp / "checkpoints/step-00000002"));
  EXPECT_FALSE(Exists(tmp / "checkpoints/step-00000002.partial")) << "a snapshot was begun";
}

// --- CommGuard: the failure handling NcclComm runs on, with a fake backend. ---

// Records what the backend was asked to do; abort can be made to hang until released.
struct FakeBackend {
  std::mutex mu;
  std::condition_variable cv;
  int aborts = 0;            // guarded by mu
  bool abort_hangs = false;  // guarded by mu
  bool release = false;      // guarded by mu
  bool exited = false;       // guarded by mu
  std::string exit_why;      // guarded by mu
  Status async;              // guarded by mu
  std::atomic<bool> in_launch{false};
  std::atomic<int> abort_during_launch{0};

  CommGuard::Backend Hooks() {
    CommGuard::Backend b;
    b.async_error = [this] {
      std::lock_guard<std::mutex> l(mu);
      return async;
    };
    b.abort = [this] {
      if (in_launch) ++abort_during_launch;
      std::unique_lock<std::mutex> l(mu);
      ++aborts;
      cv.notify_all();
      cv.wait(l, [this] { return !abort_hangs || release; });
    };
    b.exit_process = [this](const std::string& why) {
      std::lock_guard<std::mutex> l(mu);
      exited = true;
      exit_why = why;
      cv.notify_all();
    };
    return b;
  }
  // Waits (bounded only so that a broken guard fails instead of hanging the suite).
  bool WaitFor(const std::function<bool()>& what) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(60), what);
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu);
    release = true;
    cv.notify_all();
  }
};

CommGuard::Timing Fast() { return {std::chrono::milliseconds(1), std::chrono::milliseconds(50)}; }

CommGuard::Op Overdue(CommGuard::Progress progress) {
  return {[progress](std::string* why) {
            *why = "an illegal memory access was encountered";
            return progress;
          },
          CommGuard::Clock::now() - std::chrono::seconds(1), "all_reduce on group g"};
}

// The watchdog finds a collective overdue while the training thread is inside a launch
// (enqueueing onto the handle): the error is recorded at once, so the launch can give up,
// but the handle is aborted (freed) only after the launch let go of it.
TEST(FakeNccl, GuardAbortsOnlyBetweenLaunches) {
  FakeBackend fake;
  const CommGuard::Timing no_grace_exit{std::chrono::milliseconds(1), std::chrono::hours(1)};
  auto guard = CommGuard::Start("g", "1 s", fake.Hooks(), no_grace_exit);
  {
    auto launch = guard->LockLaunch();
    fake.in_launch = true;
    guard->Track(Overdue(CommGuard::Progress::kRunning));
    // Evidence that the watchdog acted while we hold the launch lock: the error is recorded.
    for (int i = 0; i < 60000 && !guard->Failed(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(guard->Failed());
    EXPECT_NE(guard->Error().message().find("timed out"), std::string::npos);
    // Room for a wrong abort to show (a right one never comes while we hold the lock).
    for (int i = 0; i < 200 && fake.abort_during_launch == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    fake.in_launch = false;
  }
  ASSERT_TRUE(fake.WaitFor([&] { return fake.aborts == 1; }));
  EXPECT_EQ(fake.abort_during_launch, 0) << "the communicator was aborted inside a launch";
  EXPECT_FALSE(guard->Stop(std::chrono::seconds(60)));  // aborted: never finalize it
  std::lock_guard<std::mutex> l(fake.mu);
  EXPECT_EQ(fake.aborts, 1);
}

// An abort that hangs (a peer gone, a driver stuck) must not keep the process alive: the
// grace-period exit runs on its own thread. And the communicator's destruction does not wait
// for the stuck watchdog without bound.
TEST(FakeNccl, GuardEndsTheProcessWhenTheAbortHangsAndStopIsBounded) {
  FakeBackend fake;
  fake.abort_hangs = true;
  auto guard = CommGuard::Start("g", "1 s", fake.Hooks(), Fast());
  guard->Track(Overdue(CommGuard::Progress::kFailed));
  ASSERT_TRUE(fake.WaitFor([&] { return fake.aborts == 1; }));  // the watchdog is stuck in it
  auto stopped =
      std::async(std::launch::async, [&] { return guard->Stop(std::chrono::milliseconds(50)); });
  const bool stop_returned =
      stopped.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(stop_returned) << "~NcclComm would wait forever for a watchdog stuck in an abort";
  EXPECT_TRUE(fake.WaitFor([&] { return fake.exited; }))
      << "the grace-period exit waited behind the hanging abort";
  {
    std::lock_guard<std::mutex> l(fake.mu);
    EXPECT_NE(fake.exit_why.find("did not return"), std::string::npos) << fake.exit_why;
  }
  fake.Release();
  if (stop_returned) {
    EXPECT_FALSE(stopped.get());
  }
  guard->Stop(std::chrono::seconds(60));  // the released watchdog is done with `fake`
}

// Health() finds NCCL's asynchronous error between two collectives: it fails the group once.
TEST(FakeNccl, GuardHealthReportsAnAsynchronousErrorAndAbortsOnce) {
  FakeBackend fake;
  CommGuard::Timing slow{std::chrono::hours(1), std::chrono::hours(1)};  // no watchdog round
  auto guard = CommGuard::Start("g", "1 s", fake.Hooks(), slow);
  EXPECT_TRUE(guard->Health().ok());
  {
    std::lock_guard<std::mutex> l(fake.mu);
    fake.async = Status::Unavailable("group g: remote process exited or there was a network error");
  }
  Status h = guard->Health();
  EXPECT_FALSE(h.ok());
  EXPECT_NE(h.message().find("network error"), std::string::npos) << h.message();
  EXPECT_FALSE(guard->Health().ok());
  EXPECT_EQ(guard->Error().message(), h.message());
  guard->FailLocked(Status::Internal("a later failure"));  // not the first: changes nothing
  EXPECT_EQ(guard->Error().message(), h.message());
  EXPECT_FALSE(guard->Stop(std::chrono::seconds(60)));
  std::lock_guard<std::mutex> l(fake.mu);
  EXPECT_EQ(fake.aborts, 1);
}

}  // namespace
}  // namespace ftrain::testing
