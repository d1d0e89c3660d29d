// The non-blocking NCCL protocol (comm/nccl_nonblocking.h) against a fake NCCL (the name says
// Fake: no GPU here) that behaves as NCCL 2.28 did on an H200: initialisation and splits
// return success while the communicator is still in progress, a call on a communicator in
// progress fails with invalid argument, and a split's child handle appears only after the
// parent's state has been polled to success. A fake clock: milliseconds per test.
#include <gtest/gtest.h>

#include <map>

#include "comm/nccl_nonblocking.h"

namespace ftrain::comm::nonblocking {
namespace {

enum FakeResult { kOk = 0, kInternal = 3, kInvalid = 4, kBusy = 7 };

struct FakeComm {
  int polls_left = 0;            // polls of GetAsyncError before the state is kOk
  FakeComm** pending = nullptr;  // a split's child handle, written when this settles
  FakeComm* pending_child = nullptr;
};

struct FakeNccl {
  using Comm = FakeComm*;
  using Result = FakeResult;
  static constexpr Result kSuccess = kOk;
  static constexpr Result kInProgress = kBusy;
  static constexpr Result kInternalError = kInternal;

  Result GetAsyncError(Comm c, Result* state) {
    ++queries;
    if (c->polls_left > 0 && --c->polls_left == 0 && c->pending != nullptr) {
      *c->pending = c->pending_child;  // NCCL's thread fills the handle as the split completes
      c->pending = nullptr;
    }
    *state = c->polls_left > 0 ? kBusy : kOk;
    return kOk;
  }
  // NCCL 2.28: refuses a parent in progress; otherwise returns success at once, the parent in
  // progress for `split_polls` polls and the child handle still null.
  Result Split(Comm parent, int, int, Comm* child) {
    if (parent->polls_left > 0) return kInvalid;
    children.emplace_back(new FakeComm{child_polls, nullptr, nullptr});
    parent->polls_left = split_polls;
    parent->pending = child;
    parent->pending_child = children.back().get();
    *child = nullptr;
    return kOk;
  }
  Comm LoadChild(Comm* child) { return *child; }
  void Pause() { now += std::chrono::microseconds(200); }
  Clock::time_point Now() { return now; }

  Clock::time_point now{};
  int split_polls = 3, child_polls = 2, queries = 0;
  std::vector<std::unique_ptr<FakeComm>> children;
};

Clock::time_point In(FakeNccl& api, int seconds) { return api.now + std::chrono::seconds(seconds); }

TEST(FakeNcclNonBlocking, InitThatSaidSuccessIsPolledUntilItsStateIsSuccess) {
  FakeNccl api;
  FakeComm world{5};
  // The call said success; the communicator is still in progress for 5 polls.
  EXPECT_EQ(SettleState(api, &world, kOk, In(api, 1), {}), kOk);
  EXPECT_EQ(world.polls_left, 0);
  EXPECT_GE(api.queries, 5);
}

TEST(FakeNcclNonBlocking, SplitRightAfterInitWaitsForTheParentFirst) {
  FakeNccl api;
  FakeComm world{4};  // init returned success, still in progress (the H200's first failure)
  FakeComm* child = nullptr;
  ASSERT_EQ(Split(api, &world, 0, 0, &child, In(api, 1), {}), kOk);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child, api.children.back().get());
  EXPECT_EQ(child->polls_left, 0) << "the child itself settled";
}

TEST(FakeNcclNonBlocking, SplitReturnsTheChildOnlyAfterTheParentSettled) {
  FakeNccl api;
  FakeComm world{0};
  FakeComm* child = nullptr;
  // The split returns success with a null handle (the H200's second failure: a segfault on
  // the null communicator); the handle appears after the parent's third poll.
  api.split_polls = 3;
  ASSERT_EQ(Split(api, &world, 1, 0, &child, In(api, 1), {}), kOk);
  EXPECT_NE(child, nullptr);
  // Two splits in a row, as BuildNodeGroups does: the second waits for the first.
  FakeComm* second = nullptr;
  ASSERT_EQ(Split(api, &world, 0, 0, &second, In(api, 1), {}), kOk);
  EXPECT_NE(second, nullptr);
  EXPECT_NE(second, child);
}

TEST(FakeNcclNonBlocking, ASplitThatNeverSettlesTimesOutAndAStopEndsTheWait) {
  FakeNccl api;
  FakeComm world{0};
  FakeComm* child = nullptr;
  api.split_polls = 1 << 30;
  EXPECT_EQ(Split(api, &world, 0, 0, &child, In(api, 1), {}), kBusy);
  EXPECT_GE(api.now - Clock::time_point{}, std::chrono::seconds(1));

  FakeNccl api2;
  FakeComm world2{1 << 30};
  int asked = 0;
  EXPECT_EQ(SettleState(api2, &world2, kOk, In(api2, 100), [&] { return ++asked >= 3; }), kBusy);
  EXPECT_EQ(asked, 3);
  EXPECT_LT(api2.now - Clock::time_point{}, std::chrono::seconds(1));
}

TEST(FakeNcclNonBlocking, AnErrorIsReturnedAsItIs) {
  FakeNccl api;
  FakeComm world{0};
  EXPECT_EQ(SettleState(api, &world, kInvalid, In(api, 1), {}), kInvalid);
  EXPECT_EQ(api.queries, 0);
}

}  // namespace
}  // namespace ftrain::comm::nonblocking
