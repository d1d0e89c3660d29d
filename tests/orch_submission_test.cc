// A job submitted again when its batch host died (orch/submission.h): every option of the
// submission is replayed (GPUs, memory per CPU, paths with spaces: hole 6), the user's own
// exclusions are kept, credentials never reach the shared file system, and a capture others
// could have planted (another owner, group-writable, a symbolic link) is refused (hole 8).
// Also the pure helpers of the job's end: the failed-start count (the crash-loop budget resets
// when a newer checkpoint appears) and the blame of a localisation. Files in a temp dir only.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "orch/files.h"
#include "orch/job_policy.h"
#include "orch/submission.h"
#include "test_util.h"

namespace ftrain::orch {
namespace {

using ftrain::testing::TempDir;

// `scontrol show job` (multi-line) of a GPU job whose paths hold spaces.
const char* kShowJob = R"(JobId=42 JobName=ftrain llama
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=proj QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:10:00 TimeLimit=1-00:00:00 TimeMin=N/A
   Partition=gpu AllocNode:Sid=login1:445
   ReqNodeList=(null) ExcNodeList=n9
   NodeList=n[1-3]
   BatchHost=n1
   NumNodes=3 NumCPUs=48 NumTasks=24 CPUs/Task=2 ReqB:S:C:T=0:0:*:*
   TRES=cpu=48,mem=96G,node=3,billing=48,gres/gpu=24
   MinCPUsNode=2 MinMemoryCPU=4G MinTmpDiskNode=0
   Features=a100 DelayBoot=00:00:00
   OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null)
   Command=/home/alice/my runs/train.sh
   WorkDir=/home/alice/my runs
   StdErr=/home/alice/my runs/logs/ftrain-42.err
   StdIn=/dev/null
   StdOut=/home/alice/my runs/logs/ftrain-42.out
   TresPerJob=gres:gpu:24
   TresPerTask=gres:gpu:1
   MailUser=alice@example.org MailType=END,FAIL
)";

TEST(ShowJob, PathsKeepTheirSpaces) {
  JobInfo j = ParseShowJob(kShowJob);
  EXPECT_EQ(j.Get("WorkDir"), "/home/alice/my runs");
  EXPECT_EQ(j.Get("StdOut"), "/home/alice/my runs/logs/ftrain-42.out");
  EXPECT_EQ(j.Get("JobState"), "RUNNING");
  EXPECT_EQ(j.Get("Dependency"), "");  // (null)
  EXPECT_EQ(j.Restarts(), 0);
  // The one-line form still parses (a path there is cut at its first space by Slurm itself).
  JobInfo one = ParseShowJob("JobId=42 JobState=PENDING Restarts=2 Reason=BeginTime");
  EXPECT_EQ(one.State(), "PENDING");
  EXPECT_EQ(one.Restarts(), 2);
  // Issue 44, hole 15: `scontrol -o` keeps a value's spaces on its one line; the words after
  // a space belong to it, and a word like "--x=1" is no field.
  JobInfo spaced = ParseShowJob(
      "JobId=43 JobName=ftrain llama JobState=RUNNING Reason=Prolog failed on n1 "
      "Command=/opt/run.sh --steps=5 a b Socks/Node=* Restarts=1");
  EXPECT_EQ(spaced.Get("JobName"), "ftrain llama");
  EXPECT_EQ(spaced.State(), "RUNNING");
  EXPECT_EQ(spaced.Get("Reason"), "Prolog failed on n1");
  EXPECT_EQ(spaced.Get("Command"), "/opt/run.sh --steps=5 a b");
  EXPECT_EQ(spaced.Get("Socks/Node"), "*");
  EXPECT_EQ(spaced.Restarts(), 1);
}

