// The run lease (orch/lease.h) on a real directory: two jobs never hold one run (hole 7), an
// earlier start of the same job and a dead holder are taken over, a watcher's hand-off goes to
// the new job only, a superseded job knows it, a renewal after a take-over fails, and racing
// takers get one epoch each. The fence is the epoch, not a clock: a checkpoint generation of a
// later epoch is newer whatever the nodes' clocks say. Files in a temp dir, milliseconds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <set>
#include <thread>

#include "ckpt/store.h"
#include "core/env.h"
#include "orch/lease.h"
#include "records/launch_context.h"
#include "test_util.h"

namespace ftrain::orch {
namespace {

using ftrain::testing::TempDir;

LeaseHolder Job(const std::string& job, int restart = 0, const std::string& from = "") {
  LeaseHolder h;
  h.job = job;
  h.restart = restart;
  h.host = "n1";
  h.from = from;
  return h;
}

JobAlive Running(std::set<std::string> running) {
  return
      [running](const std::string& job) -> std::optional<bool> { return running.count(job) > 0; };
}

class Lease : public ::testing::Test {
 protected:
  TempDir tmp_;
  RunLease lease_{tmp_.path() + "/.lease", tmp_.path() + "/.lease.d", Env::Default()};
};

TEST_F(Lease, TheFirstJobTakesItAndAnotherLiveJobIsRefused) {
  auto a = lease_.Acquire(Job("42"), Running({"42", "43"}));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->ok);
  EXPECT_EQ(a->holder.epoch, 1);
  auto b = lease_.Acquire(Job("43"), Running({"42", "43"}));
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->ok);
  EXPECT_EQ(b->holder.job, "42");
  EXPECT_FALSE(b->superseded);
  EXPECT_TRUE(*lease_.Holds(a->holder));
}

TEST_F(Lease, ADeadHolderOrAnEarlierStartOfTheSameJobIsTakenOver) {
  auto a = lease_.Acquire(Job("42"), Running({}));
  auto requeued = lease_.Acquire(Job("42", 1), Running({"42"}));
  ASSERT_TRUE(requeued.ok() && requeued->ok);
  EXPECT_EQ(requeued->holder.epoch, 2);
  EXPECT_FALSE(*lease_.Holds(a->holder));               // the old start is fenced out
  auto other = lease_.Acquire(Job("43"), Running({}));  // 42 pending or ended
  ASSERT_TRUE(other.ok() && other->ok);
  EXPECT_EQ(other->holder.epoch, 3);
}

TEST_F(Lease, SlurmNotAnsweringIsNotATakeOver) {
  ASSERT_TRUE(lease_.Acquire(Job("42"), Running({"42"}))->ok);
  auto b = lease_.Acquire(Job("43"), [](const std::string&) { return std::optional<bool>(); });
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->ok);
  EXPECT_TRUE(b->unknown);
}

// A watcher takes the run over from its dead batch host, submits the job again and hands the
// run to the new job; Slurm's own requeue of the old job then finds itself superseded.
TEST_F(Lease, AWatchersHandOffGoesToTheNewJobOnly) {
  auto controller = lease_.Acquire(Job("42"), Running({"42"}));
  LeaseHolder w = Job("42");
  w.role = "watcher";
  w.host = "n3";
  auto watcher = lease_.Acquire(w, Running({"42"}));
  ASSERT_TRUE(watcher->ok);
  EXPECT_FALSE(*lease_.Holds(controller->holder));  // the batch host is fenced out
  ASSERT_TRUE(lease_.HandOff(watcher->holder, "4242").ok());
  // A stranger does not get it while the new job may still start (it runs: it is the holder).
  auto stranger = lease_.Acquire(Job("43"), Running({"4242", "42"}));
  EXPECT_FALSE(stranger->ok);
  auto old_requeued = lease_.Acquire(Job("42", 1), Running({"4242"}));
  EXPECT_FALSE(old_requeued->ok);
  EXPECT_TRUE(old_requeued->superseded);
  auto fresh = lease_.Acquire(Job("4242", 0, "42"), Running({"42"}));
  ASSERT_TRUE(fresh->ok);
  auto old_again = lease_.Acquire(Job("42", 1), Running({"4242"}));
  EXPECT_FALSE(old_again->ok);
  EXPECT_TRUE(old_again->superseded);
}

