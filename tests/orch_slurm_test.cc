// SlurmCli (orch/slurm.h) against stand-in Slurm commands on PATH that misbehave the way a
// busy real cluster does (hole 2, hole 7): a `scontrol requeue` that fails once (before or
// after acting) is retried and verified and the job is requeued exactly once; one that always
// fails is an error, never a success; an `sbatch` that times out after creating the job is
// found by its token and not submitted twice; an empty `squeue` answer is no answer; a guarded
// requeue is never sent blind nor for a job its guard refuses. Each
// stand-in keeps its state in a directory; a few processes per test, about a second each.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "orch/slurm.h"
#include "test_util.h"

namespace ftrain::orch {
namespace {

using ftrain::testing::ReadFile;
using ftrain::testing::TempDir;

class StandIns : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = tmp_.path() + "/bin";
    state_ = tmp_.path() + "/state";
    mkdir(bin_.c_str(), 0755);
    mkdir(state_.c_str(), 0755);
    old_path_ = std::getenv("PATH");
    setenv("PATH", (bin_ + ":" + old_path_).c_str(), 1);
    setenv("STUB_STATE", state_.c_str(), 1);
    // scontrol: `requeue` as REQUEUE_MODE says; `-o show job` reports the restart count.
    Write("scontrol", R"SH(#!/usr/bin/env bash
s="${STUB_STATE}"
case "$*" in
  "requeue "*)
    n=$(($(cat "$s/requeue_calls" 2>/dev/null || echo 0) + 1)); echo "$n" >"$s/requeue_calls"
    case "${REQUEUE_MODE}:${n}" in
      fail_once:1) echo "slurm_requeue error: Socket timed out" >&2; exit 1 ;;
      act_then_fail:1) echo 1 >"$s/restarts"; echo "slurm_requeue error: Socket timed out" >&2; exit 1 ;;
      always_fail:*) echo "slurm_requeue error: Unable to contact slurm controller" >&2; exit 1 ;;
    esac
    echo $(($(cat "$s/restarts" 2>/dev/null || echo 0) + 1)) >"$s/restarts" ;;
  "-o show job "*)
    n=$(($(cat "$s/show_calls" 2>/dev/null || echo 0) + 1)); echo "$n" >"$s/show_calls"
    if ((n <= ${SHOW_FAILS:-0})); then echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1; fi
    echo "JobId=$4 JobState=${JOB_STATE:-RUNNING} Reason=None Restarts=$(cat "$s/restarts" 2>/dev/null || echo 0) ExcNodeList=(null)" ;;
  "show hostnames "*) tr ',' '\n' <<<"$3" ;;
  *) echo "scontrol stand-in: unexpected: $*" >&2; exit 1 ;;
esac
)SH");
    // sbatch: records the job it makes (with its --comment), then hangs when SBATCH_HANG=1.
    Write("sbatch", R"SH(#!/usr/bin/env bash
n=$(($(cat "${STUB_STATE}/sbatch_calls" 2>/dev/null || echo 0) + 1)); echo "$n" >"${STUB_STATE}/sbatch_calls"
for a in "$@"; do [[ "$a" == --comment=* ]] && comment="${a#--comment=}"; done
echo "$((4240 + n))|${comment}" >>"${STUB_STATE}/queue"
if [[ "${SBATCH_HANG:-0}" == 1 ]]; then sleep 30; fi
echo "$((4240 + n))"
)SH");
    Write("squeue", R"SH(#!/usr/bin/env bash
case "$*" in
  *"%i|%k"*) cat "${STUB_STATE}/queue" 2>/dev/null ;;
  *"%N"*) [[ "${SQUEUE_EMPTY:-0}" == 1 ]] || echo "n1,n2" ;;