LoadedSubmission Loaded() {
  LoadedSubmission s;
  s.job = ParseShowJob(kShowJob);
  s.env = {"SLURM_JOB_NUM_NODES=3",
           "SLURM_NTASKS_PER_NODE=8",
           "SLURM_CPUS_PER_TASK=2",
           "SLURM_JOB_NAME=ftrain llama",
           "SLURM_JOB_ID=42",
           "SLURM_CONF=/etc/slurm/slurm.conf",
           "SLURM_SUBMIT_DIR=/home/alice/my runs",
           "FTRAIN_SPARE_NODES=1",
           "FTRAIN_KEEP=me",
           "FTRAIN_RESUBMITS=1",
           "SLURMD_NODENAME=n1",
           "ENVIRONMENT=BATCH"};
  for (const auto& kv : s.env) s.vars[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  s.withheld = {"AWS_SECRET_ACCESS_KEY"};
  s.script = "/runs/r/.submit/script";
  return s;
}

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The issue's list: resubmission replays every option, paths with spaces included.
TEST(Resubmit, ReplaysEveryOptionWithPathsAndTheUsersExclusions) {
  auto nj = NewJobOf(Loaded(), "n1", "42", ResubmitExclusions({"n9", "n5"}, {"n5"}, "n1"), false,
                     "/opt/ftrain", {{"AWS_SECRET_ACCESS_KEY", "s3cr3t"}});
  ASSERT_TRUE(nj.ok()) << nj.status().message();
  const auto& o = nj->options;
  for (const std::string want :
       {"--nodes=2", "--ntasks-per-node=8", "--cpus-per-task=2", "--job-name=ftrain llama",
        "--partition=gpu", "--account=proj", "--qos=normal", "--time=1-00:00:00",
        "--chdir=/home/alice/my runs", "--output=/home/alice/my runs/logs/ftrain-%j.out",
        "--error=/home/alice/my runs/logs/ftrain-%j.err", "--constraint=a100", "--mem-per-cpu=4G",
        "--gpus=24", "--gpus-per-task=1", "--exclusive", "--mail-user=alice@example.org",
        "--mail-type=END,FAIL", "--exclude=n9,n1"}) {
    EXPECT_TRUE(Has(o, want)) << want << " missing from the options";
  }
  EXPECT_FALSE(Has(o, "--no-kill"));  // the one spare took the dead host's place: none left
  EXPECT_EQ(nj->cwd, "/home/alice/my runs");
  const auto& e = nj->env;
  for (const std::string want :
       {"FTRAIN_KEEP=me", "SLURM_CONF=/etc/slurm/slurm.conf", "FTRAIN_SPARE_NODES=0",
        "FTRAIN_RESUBMITTED_FROM=42", "FTRAIN_RESUBMITS=2", "FTRAIN_RESUBMIT_EXCLUDED=n1",
        "AWS_SECRET_ACCESS_KEY=s3cr3t", "FTRAIN_HOME=/opt/ftrain"}) {
    EXPECT_TRUE(Has(e, want)) << want << " missing from the environment";
  }
  for (const std::string gone :
       {"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1", "ENVIRONMENT=BATCH", "FTRAIN_RESUBMITS=1"}) {
    EXPECT_FALSE(Has(e, gone)) << gone << " leaked into the new job";
  }
  // Same size: the node count and the spares stay.
  auto same = NewJobOf(Loaded(), "n1", "42", {"n1"}, true, "/opt/ftrain", {});
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(Has(same->options, "--nodes=3"));
  EXPECT_TRUE(Has(same->options, "--no-kill"));
}

TEST(Resubmit, OutputPatternsAndDependencies) {
  EXPECT_EQ(OutputPattern("/r/batch-42.out", "42"), "/r/batch-%j.out");
  EXPECT_EQ(OutputPattern("/r/4242/batch-42.out", "42"), "/r/4242/batch-%j.out");
  EXPECT_EQ(OutputPattern("/r/fixed.out", "42"), "/r/fixed.out");
  EXPECT_EQ(OutputPattern("job-142.out", "42"), "job-142.out");
  EXPECT_EQ(RepointDependency("afterok:42(unfulfilled)", "42", "4242"), "afterok:4242");
  EXPECT_EQ(RepointDependency("afterany:41:42,afterok:142", "42", "4242"),
            "afterany:41:4242,afterok:142");
  EXPECT_FALSE(RepointDependency("afterok:142", "42", "4242"));
  EXPECT_EQ(ResubmitExclusions({}, {}, "n1"), (std::vector<std::string>{"n1"}));
}

TEST(Resubmit, ANewJobThatCanNeverRunIsNoReplacement) {
  EXPECT_TRUE(CanRun(ParseShowJob("JobState=PENDING Reason=Resources")));
  EXPECT_TRUE(CanRun(ParseShowJob("JobState=RUNNING Reason=None")));
  EXPECT_FALSE(CanRun(ParseShowJob("JobState=PENDING Reason=BadConstraints")));
  EXPECT_FALSE(CanRun(ParseShowJob("JobState=FAILED Reason=None")));
}

TEST(Credentials, AreWithheldFromTheCapture) {
  EXPECT_TRUE(IsCredential("AWS_SECRET_ACCESS_KEY"));
  EXPECT_TRUE(IsCredential("AWS_ACCESS_KEY_ID"));
  EXPECT_TRUE(IsCredential("AWS_SESSION_TOKEN"));
  EXPECT_TRUE(IsCredential("HF_TOKEN"));
  EXPECT_TRUE(IsCredential("DB_PASSWORD"));
  EXPECT_FALSE(IsCredential("AWS_REGION"));
  EXPECT_FALSE(IsCredential("FTRAIN_CONFIG"));
}

class Capture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/.submit";
    script_ = tmp_.path() + "/train.sh";
    std::ofstream(script_) << "#!/bin/bash\n#SBATCH --requeue\n";
  }
  Status Write() {
    return CaptureSubmission(
        dir_, kShowJob,
        {"SLURM_JOB_NUM_NODES=3", "AWS_SECRET_ACCESS_KEY=s3cr3t", "FTRAIN_CONFIG=/c.cfg"}, script_);
  }
  TempDir tmp_;
  std::string dir_, script_;
};

