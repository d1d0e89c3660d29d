// ckptd's replication bandwidth cap (daemon/token_bucket.h) on a fake clock: the burst, the
// long-run rate whatever the chunk size, the debt a large chunk leaves, and "unlimited".
#include "daemon/token_bucket.h"

#include <gtest/gtest.h>

namespace ftrain::ckptd {
namespace {

TEST(TokenBucket, ZeroRateIsUnlimited) {
  TokenBucket b(0, 1 << 20);
  EXPECT_FALSE(b.limited());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(b.Reserve(uint64_t{1} << 30, 0), 0);
}

TEST(TokenBucket, TheBurstGoesAtOnceThenTheRate) {
  TokenBucket b(100e6, 8e6);  // 100 MB/s, 8 MB burst
  EXPECT_EQ(b.Reserve(4000000, 10.0), 0);
  EXPECT_EQ(b.Reserve(4000000, 10.0), 0);            // the burst is spent
  EXPECT_DOUBLE_EQ(b.Reserve(4000000, 10.0), 0.04);  // 4 MB at 100 MB/s
  // Waiting as told pays the debt; the next chunk waits for its own bytes only.
  EXPECT_NEAR(b.Reserve(4000000, 10.04), 0.04, 1e-9);
  // A long pause refills no more than the burst.
  EXPECT_EQ(b.Reserve(8000000, 1000.0), 0);
  EXPECT_GT(b.Reserve(1, 1000.0), 0);
}

// A sender that sleeps as told: whatever the chunk size, N bytes take N / rate seconds
// (less the burst), never less.
TEST(TokenBucket, TheLongRunRateHoldsForAnyChunkSize) {
  for (uint64_t chunk : {uint64_t{4096}, uint64_t{1} << 20, uint64_t{64} << 20}) {
    TokenBucket b(50e6, 4e6);  // 50 MB/s
    double now = 5.0;
    const uint64_t total = uint64_t{500} << 20;
    for (uint64_t sent = 0; sent < total; sent += chunk) now += b.Reserve(chunk, now);
    const double want = (static_cast<double>(total) - 4e6) / 50e6;
    EXPECT_NEAR(now - 5.0, want, static_cast<double>(chunk) / 50e6 + 1e-6) << chunk;
    EXPECT_GE(now - 5.0 + 1e-9, want - static_cast<double>(chunk) / 50e6) << chunk;
  }
}

TEST(TokenBucket, AClockThatStandsStillOrGoesBackGrantsNothing) {
  TokenBucket b(1e6, 1e6);
  EXPECT_EQ(b.Reserve(1000000, 3.0), 0);
  EXPECT_DOUBLE_EQ(b.Reserve(500000, 2.0), 0.5);  // earlier time: no refill
  EXPECT_DOUBLE_EQ(b.Reserve(500000, 3.0), 1.0);  // the debt adds up
}

}  // namespace
}  // namespace ftrain::ckptd
