// The training loop's checkpoint due rule (train/checkpoint/coordinator.h, CheckpointSchedule)
// on a fake clock: the wall-clock interval, the step interval, a stop, the final step, and
// which saves must be durable. No processes, no waiting.
#include <gtest/gtest.h>

#include "fake_clock_env.h"
#include "train/checkpoint/coordinator.h"
#include "train/checkpoint/memory_tier.h"

namespace ftrain::train {
namespace {

using ftrain::testing::FakeClockEnv;

CkptSection Every(double minutes, int64_t steps, bool save_final = true) {
  CkptSection c;
  c.every_minutes = minutes;
  c.every_steps = steps;
  c.save_final = save_final;
  return c;
}

TEST(CheckpointSchedule, TimeIsDueOnceTheIntervalHasPassedSinceStartOrTheLastSave) {
  FakeClockEnv env;
  CheckpointSchedule s(Every(25, 0), 1000, &env);
  EXPECT_FALSE(s.TimeDue());
  env.AdvanceSeconds(25 * 60 - 0.001);
  EXPECT_FALSE(s.TimeDue());
  env.AdvanceSeconds(0.001);
  EXPECT_TRUE(s.TimeDue());
  env.AdvanceSeconds(3600);  // however late the boundary comes, it is one checkpoint
  EXPECT_TRUE(s.TimeDue());
  s.Saved();
  EXPECT_FALSE(s.TimeDue());
  env.SleepForMicroseconds(int64_t{25} * 60 * 1000000);  // a sleep on the Env moves it too
  EXPECT_TRUE(s.TimeDue());
}

TEST(CheckpointSchedule, ZeroMinutesTurnsTheClockOff) {
  FakeClockEnv env;
  CheckpointSchedule s(Every(0, 0), 1000, &env);
  env.AdvanceSeconds(1e7);
  EXPECT_FALSE(s.TimeDue());
}

TEST(CheckpointSchedule, DueOnTheStepIntervalTheAgreedClockAStopOrTheFinalStep) {
  FakeClockEnv env;
  CheckpointSchedule s(Every(0, 50), 120, &env);
  EXPECT_FALSE(s.Due(49, false, false));
  EXPECT_TRUE(s.Due(50, false, false));
  EXPECT_TRUE(s.Due(100, false, false));
  EXPECT_TRUE(s.Due(51, /*time_due=*/true, false));
  EXPECT_TRUE(s.Due(51, false, /*stop=*/true));
  EXPECT_TRUE(s.Due(120, false, false));  // the final step (save_final)
  CheckpointSchedule no_final(Every(0, 50, /*save_final=*/false), 120, &env);
  EXPECT_FALSE(no_final.Due(120, false, false));
  EXPECT_TRUE(no_final.Due(120, false, /*stop=*/true));
}

TEST(CheckpointSchedule, AStopAndTheFinalStepMustBeDurableIntervalsNot) {
  FakeClockEnv env;
  CheckpointSchedule s(Every(25, 50), 120, &env);
  EXPECT_FALSE(s.MustBeDurable(50, false));
  EXPECT_TRUE(s.MustBeDurable(51, true));
  EXPECT_TRUE(s.MustBeDurable(120, false));
}

}  // namespace
}  // namespace ftrain::train

// The memory tier's due rule (issue 35): every N optimizer steps, off at 0; the coordinator
// takes a disk checkpoint instead where both are due.
TEST(MemoryTierSchedule, DueEveryNStepsAndOffAtZero) {
  ftrain::train::MemoryTierOptions o;
  o.every_steps = 3;
  ftrain::train::MemoryTier tier(o, nullptr);
  EXPECT_TRUE(tier.enabled());
  std::vector<int64_t> due;
  for (int64_t s = 0; s <= 10; ++s) {
    if (tier.Due(s)) due.push_back(s);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{3, 6, 9}));
  o.every_steps = 0;
  ftrain::train::MemoryTier off(o, nullptr);
  EXPECT_FALSE(off.enabled());
  for (int64_t s = 0; s <= 10; ++s) EXPECT_FALSE(off.Due(s));
}