// Hole 8: no credential on the shared file system; private modes.
TEST_F(Capture, WritesPrivateFilesWithoutCredentials) {
  ASSERT_TRUE(Write().ok());
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const char* f : {"job", "env", "env.withheld", "script"}) {
    ASSERT_EQ(stat((dir_ + "/" + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  const std::string env = ReadTextOr(dir_ + "/env");
  EXPECT_EQ(env.find("s3cr3t"), std::string::npos);
  EXPECT_NE(env.find("FTRAIN_CONFIG=/c.cfg"), std::string::npos);
  auto loaded = LoadSubmission(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->withheld, std::vector<std::string>{"AWS_SECRET_ACCESS_KEY"});
  EXPECT_EQ(loaded->job.Get("WorkDir"), "/home/alice/my runs");
}

// Hole 8: a capture others could have written or redirected is never replayed.
TEST_F(Capture, ACaptureOthersControlIsRefused) {
  ASSERT_TRUE(Write().ok());
  ASSERT_EQ(chmod((dir_ + "/env").c_str(), 0660), 0);
  auto s = LoadSubmission(dir_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("has mode 0660"), std::string::npos) << s.status().message();
  ASSERT_EQ(chmod((dir_ + "/env").c_str(), 0600), 0);
  // A link in place of a file (to someone else's script, say) is not followed.
  ASSERT_EQ(unlink((dir_ + "/script").c_str()), 0);
  ASSERT_EQ(symlink(script_.c_str(), (dir_ + "/script").c_str()), 0);
  s = LoadSubmission(dir_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("symbolic link is never followed"), std::string::npos);
  ASSERT_TRUE(Write().ok());  // the capture replaces the link itself, not its target
  struct stat st {};
  ASSERT_EQ(lstat((dir_ + "/script").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  if (getuid() == 0) {  // another owner (root can make one)
    ASSERT_EQ(chown((dir_ + "/job").c_str(), 65534, 65534), 0);
    s = LoadSubmission(dir_);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("belongs to uid 65534"), std::string::npos);
  }
}

// Hole 8: the secret is written without following a link planted in its place.
TEST_F(Capture, APrivateFileReplacesALinkNotItsTarget) {
  const std::string target = tmp_.path() + "/victim";
  std::ofstream(target) << "keep me";
  const std::string secret = tmp_.path() + "/.ckptd-secret";
  ASSERT_EQ(symlink(target.c_str(), secret.c_str()), 0);
  ASSERT_TRUE(WritePrivate(secret, "abc").ok());
  EXPECT_EQ(ReadTextOr(target), "keep me");
  struct stat st {};
  ASSERT_EQ(lstat(secret.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// The issue's list: the crash-loop budget resets when a newer checkpoint appears.
TEST(FailedStarts, TheBudgetResetsWhenANewerCheckpointAppears) {
  EXPECT_EQ(NextFailedStartCount("", "step-00000020"), 1);
  EXPECT_EQ(NextFailedStartCount("step-00000020 1\n", "step-00000020"), 2);
  EXPECT_EQ(NextFailedStartCount("step-00000020 2\n", "step-00000025"), 1);
  EXPECT_EQ(NextFailedStartCount("none 2\n", "none"), 3);
  EXPECT_EQ(NextFailedStartCount("step-00000020 x\n", "step-00000020"), 1);
}

TEST(Localise, BlamesTheNodeThatFailsAloneOrWithBothNeighbours) {
  const std::vector<std::string> n{"n1", "n2", "n3", "n4"};
  EXPECT_EQ(BlameNodes(n, {true, false, true, true}, {}), std::vector<std::string>{"n2"});
  // Every node passes alone; pairs (n1,n2) and (n2,n3) fail: n2's port.
  EXPECT_EQ(BlameNodes(n, {true, true, true, true}, {false, false, true, true}),
            std::vector<std::string>{"n2"});
  // Every pair fails: the network, no node.
  EXPECT_TRUE(BlameNodes(n, {true, true, true, true}, {false, false, false, false}).empty());
  // Two nodes: the pair is the job; no node to blame.
  EXPECT_TRUE(BlameNodes({"n1", "n2"}, {true, true}, {}).empty());
  // Every node fails alone: the software or a setting, never "exclude the allocation".
  EXPECT_TRUE(BlameNodes(n, {false, false, false, false}, {}).empty());
  EXPECT_TRUE(BlameNodes({"n1"}, {false}, {}).empty());
}

}  // namespace
}  // namespace ftrain::orch