TEST_F(Lease, RenewalGivesANewEpochAndFailsOnceSomeoneTookTheRun) {
  auto a = lease_.Acquire(Job("42"), Running({"42"}));
  auto r = lease_.Renew(a->holder);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->epoch, 2);
  auto b = lease_.Acquire(Job("42", 1), Running({"42"}));
  ASSERT_TRUE(b->ok);
  auto late = lease_.Renew(*r);
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("taken over by job 42"), std::string::npos);
}

// Issue 44, hole 4: a renewal whose entry was made but whose holder file was not (an I/O error
// after the link) is finished by the retry, not taken for someone else's take-over (which ends
// the job with exit 0), and the holder still holds the run meanwhile.
TEST_F(Lease, ARetriedRenewalFinishesItsOwnHalfMadeEpoch) {
  auto a = lease_.Acquire(Job("42"), Running({"42"}));
  ASSERT_TRUE(a.ok() && a->ok);
  LeaseHolder half = a->holder;
  half.epoch = 2;  // the link landed; the rename of RUN/.lease did not
  ASSERT_TRUE(
      WriteFileDurably(Env::Default(), tmp_.path() + "/.lease.d/000000000002", FormatHolder(half))
          .ok());
  EXPECT_TRUE(*lease_.Holds(a->holder));
  auto r = lease_.Renew(a->holder);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->epoch, 2);
  auto cur = lease_.Current();
  ASSERT_TRUE(cur.ok() && cur->has_value());
  EXPECT_EQ((*cur)->epoch, 2);
  EXPECT_EQ((*cur)->token, a->holder.token);
  // Another job's later epoch is still a take-over (Aborted: the only error that ends a job 0).
  auto b = lease_.Acquire(Job("42", 1), Running({"42"}));
  ASSERT_TRUE(b.ok() && b->ok);
  EXPECT_FALSE(*lease_.Holds(*r));
  EXPECT_EQ(lease_.Renew(*r).status().code(), Status::Code::kAborted);
}

// An I/O error is not a take-over: Renew says so with an error other than Aborted.
TEST_F(Lease, AnIoErrorOnRenewalIsNotATakeOver) {
  auto a = lease_.Acquire(Job("42"), Running({"42"}));
  ASSERT_TRUE(a.ok() && a->ok);
  const std::string dir = tmp_.path() + "/.lease.d";
  ASSERT_EQ(std::rename(dir.c_str(), (dir + ".away").c_str()), 0);
  ASSERT_TRUE(WriteFileDurably(Env::Default(), dir, "not a directory").ok());  // ENOTDIR
  auto r = lease_.Renew(a->holder);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), Status::Code::kAborted) << r.status().message();
}

