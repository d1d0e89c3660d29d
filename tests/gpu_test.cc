// Tests that need a GPU (label `gpu`): each skips with a one-line reason where no CUDA device
// is usable (CI has none; scripts/gpu-check.sh is the full prepared check). NCCL collectives
// on one GPU against values computed on the host, after a kernel queued on the current
// stream; a snapshot copied device -> host into registered memory and through the bounce
// buffer; a cuda run stopped by SIGUSR1 and resumed with the same config, bit-exactly.
// GpuDryRun (label multiproc) runs the stop-and-resume test's body on CPU, so the test
// itself is shown passable (and failable) without a GPU.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lean_ops_check.h"
#include "test_util.h"
#include "train/device/device_memory.h"

#ifdef FTRAIN_WITH_NCCL
#include <ATen/cuda/Sleep.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "comm/nccl_comm.h"
#endif

namespace ftrain::testing {
namespace {

#define FT_SKIP_WITHOUT_GPU()                                                              \
  if (!torch::cuda::is_available()) {                                                      \
    GTEST_SKIP() << "no usable CUDA device here (CI has no GPU; run scripts/gpu-check.sh " \
                    "on a GPU machine)";                                                   \
  }

#ifdef FTRAIN_WITH_NCCL
// Keeps the current stream busy for a while (~0.1-0.5 s), so that work not ordered after it
// runs first: a copy or collective that forgets to wait for the current stream reads the
// values from before the kernel queued next.
void BusyCurrentStream() { at::cuda::sleep(int64_t{1} << 29); }
#endif

// The first run is stopped by SIGUSR1 after `signal_after` steps (checkpoint and exit 75),
// the second resumes it with exactly the same command (train.steps is in the config hash, and
// changes the LR schedule): final checkpoints and every step's loss equal the reference's.
void StopAndResumeIsBitIdentical(const std::string& device_args) {
  const TempDir dir("ftrain-gpu-test");
  const std::string& root = dir.path();
  const std::string data = root + "/data";
  auto packed = RunCommand(Ftrain() +
                               " pack --train-tokenizer --vocab-size 512 --seq-len 32 "
                               "--progress none --out " +
                               data + " /usr/share/common-licenses",
                           300);
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  auto cmd = [&](const std::string& run) {
    return Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
           "/configs/tiny.cfg --data.path=" + data + " --run.dir=" + run + " " + device_args +
           " --ckpt.every_steps=5 --ckpt.every_minutes=0 --ckpt.daemon=off --train.steps=30";
  };
  auto ref = RunCommand(cmd(root + "/ref"), 600);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  const std::string split = root + "/split", log1 = root + "/split-1.log";
  constexpr int kSignalAfter = 12;
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd(split) + " >" + log1 + " 2>&1").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  bool sent = false;
  for (int i = 0; i < 120000 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
    if (!sent && static_cast<int>(Losses(split).size()) >= kSignalAfter) {
      kill(pid, SIGUSR1);
      sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(sent) << "the first run ended before step " << kSignalAfter << ": " << ReadFile(log1);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 75)
      << "the stopped run must exit 75 (requeue me), status " << status << ": " << ReadFile(log1);
  // The stop checkpoint: at or after the step the signal came at, before the last step.
  std::smatch m;
  const std::string out1 = ReadFile(log1);
  ASSERT_TRUE(std::regex_search(out1, m, std::regex("checkpointed step ([0-9]+)"))) << out1;
  const int stopped = std::stoi(m[1]);
  EXPECT_GE(stopped, kSignalAfter);
  EXPECT_LT(stopped, 30) << "the signal must stop the run before its end";
  EXPECT_EQ(static_cast<int>(Losses(split).size()), stopped);

  auto second = RunCommand(cmd(split), 600);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(Contains(second.output, "resume: restored step " + std::to_string(stopped) + " "))
      << second.output;
  ExpectSameBits(StepDir(root + "/ref", 30), StepDir(split, 30), root + "/ref", split, 30);
}

TEST(Gpu, NcclCollectivesMatchHostValuesAfterQueuedKernel) {
  FT_SKIP_WITHOUT_GPU();
#ifndef FTRAIN_WITH_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto made = comm::CreateNcclComm(store, "gpu_test", 0, 1, 0, std::chrono::seconds(120));
  ASSERT_TRUE(made.ok()) << made.status().message();
  comm::Comm& c = **made;
  // An odd count (an element/byte mix-up shows) and a guard after every output.
  constexpr int64_t n = 1000003, guard = 4096;
  std::vector<int32_t> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>((i * 7919) % 100003) - 50000;
  auto upload = [&] {
    return torch::from_blob(host.data(), {n}, torch::kInt32).to(torch::kCUDA).to(torch::kFloat32);
  };
  // On one rank every reduction is the identity: the result is 3 * host, computed here.
  auto check = [&](const torch::Tensor& got, const std::string& what) {
    torch::Tensor g = got.cpu().to(torch::kInt64);
    ASSERT_EQ(g.numel(), n + guard) << what;
    const int64_t* p = g.data_ptr<int64_t>();
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (p[i] != 3 * static_cast<int64_t>(host[i]) && bad++ == 0) first = i;
    }
    for (int64_t i = n; i < n + guard; ++i) {
      if (p[i] != -7 && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " wrong elements, first at " << first;
  };
  auto fresh_out = [&] {
    return torch::full({n + guard}, -7.0f, torch::kFloat32).to(torch::kCUDA);
  };
  for (auto op :
       {comm::ReduceOp::kSum, comm::ReduceOp::kAvg, comm::ReduceOp::kMax, comm::ReduceOp::kMin}) {
    torch::Tensor buf = fresh_out();
    buf.narrow(0, 0, n).copy_(upload());
    BusyCurrentStream();
    buf.narrow(0, 0, n).mul_(3);  // queued on the current stream before the collective
    ASSERT_TRUE(c.AllReduce(buf.narrow(0, 0, n), op)->Wait().ok());
    check(buf, "AllReduce op " + std::to_string(static_cast<int>(op)));
  }
  {
    // Out of place: a collective that does not wait for the current stream copies the values
    // from before mul_ (the busy kernel makes that certain).
    torch::Tensor in = upload(), out = fresh_out();
    BusyCurrentStream();
    in.mul_(3);
    ASSERT_TRUE(c.AllGather(out.narrow(0, 0, n), in)->Wait().ok());
    check(out, "AllGather");
  }
  for (auto op : {comm::ReduceOp::kSum, comm::ReduceOp::kAvg}) {
    torch::Tensor in = upload(), out = fresh_out();
    BusyCurrentStream();
    in.mul_(3);
    ASSERT_TRUE(c.ReduceScatter(out.narrow(0, 0, n), in, op)->Wait().ok());
    check(out, "ReduceScatter op " + std::to_string(static_cast<int>(op)));
  }
  {
    torch::Tensor buf = fresh_out();
    buf.narrow(0, 0, n).copy_(upload());
    BusyCurrentStream();
    buf.narrow(0, 0, n).mul_(3);
    ASSERT_TRUE(c.Broadcast(buf.narrow(0, 0, n), 0)->Wait().ok());
    check(buf, "Broadcast");
  }
  // And the CLI's own check, with its sizes.
  auto r = RunCommand(Ftrain() + " commcheck --backend nccl --sizes 4100B,1M", 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
#endif
}

TEST(Gpu, SnapshotCopiesDeviceToHostIntoRegisteredMemoryAndThroughTheBounceBuffer) {
  FT_SKIP_WITHOUT_GPU();
#ifndef FTRAIN_WITH_NCCL
  GTEST_SKIP() << "built without CUDA";
#else
  auto mem = train::MakeCudaDeviceMemory(0);
  ASSERT_NE(mem, nullptr) << "built without CUDA";
  // One registered destination (DMA) and one never registered (bounce buffer of 64 MiB:
  // 64 MiB + 12 KiB crosses a chunk boundary).
  const size_t reg_n = 8u << 20, bounce_n = (64u << 20) + (12u << 10);
  void* reg = ::mmap(nullptr, reg_n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* unreg =
      ::mmap(nullptr, bounce_n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(reg, MAP_FAILED);
  ASSERT_NE(unreg, MAP_FAILED);
  mem->RegisterHost(reg, reg_n);
  torch::Tensor a = torch::arange(static_cast<int64_t>(reg_n / 4), torch::kInt32).to(torch::kCUDA);
  torch::Tensor b =
      torch::arange(static_cast<int64_t>(bounce_n / 4), torch::kInt32).to(torch::kCUDA);
  BusyCurrentStream();  // a copy not ordered after the current stream reads pre-mul values
  a.mul_(3);
  b.mul_(3);
  ASSERT_TRUE(
      mem->StartCopyToHost({{reg, a.data_ptr(), reg_n}, {unreg, b.data_ptr(), bounce_n}}).ok());
  // The state changes right after; the copies must have read it first.
  ASSERT_TRUE(mem->OrderBeforeStateChanges().ok());
  a.add_(1);
  b.add_(1);
  ASSERT_TRUE(mem->WaitForCopies().ok());
  auto expect_times3 = [](const void* p, size_t bytes, const char* what) {
    const auto* v = static_cast<const int32_t*>(p);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes / 4; ++i) {
      if (v[i] != static_cast<int32_t>(3 * i) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " wrong values, first at " << first;
  };
  expect_times3(reg, reg_n, "registered destination");
  expect_times3(unreg, bounce_n, "bounce-buffer destination");
  torch::cuda::synchronize();
  mem->UnregisterHost(reg);
  ::munmap(reg, reg_n);
  ::munmap(unreg, bounce_n);
#endif
}

// The lean RMSNorm and SwiGLU (model/lean_ops.h) against the eager chains on the device, with
// deterministic algorithms on as the trainer runs: bit for bit with bf16 activations.
TEST(Gpu, LeanOpsAreTheEagerChainsBitForBitOnTheDevice) {
  FT_SKIP_WITHOUT_GPU();
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  ExpectLeanOpsMatchEager(torch::Device(torch::kCUDA, 0));
  at::globalContext().setDeterministicAlgorithms(was, /*warn_only=*/false);
}

TEST(Gpu, CudaRunStoppedAndResumedIsBitIdentical) {
  FT_SKIP_WITHOUT_GPU();
  StopAndResumeIsBitIdentical("--train.device=cuda --dist.backend=nccl");
}

// The same body on CPU: shows the GPU test above can pass (same config for both launches)
// and fails on a broken resume, without a GPU.
TEST(GpuDryRun, CpuRunStoppedAndResumedIsBitIdentical) {
  StopAndResumeIsBitIdentical("--train.device=cpu --dist.backend=gloo");
}

}  // namespace
}  // namespace ftrain::testing
