// The training loop's checkpoint due rules (train/checkpoint/schedule.h, CheckpointSchedule)
// on a fake clock: the wall-clock interval, the step interval, a stop, the final step, which
// saves must be durable, and the memory tier's intervals. No processes, no waiting, no LibTorch.
#include <gtest/gtest.h>

#include "core/fake_clock_env.h"
#include "train/checkpoint/memory_tier.h"
#include "train/checkpoint/schedule.h"

namespace ftrain::train {
namespace {

CkptSection Every(double minutes, int64_t steps, bool save_final = true) {
  CkptSection c;
  c.every_minutes = minutes;
  c.every_steps = steps;
  c.save_final = save_final;
  return c;
}

TEST(CheckpointSchedule, TimeIsDueOnceTheIntervalHasPassedSinceStartOrTheLastSave) {
  FakeClockEnv env(Env::Default());
  CheckpointSchedule s(Every(25, 0), 1000, &env);
  EXPECT_FALSE(s.TimeDue());
  env.Advance(25 * 60 - 0.001);
  EXPECT_FALSE(s.TimeDue());
  env.Advance(0.001);
  EXPECT_TRUE(s.TimeDue());
  env.Advance(3600);  // however late the boundary comes, it is one checkpoint
  EXPECT_TRUE(s.TimeDue());
  s.Saved();
  EXPECT_FALSE(s.TimeDue());
  env.SleepForMicroseconds(int64_t{25} * 60 * 1000000);  // a sleep on the Env moves it too
  EXPECT_TRUE(s.TimeDue());
}

TEST(CheckpointSchedule, ZeroMinutesTurnsTheClockOff) {
  FakeClockEnv env(Env::Default());
  CheckpointSchedule s(Every(0, 0), 1000, &env);
  env.Advance(1e7);
  EXPECT_FALSE(s.TimeDue());
}

TEST(CheckpointSchedule, DueOnTheStepIntervalTheAgreedClockAStopOrTheFinalStep) {
  FakeClockEnv env(Env::Default());
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
  FakeClockEnv env(Env::Default());
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
  ftrain::FakeClockEnv env(ftrain::Env::Default());
  ftrain::train::CkptSection c;
  c.memory_every_steps = 3;
  ftrain::train::CheckpointSchedule tier(c, 1000, &env);
  EXPECT_TRUE(tier.memory_tier());
  std::vector<int64_t> due;
  for (int64_t s = 0; s <= 10; ++s) {
    if (tier.MemoryDue(s, false)) due.push_back(s);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{3, 6, 9}));
  c.memory_every_steps = 0;
  ftrain::train::CheckpointSchedule off(c, 1000, &env);
  EXPECT_FALSE(off.memory_tier());
  for (int64_t s = 0; s <= 10; ++s) EXPECT_FALSE(off.MemoryDue(s, true));
}

// A due snapshot passes while the one before it still awaits a buddy and a step is recorded:
// taking it would evict the recorded step from the daemon's slots. At most one occasion in a
// row at most; nothing passes before the first record or with nothing pending.
TEST(MemoryTierSchedule, ASnapshotPassesOnceWhileTheOneBeforeAwaitsItsBuddy) {
  using ftrain::train::MemoryTier;
  EXPECT_FALSE(MemoryTier::ShouldPass(0, 6, 0)) << "nothing pending: take it";
  EXPECT_FALSE(MemoryTier::ShouldPass(1, -1, 0)) << "nothing recorded yet: nothing to keep";
  EXPECT_TRUE(MemoryTier::ShouldPass(1, 6, 0));
  EXPECT_FALSE(MemoryTier::ShouldPass(1, 6, MemoryTier::kMaxPassedForPending))
      << "a buddy that never confirms must not stop the tier";
  // The counter: pass, then take, then pass again once the next one is pending.
  std::vector<bool> passed, want;
  int in_a_row = 0;
  for (int i = 0; i < MemoryTier::kMaxPassedForPending; ++i) want.push_back(true);
  want.insert(want.end(), {false, false, true});
  std::vector<size_t> pending(static_cast<size_t>(MemoryTier::kMaxPassedForPending) + 1, 1);
  pending.insert(pending.end(), {0, 1});
  for (size_t n : pending) {
    const bool p = MemoryTier::ShouldPass(n, 6, in_a_row);
    in_a_row = p ? in_a_row + 1 : 0;
    passed.push_back(p);
  }
  EXPECT_EQ(passed, want);
}

// ckpt.memory_every_seconds: rank 0's clock votes (CheckpointSchedule::MemoryTimeDue), the
// boundary agreement max-reduces the vote, and MemoryDue takes it at that step on every
// rank. Driven here by a fake clock: 2 s per step, an interval of 5 s.
TEST(MemoryTierSchedule, SecondsIntervalVotesOnTheClockAndStartsAgainAtEachSnapshotOrSave) {
  ftrain::FakeClockEnv env(ftrain::Env::Default());
  ftrain::train::CkptSection c;
  c.every_minutes = 0;
  c.every_steps = 10;
  c.memory_every_seconds = 5;
  ftrain::train::CheckpointSchedule s(c, 1000, &env);
  EXPECT_TRUE(s.memory_tier());
  std::vector<int64_t> memory, disk;
  for (int64_t step = 1; step <= 12; ++step) {
    env.Advance(2);
    const bool vote = s.MemoryTimeDue();
    if (s.Due(step, false, false)) {  // a disk checkpoint: both clocks start again
      disk.push_back(step);
      s.Saved();
    } else if (s.MemoryDue(step, vote)) {
      memory.push_back(step);
      s.MemoryTaken();
    }
  }
  // 2 s a step: 6 s >= 5 s at step 3, again at 6 and 9; step 10's disk checkpoint starts the
  // clock again, so step 12 (4 s after it) is not due.
  EXPECT_EQ(memory, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_EQ(disk, (std::vector<int64_t>{10}));
  EXPECT_FALSE(s.MemoryTimeDue());
  env.Advance(1);
  EXPECT_TRUE(s.MemoryTimeDue());
}

TEST(MemoryTierSchedule, BothIntervalsAndZeroSecondsIsOff) {
  ftrain::FakeClockEnv env(ftrain::Env::Default());
  ftrain::train::CkptSection c;
  c.every_minutes = 0;
  ftrain::train::CheckpointSchedule s(c, 1000, &env);
  env.Advance(1e7);
  EXPECT_FALSE(s.MemoryTimeDue());  // memory_every_seconds = 0: the clock never votes
  c.memory_every_steps = 4;
  c.memory_every_seconds = 30;
  ftrain::train::CheckpointSchedule both(c, 1000, &env);
  EXPECT_TRUE(both.MemoryDue(4, false));   // the step interval
  EXPECT_TRUE(both.MemoryDue(5, true));    // the agreed clock
  EXPECT_FALSE(both.MemoryDue(5, false));  // neither
  EXPECT_FALSE(both.MemoryDue(0, true));   // never before the first step
  c.memory_every_seconds = 0;
  ftrain::train::CheckpointSchedule steps_only(c, 1000, &env);
  EXPECT_FALSE(steps_only.MemoryDue(5, true));  // a stray vote does not count without the interval
}
