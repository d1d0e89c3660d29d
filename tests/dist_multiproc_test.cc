// Multi-process tests of the launcher, the rendezvous and the Gloo collectives: real
// processes started by `ftrain launch` (or by hand with the env rendezvous), real TCP.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ftrain::testing {
namespace {

// Uneven element counts (1, 7, 1001, 1048579 float32) on purpose: shards of different sizes.
const char kUnevenSizes[] = "4,28,4004,4194316";

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, EveryCollectiveIsCorrectOnUnevenSizes) {
  const int n = GetParam();
  auto r = RunCommand(Ftrain() + " launch --nproc " + std::to_string(n) +
                          " -- commcheck --iters 1 --warmup 0 --sizes " + kUnevenSizes,
                      180);
  ASSERT_FALSE(r.timed_out) << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* coll : {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}) {
    EXPECT_TRUE(Contains(r.output, coll)) << coll << "\n" << r.output;
  }
  EXPECT_TRUE(Contains(r.output, "commcheck: OK")) << r.output;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(2, 3, 4));

TEST(Collectives, HybridLayoutGroupsAreCorrect) {
  // 2 simulated nodes x 2 ranks: intra-node groups {0,1},{2,3}, inter-node {0,2},{1,3}.
  auto r = RunCommand(Ftrain() +
                          " launch --nproc 4 --nodes 2 -- commcheck --iters 1 "
                          "--warmup 0 --sizes 4004 --json",
                      180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"group\":\"intra_node\",\"group_size\":2")) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"group\":\"inter_node\",\"group_size\":2")) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"num_nodes\":2")) << r.output;
}

TEST(Collectives, CorruptedResultFailsNamingRankAndCollective) {
  for (const char* coll : {"all_reduce", "reduce_scatter", "all_gather", "broadcast"}) {
    auto r = RunCommand(Ftrain() +
                            " launch --nproc 3 -- commcheck --iters 1 --warmup 0 "
                            "--sizes 4004 --no-groups --inject-fault 1:" +
                            coll,
                        120);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(Contains(r.output, std::string("FAILED: ") + coll)) << r.output;
    EXPECT_TRUE(Contains(r.output, "rank(s) 1")) << r.output;
  }
}

TEST(Collectives, UnwritableRecordExits3NamingTheFileNotTheNetwork) {
  // A regular file where the record's directory should be: unwritable even for root.
  TempDir dir("commcheck_record");
  const std::string blocker = dir / "not-a-dir";
  ASSERT_EQ(RunCommand("touch " + blocker, 10).exit_code, 0);
  const std::string record = blocker + "/commcheck.json";
  auto r = RunCommand(Ftrain() +
                          " launch --nproc 2 -- commcheck --iters 1 --warmup 0 --sizes 4K "
                          "--no-groups --record " +
                          record,
                      120);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;  // not 1 (a collective failed) nor 2 (usage, rendezvous)
  EXPECT_TRUE(Contains(
      r.output, "the collectives passed, but rank 0 cannot write the record " + record + ": "))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "Not a directory")) << r.output;
  EXPECT_TRUE(Contains(r.output, "commcheck: OK (record NOT written)")) << r.output;
  EXPECT_FALSE(Contains(r.output, "FAILED:")) << r.output;
}

TEST(Launch, DeadRankStopsTheOthersAndItsCodeWins) {
  auto r = RunCommand(Ftrain() +
                          " launch --nproc 3 --grace-s 2 -- /bin/sh -c "
                          "'if [ \"$RANK\" = 1 ]; then sleep 0.3; exit 7; fi; sleep 600'",
                      120);
  ASSERT_FALSE(r.timed_out) << "the survivors were not stopped: " << r.output;
  EXPECT_EQ(r.exit_code, 7) << r.output;
  EXPECT_TRUE(Contains(r.output, "rank 1")) << r.output;
  EXPECT_TRUE(Contains(r.output, "exited with code 7; stopping the other 2 rank(s)")) << r.output;
  // Each survivor ended by the launcher's SIGTERM, not by its own end.
  EXPECT_TRUE(Contains(r.output, "rank 0 was killed by signal 15")) << r.output;
  EXPECT_TRUE(Contains(r.output, "rank 2 was killed by signal 15")) << r.output;
}

