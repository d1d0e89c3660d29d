// A GPU rank's deferred snapshot and a communicator that fails before it is handed over, with
// a real ckptd and fakes for what needs a GPU (the names say Fake): the DeviceMemory copies
// with memcpy, and the communicator's health is what an NCCL watchdog abort reports.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/ckptd_client.h"
#include "ckpt/ckptd_protocol.h"
#include "ckpt_fixture.h"
#include "comm/collectives.h"
#include "test_util.h"
#include "train/checkpoint/sink.h"

namespace ftrain::testing {
namespace {

class DoneWork : public comm::Work {
 public:
  Status Wait() override { return Status::Ok(); }
};

// The control group of one rank (votes are identities).
class OneRankComm : public comm::Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "fake"; }
  std::unique_ptr<comm::Work> AllReduce(const at::Tensor&, comm::ReduceOp) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> AllGather(const at::Tensor&, const at::Tensor&) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> ReduceScatter(const at::Tensor&, const at::Tensor&,
                                            comm::ReduceOp) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> Broadcast(const at::Tensor&, int) override {
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<comm::Work> Barrier() override { return std::make_unique<DoneWork>(); }

 private:
  std::string name_ = "control";
};

// The GPU path's DeviceMemory with memcpy ("device" tensors are host memory here).
class FakeGpuMemory : public ckpt::DeviceMemory {
 public:
  void RegisterHost(void*, size_t) override {}
  void UnregisterHost(void*) override {}
  Status StartCopyToHost(const std::vector<ckpt::DeviceCopy>& copies) override {
    for (const auto& c : copies) std::memcpy(c.dst, c.src, c.n);
    return Status::Ok();
  }
  Status WaitForCopies() override { return Status::Ok(); }
  Status OrderBeforeStateChanges() override { return Status::Ok(); }
};

class PendingSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = tmp_ / "run";
    root_ = tmp_ / "ckpts";
    ASSERT_EQ(::mkdir(run_.c_str(), 0755), 0);
    const std::string log = tmp_ / "ckptd.log";
    daemon_ = fork();
    if (daemon_ == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string bin = BinDir() + "/ckptd";
      execl(bin.c_str(), bin.c_str(), "--root", root_.c_str(), "--run-dir", run_.c_str(), "--node",
            "n0", "--threads", "1", static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::string sock = ckpt::proto::SocketPath(run_, "n0");
    for (int i = 0; i < 2400 && !Contains(ReadAll(log), "serving node"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(Contains(ReadAll(log), "serving node")) << ReadAll(log);
  }
  void TearDown() override {
    if (daemon_ > 0) SignalAndReap(daemon_, SIGTERM);
  }

  static std::string ReadAll(const std::string& path) {
    std::string out;
    FILE* f = fopen(path.c_str(), "r");
    if (f == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    fclose(f);
    return out;
  }

  // Hands step `step` over as a GPU rank does (deferred: copied now, submitted at the next
  // save or when the checkpointer goes away), then destroys the checkpointer with the
  // communicator's health `health`.
  void SaveDeferredThenExit(int64_t step, const Status& health) {
    Status current;
    train::CheckpointSinkOptions o;
    o.env = Env::Default();
    o.daemon = train::DaemonMode::kRequire;
    o.run_dir = run_;
    o.node = "n0";
    o.root = root_;
    o.device = &gpu_;
    o.comm_health = [&] { return current; };
    RankState state(step, 0, 1);
    ckpt::ShardContents on_device = state.contents();
    for (auto& t : on_device.tensors) t.on_device = true;
    train::CheckpointSink ckpt(o, &control_);
    ASSERT_TRUE(ckpt.Start(ckpt::SlotBytesFor(state.contents())).ok());
    auto saved = ckpt.Save(FixtureMeta(step, 1), on_device, /*durable=*/false);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    ASSERT_TRUE(saved->deferred);
    current = health;  // a collective of the next step was aborted
  }

  // Waits until the daemon holds nothing in flight.
  void WaitIdle() {
    const std::string sock = ckpt::proto::SocketPath(run_, "n0");
    for (int i = 0; i < 2400; ++i) {
      auto text = ckpt::QueryCkptdStatus(sock);
      ASSERT_TRUE(text.ok()) << text.status().ToString();
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (!j.is_discarded() &&
          j.value("snapshots_in_flight", int64_t{0}) + j.value("queue_depth", int64_t{0}) == 0) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "the daemon never became idle";
  }

  static bool Exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
  }

  TempDir tmp_;
  std::string run_, root_;
  pid_t daemon_ = -1;
  OneRankComm control_;
  FakeGpuMemory gpu_;
};

TEST_F(PendingSnapshotTest, FakeNcclAPendingSnapshotIsNeverHandedOverAfterACommunicatorFailed) {
  // Healthy: the pending snapshot reaches the daemon when the trainer exits, and commits.
  SaveDeferredThenExit(1, Status::Ok());
  WaitIdle();
  for (int i = 0; i < 2400 && !Exists(root_ + "/step-00000001"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(Exists(root_ + "/step-00000001")) << "the healthy control case did not commit";
  // A communicator failed after the snapshot was begun: it must not be handed over.
  SaveDeferredThenExit(2, Status::Unavailable("all_reduce on group world timed out (fake)"));
  WaitIdle();
  EXPECT_FALSE(Exists(root_ + "/step-00000002")) << "an aborted step's snapshot was committed";
  EXPECT_FALSE(Exists(root_ + "/step-00000002.partial"))
      << "an aborted step's snapshot was written";
}

}  // namespace
}  // namespace ftrain::testing
