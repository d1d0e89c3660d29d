// test_util.h's gtest expectations, in their own object so that the binaries that use
// test_util without gtest (the fuzzers) do not pull them in.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ftrain::testing {

void ExpectSameBits(const std::string& ckpt_a, const std::string& ckpt_b, const std::string& run_a,
                    const std::string& run_b, int steps) {
  auto diff = RunCommand(BinDir() + "/ckptctl diff " + ckpt_a + " " + ckpt_b + " 2>&1", 120);
  EXPECT_EQ(diff.exit_code, 0) << ckpt_a << " vs " << ckpt_b << ":\n" << diff.output;
  const auto a = Losses(run_a), b = Losses(run_b);
  if (steps >= 0) {
    EXPECT_EQ(a.size(), static_cast<size_t>(steps)) << run_a;
  }
  EXPECT_EQ(a, b) << "per-step losses of " << run_b << " differ from " << run_a;
}

}  // namespace ftrain::testing