TEST(Launch, RankKilledBySignalGives128PlusSignal) {
  auto r = RunCommand(Ftrain() +
                          " launch --nproc 2 --grace-s 1 -- /bin/sh -c "
                          "'if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; sleep 60'",
                      60);
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_TRUE(Contains(r.output, "killed by signal 9")) << r.output;
}

TEST(Launch, SurvivorIgnoringSigtermIsKilledAfterGrace) {
  auto r = RunCommand(Ftrain() +
                          " launch --nproc 2 --grace-s 1 -- /bin/sh -c "
                          "'if [ \"$RANK\" = 0 ]; then sleep 1; exit 3; fi; trap \"\" TERM; "
                          "sleep 600 & wait; sleep 600'",
                      120);
  ASSERT_FALSE(r.timed_out) << "the survivor was not killed: " << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(Contains(r.output, "still alive after 1 s; sending SIGKILL")) << r.output;
  EXPECT_TRUE(Contains(r.output, "rank 1 was killed by signal 9")) << r.output;
}

TEST(Launch, EnvironmentIsSetPerRank) {
  auto r = RunCommand(Ftrain() +
                          " launch --nproc 4 --nodes 2 -- /bin/sh -c "
                          "'echo R=$RANK/$WORLD_SIZE L=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                          "N=$GROUP_RANK A=$MASTER_ADDR'",
                      30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "R=3/4 L=1/2 N=1 A=127.0.0.1")) << r.output;
  EXPECT_TRUE(Contains(r.output, "R=0/4 L=0/2 N=0 A=127.0.0.1")) << r.output;
}

TEST(Launch, UsageErrorsExit2) {
  EXPECT_EQ(RunCommand(Ftrain() + " launch -- commcheck", 10).exit_code, 2);
  EXPECT_EQ(RunCommand(Ftrain() + " launch --nproc 0 -- commcheck", 10).exit_code, 2);
  EXPECT_EQ(RunCommand(Ftrain() + " launch --nproc 2", 10).exit_code, 2);
  EXPECT_EQ(RunCommand(Ftrain() + " launch --nproc 4 --nodes 3 -- commcheck", 10).exit_code, 2);
  auto r = RunCommand(Ftrain() + " launch --nproc 2 --bogus -- commcheck", 10);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.output, "bogus")) << r.output;
  EXPECT_EQ(RunCommand(Ftrain() + " no-such-command", 10).exit_code, 2);
  EXPECT_EQ(RunCommand(Ftrain() + " commcheck --sizes 1M,x", 10).exit_code, 2);
}

TEST(Rendezvous, UnreachableStoreTimesOutNamingTheAddress) {
  const int port = FreePort();  // nobody listens there
  auto r =
      RunCommand("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                     " FTRAIN_RDZV_TIMEOUT=3 " + Ftrain() + " commcheck --sizes 4K",
                 60);
  ASSERT_FALSE(r.timed_out) << "a rank hung instead of failing: " << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "127.0.0.1:" + std::to_string(port))) << r.output;
  EXPECT_TRUE(Contains(r.output, "rendezvous")) << r.output;
}

TEST(Rendezvous, MissingRankTimesOutNamingIt) {
  const int port = FreePort();
  auto r =
      RunCommand("RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                     " FTRAIN_RDZV_TIMEOUT=3 " + Ftrain() + " commcheck --sizes 4K",
                 60);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "ranks 1,2 of 3 did not join")) << r.output;
}

TEST(Rendezvous, MismatchedWorldSizesAreRefused) {
  const int port = FreePort();
  const std::string env =
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " FTRAIN_RDZV_TIMEOUT=20 ";
  auto r = RunCommand("(" + env + "RANK=0 WORLD_SIZE=2 " + Ftrain() +
                          " commcheck --sizes 4K > /dev/null 2>&1; echo rank0=$? ) & "
                          "sleep 0.5; " +
                          env + "RANK=1 WORLD_SIZE=3 " + Ftrain() +
                          " commcheck --sizes 4K; echo rank1=$?; wait",
                      90);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_TRUE(Contains(r.output, "rank0=2")) << r.output;
  EXPECT_TRUE(Contains(r.output, "rank1=2")) << r.output;
  EXPECT_TRUE(Contains(r.output, "world size")) << r.output;
}

}  // namespace
}  // namespace ftrain::testing
