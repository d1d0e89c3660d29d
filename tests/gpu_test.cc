// Tests that need a GPU: they are in the suite, and each skips with a one-line reason where
// no CUDA device is usable (CI has none; scripts/gpu-check.sh is the full prepared check).
// The NCCL group on one GPU, a snapshot copied device -> host into registered memory, and a
// cuda training run stopped and resumed bit-exactly. Label: multiproc.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <torch/torch.h>

#include <cstring>
#include <string>

#include "test_util.h"
#include "train/device_memory.h"

namespace ftrain::testing {
namespace {

#define FT_SKIP_WITHOUT_GPU()                                                              \
  if (!torch::cuda::is_available()) {                                                      \
    GTEST_SKIP() << "no usable CUDA device here (CI has no GPU; run scripts/gpu-check.sh " \
                    "on a GPU machine)";                                                   \
  }

TEST(Gpu, NcclCollectivesOnOneGpu) {
  FT_SKIP_WITHOUT_GPU();
  auto r = RunCommand(Ftrain() + " commcheck --backend nccl --sizes 4100B,1M", 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Gpu, SnapshotCopiesDeviceToHostIntoRegisteredMemory) {
  FT_SKIP_WITHOUT_GPU();
  auto mem = train::MakeCudaDeviceMemory(0);
  ASSERT_NE(mem, nullptr) << "built without CUDA";
  const size_t n = 8 << 20;
  void* host = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(host, MAP_FAILED);
  mem->RegisterHost(host, n);
  torch::Tensor t = torch::arange(static_cast<int64_t>(n / 4), torch::kFloat32).to(torch::kCUDA);
  t.mul_(3);  // queued on the current stream: the copy must wait for it
  ASSERT_TRUE(mem->CopyToHost({{host, t.data_ptr(), n}}).ok());
  torch::Tensor want = t.cpu();
  EXPECT_EQ(std::memcmp(host, want.data_ptr(), n), 0);
  mem->UnregisterHost(host);
  ::munmap(host, n);
}

TEST(Gpu, CudaRunStoppedAndResumedIsBitIdentical) {
  FT_SKIP_WITHOUT_GPU();
  const TempDir dir("ftrain-gpu-test");
  const std::string& root = dir.path();
  const std::string data = root + "/data";
  auto packed = RunCommand(Ftrain() +
                               " pack --train-tokenizer --vocab-size 512 --seq-len 32 "
                               "--progress none --out " +
                               data + " /usr/share/common-licenses",
                           300);
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  auto train = [&](const std::string& run, int steps) {
    return RunCommand(Ftrain() + " train --config " + FTRAIN_SOURCE_DIR +
                          "/configs/tiny.cfg --data.path=" + data + " --run.dir=" + run +
                          " --train.device=cuda --dist.backend=nccl --ckpt.every_steps=5 "
                          "--ckpt.every_minutes=0 --ckpt.daemon=off --train.steps=" +
                          std::to_string(steps),
                      600);
  };
  auto ref = train(root + "/ref", 30);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  auto first = train(root + "/split", 15);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = train(root + "/split", 30);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resume: restored step 15"), std::string::npos) << second.output;
  auto diff = RunCommand(BinDir() + "/ckptctl diff " + root + "/ref/checkpoints/step-00000030 " +
                             root + "/split/checkpoints/step-00000030",
                         120);
  EXPECT_EQ(diff.exit_code, 0) << diff.output;
}

}  // namespace
}  // namespace ftrain::testing