esac
)SH");
  }
  void TearDown() override {
    setenv("PATH", old_path_.c_str(), 1);
    for (const char* v :
         {"REQUEUE_MODE", "SBATCH_HANG", "SQUEUE_EMPTY", "STUB_STATE", "SHOW_FAILS", "JOB_STATE"}) {
      unsetenv(v);
    }
  }
  void Write(const std::string& name, const std::string& text) {
    const std::string p = bin_ + "/" + name;
    std::ofstream(p) << text;
    chmod(p.c_str(), 0755);
  }
  int Count(const std::string& file) { return std::atoi(ReadFile(state_ + "/" + file).c_str()); }

  TempDir tmp_;
  std::string bin_, state_, old_path_;
};

TEST_F(StandIns, ARequeueThatFailsOnceIsRetriedAndRequeuesExactlyOnce) {
  setenv("REQUEUE_MODE", "fail_once", 1);
  SlurmCli slurm;
  Status s = slurm.Requeue("42", 0, 15, nullptr);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Count("requeue_calls"), 2);
  EXPECT_EQ(Count("restarts"), 1);
}

TEST_F(StandIns, ARequeueThatActedBeforeFailingIsNotRepeated) {
  setenv("REQUEUE_MODE", "act_then_fail", 1);
  SlurmCli slurm;
  EXPECT_TRUE(slurm.Requeue("42", 0, 15, nullptr).ok());
  EXPECT_EQ(Count("requeue_calls"), 1);  // verified: it acted
  EXPECT_EQ(Count("restarts"), 1);
}

TEST_F(StandIns, ARequeueThatAlwaysFailsIsAnErrorNamingItsTries) {
  setenv("REQUEUE_MODE", "always_fail", 1);
  SlurmCli slurm;
  Status s = slurm.Requeue("42", 0, 3, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Unable to contact slurm controller"), std::string::npos)
      << s.message();
  EXPECT_GE(Count("requeue_calls"), 2);
  EXPECT_EQ(Count("restarts"), 0);
}

// A guarded requeue (after a TERM slurmctld did not explain) is sent only once slurmctld
// answered and the guard accepts what it says: never blind, never for a cancelled job.
TEST_F(StandIns, AGuardedRequeueWaitsForAnAnswerAndRespectsTheGuard) {
  const RequeueGuard not_cancelled = [](const JobInfo& j) {
    return j.State() == "COMPLETING" ? Status::Aborted("cancelled") : Status::Ok();
  };
  setenv("SHOW_FAILS", "2", 1);  // slurmctld back after two questions
  SlurmCli slurm;
  Status s = slurm.Requeue("42", 0, 15, not_cancelled);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Count("requeue_calls"), 1);
  EXPECT_EQ(Count("restarts"), 1);

  setenv("JOB_STATE", "COMPLETING", 1);  // it answers, and the job was cancelled
  unlink((state_ + "/show_calls").c_str());
  unlink((state_ + "/requeue_calls").c_str());
  s = slurm.Requeue("42", 1, 15, not_cancelled);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s.message();
  EXPECT_EQ(Count("requeue_calls"), 0);

  setenv("SHOW_FAILS", "1000", 1);  // never answers: nothing sent blind, an error
  unsetenv("JOB_STATE");
  s = slurm.Requeue("42", 1, 3, not_cancelled);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not requeueing without an answer"), std::string::npos) << s.message();
  EXPECT_EQ(Count("requeue_calls"), 0);
}

TEST_F(StandIns, AnSbatchThatTimesOutAfterCreatingTheJobIsFoundNotRepeated) {
  setenv("SBATCH_HANG", "1", 1);
  SlurmCli slurm;
  slurm.set_submit_timeout(1);
  Submitted s =
      slurm.Submit({"--nodes=2"}, "/r/.submit/script",
                   {"PATH=" + bin_ + ":/usr/bin:/bin", "STUB_STATE=" + state_, "SBATCH_HANG=1"},
                   tmp_.path(), "ftrain-resubmit-42.0");
  EXPECT_EQ(s.job, "4241") << s.error;
  EXPECT_EQ(Count("sbatch_calls"), 1);
}