TEST_F(Lease, RacingTakersGetOneEpochEach) {
  std::vector<std::thread> threads;
  std::atomic<int> won{0};
  std::vector<int64_t> epochs(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto r = lease_.Acquire(Job("42", i), Running({"42"}));
      if (r.ok() && r->ok) {
        ++won;
        epochs[i] = r->holder.epoch;
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> distinct(epochs.begin(), epochs.end());
  distinct.erase(0);
  EXPECT_EQ(static_cast<int>(distinct.size()), won.load());
  auto cur = lease_.Current();
  ASSERT_TRUE(cur.ok() && cur->has_value());
  EXPECT_EQ((*cur)->epoch, static_cast<int64_t>(won.load()));
}

// Hole 15: two runs share one checkpoint root. The root's lease (the same mechanism, its
// holder naming the run directory) refuses the second run while the first one's job runs,
// lets any job of the same run take it (the run lease decided between those), and passes to
// the second run once the first run's job is gone.
TEST(RootLease, TwoRunsOnOneCheckpointRootNeverBothHoldIt) {
  TempDir tmp;
  const std::string root = tmp.path() + "/ckpt";
  ASSERT_TRUE(CreateDirs(Env::Default(), tmp.path() + "/runA").ok());
  RunLease a_side(RootLeaseFile(root), RootLeaseDir(root), Env::Default());
  RunLease b_side(RootLeaseFile(root), RootLeaseDir(root),
                  Env::Default());  // another controller, same files
  LeaseHolder a = Job("42");
  a.run = CanonicalRunDir(tmp.path() + "/runA");
  LeaseHolder b = Job("43");
  b.run = CanonicalRunDir(tmp.path() + "/runB");
  auto ra = a_side.Acquire(a, Running({"42", "43"}));
  ASSERT_TRUE(ra.ok() && ra->ok);
  auto rb = b_side.Acquire(b, Running({"42", "43"}));
  ASSERT_TRUE(rb.ok());
  EXPECT_FALSE(rb->ok);  // run A's job runs: run B does not train on its root
  EXPECT_EQ(rb->holder.run, a.run);
  EXPECT_NE(rb->holder.Describe().find("run directory " + a.run), std::string::npos)
      << rb->holder.Describe();
  // Another job of run A (a resubmission: new job id) takes it whatever Slurm says of 42.
  LeaseHolder a2 = Job("44", 0, "42");
  a2.run = a.run;
  auto ra2 = a_side.Acquire(a2, Running({"42", "43", "44"}));
  ASSERT_TRUE(ra2.ok() && ra2->ok);
  EXPECT_EQ(ra2->holder.epoch, 2);
  // Run A's jobs gone: run B takes the root over.
  rb = b_side.Acquire(b, Running({"43"}));
  ASSERT_TRUE(rb.ok() && rb->ok);
  EXPECT_EQ(rb->holder.run, b.run);
  // The run lease is unchanged by the `run` rule: a holder without it is judged as before.
  TempDir run;
  RunLease rl(run.path() + "/.lease", run.path() + "/.lease.d", Env::Default());
  ASSERT_TRUE(rl.Acquire(Job("42"), Running({"42"}))->ok);
  EXPECT_FALSE(rl.Acquire(Job("43"), Running({"42"}))->ok);
}

TEST(RootLease, ARootInsideTheRunDirectoryIsTheRunLeasesAlready) {
  TempDir tmp;
  const std::string run = tmp.path() + "/run";
  ASSERT_TRUE(CreateDirs(Env::Default(), run + "/checkpoints").ok());
  EXPECT_TRUE(PathInside(run + "/checkpoints", run));
  EXPECT_TRUE(PathInside(run + "/", run));
  EXPECT_TRUE(PathInside(run + "/sub/../checkpoints", run));
  EXPECT_FALSE(PathInside(tmp.path() + "/run2/checkpoints", run));  // a prefix is not inside
  EXPECT_FALSE(PathInside(tmp.path() + "/ckpt", run));
  // Through a symbolic link: the run's checkpoints reached by another name are still inside.
  ASSERT_EQ(symlink(run.c_str(), (tmp.path() + "/alias").c_str()), 0);
  EXPECT_TRUE(PathInside(tmp.path() + "/alias/checkpoints", run));
}

// Hole 7: the fence is the lease's epoch. A generation of a later epoch is newer than any of an
// earlier one and than any clock-made one, whatever the clocks of the nodes say.
TEST(Fence, GenerationsFollowTheLeaseEpochNotAClock) {
  // The epoch as a trainer's main reads it from `ftrain job`'s FTRAIN_FENCE_EPOCH.
  auto epoch = [](const char* v) {
    return records::LaunchContext::FromLookup([v](const char* name) {
             return std::string(name) == "FTRAIN_FENCE_EPOCH" ? v : nullptr;
           })
        .fence_epoch;
  };
  const std::string seven = ckpt::NewGeneration(epoch("7"));
  const std::string twelve = ckpt::NewGeneration(epoch("12"));
  const std::string clock = ckpt::NewGeneration(epoch(nullptr));  // outside a job: clock-made
  EXPECT_NE(ckpt::NewGeneration(epoch("12x"))[0], 'e');           // malformed: no epoch
  EXPECT_EQ(seven.substr(0, 16), "e000000000000007");
  EXPECT_LT(seven, twelve);
  EXPECT_LT(clock, seven);   // a fenced start always wins over an unfenced one
  EXPECT_NE(clock[0], 'e');  // (its random hex part may hold an e)
}

}  // namespace
}  // namespace ftrain::orch