TEST_F(StandIns, AnEmptySqueueAnswerIsNoAnswer) {
  SlurmCli slurm;
  auto nodes = slurm.NodesOfJob("42");
  ASSERT_TRUE(nodes.has_value());
  EXPECT_EQ(*nodes, (std::vector<std::string>{"n1", "n2"}));
  setenv("SQUEUE_EMPTY", "1", 1);
  EXPECT_FALSE(slurm.NodesOfJob("42").has_value());  // never "every node is dead"
}

TEST(SlurmHelpers, TheNotRespondingWaitAndTheExclusions) {
  SlurmConfig defaults;  // MessageTimeout 10, cred_expire 120: nothing to wait for
  EXPECT_EQ(NorespondWaitS(defaults, 30), 0);
  SlurmConfig local;
  local.message_timeout_s = 10;
  local.cred_expire_s = 5;
  EXPECT_EQ(NorespondWaitS(local, 30), 9);  // 10 + 5 - 6
  EXPECT_EQ(NorespondWaitS(local, 4), 4);
  // The user's own exclusions stay; a declared node that answers again is back.
  EXPECT_EQ(Exclusions({"n9"}, {{"n2", "idle*"}, {"n3", "idle"}}, {"n4"}),
            (std::vector<std::string>{"n9", "n2", "n4"}));
  EXPECT_TRUE(Responds("mix"));
  EXPECT_FALSE(Responds("down*"));
  EXPECT_FALSE(Responds("idle*"));
  // Issue 44, hole 15: sinfo's suffixes of a node that answers.
  EXPECT_TRUE(Responds("mix-"));
  EXPECT_TRUE(Responds("alloc@"));
  EXPECT_TRUE(Responds("idle$"));
  EXPECT_TRUE(Responds("idle#"));
  EXPECT_FALSE(Responds("idle~"));
  EXPECT_FALSE(Responds("alloc*"));
  EXPECT_FALSE(Responds("down"));
}

// Issue 47's grow-back: the expansion allocation asks per node what the job asked (as 22.05's
// `scontrol show job` prints it), never a node the job has, and its id is read from salloc.
TEST(SlurmHelpers, TheExpansionAsksWhatTheJobAskedPerNode) {
  JobInfo gpu = ParseShowJob(
      "JobId=42 JobName=ftrain\n   JobState=RUNNING Reason=None\n   Partition=gpu\n"
      "   NumNodes=2 NumCPUs=64 NumTasks=16 CPUs/Task=4 ReqB:S:C:T=0:0:*:*\n"
      "   MinCPUsNode=32 MinMemoryNode=0 MinTmpDiskNode=0\n   OverSubscribe=NO Contiguous=0\n"
      "   NtasksPerN:B:S:C=8:0:*:* CoreSpec=*\n   TresPerNode=gres:gpu:8\n"
      "   ReqNodeList=(null) ExcNodeList=n7\n");
  EXPECT_EQ(ExpandArgs(gpu, "42", 1, "n[1-2]"),
            (std::vector<std::string>{
                "salloc", "--no-shell", "--immediate=3", "--dependency=expand:42", "--nodes=1",
                "--job-name=ftrain-grow-42", "--partition=gpu", "--exclude=n[1-2],n7",
                "--ntasks-per-node=8", "--mincpus=32", "--gres=gpu:8", "--exclusive"}));
  JobInfo cpu = ParseShowJob(
      "JobId=7 JobName=t\n   Partition=debug\n   MinCPUsNode=1\n   OverSubscribe=OK\n"
      "   NtasksPerN:B:S:C=0:0:*:*\n");
  EXPECT_EQ(ExpandArgs(cpu, "7", 2, ""),
            (std::vector<std::string>{
                "salloc", "--no-shell", "--immediate=3", "--dependency=expand:7", "--nodes=2",
                "--job-name=ftrain-grow-7", "--partition=debug", "--mincpus=1"}));
  EXPECT_EQ(GrantedJob("salloc: Granted job allocation 4\nsalloc: Relinquishing\n"), "4");
  EXPECT_EQ(GrantedJob("salloc: error: Job submit/allocate failed: Requested node "
                       "configuration is not available\n"),
            "");
}

}  // namespace
}  // namespace ftrain::orch
