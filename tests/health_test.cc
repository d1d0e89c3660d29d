// `ftrain health` (src/cli/cmd_health.cc), the job controller's per-node probe: a writable run
// directory and enough GPU device files pass; a read-only or missing run directory, or fewer
// GPUs than asked for (a stand-in /dev), fail with exit 1 and name the problem; a bad command
// line is exit 2. No Slurm, no GPU.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace ftrain {
namespace {

namespace fs = std::filesystem;

int Health(std::vector<std::string> args, std::string* err = nullptr) {
  args.insert(args.begin(), "health");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::testing::internal::CaptureStderr();
  const int rc = cli::RunHealth(static_cast<int>(args.size()), argv.data());
  const std::string e = ::testing::internal::GetCapturedStderr();
  if (err != nullptr) *err = e;
  return rc;
}

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("health_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(run());
    fs::create_directories(dev());
    for (const char* f : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"}) {
      std::ofstream(dev() + "/" + f) << "";
    }
  }
  void TearDown() override {
    fs::permissions(run(), fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(root_);
  }
  std::string run() const { return (root_ / "run").string(); }
  std::string dev() const { return (root_ / "dev").string(); }
  fs::path root_;
};

TEST_F(HealthTest, AWritableRunDirAndEnoughGpusPassAndLeaveNothingBehind) {
  std::string err;
  EXPECT_EQ(Health({"--run-dir", run(), "--gpus", "2", "--dev-dir", dev()}, &err), 0) << err;
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_TRUE(fs::is_empty(run()));            // the probe file was removed
  EXPECT_EQ(Health({"--run-dir", run()}), 0);  // a CPU job: no GPU asked for
}

TEST_F(HealthTest, FewerGpusThanTheNodesRanksFailNamingTheCount) {
  std::string err;
  EXPECT_EQ(Health({"--run-dir", run(), "--gpus", "4", "--dev-dir", dev()}, &err), 1);
  EXPECT_NE(err.find("GPUs: 2 visible"), std::string::npos) << err;
  EXPECT_EQ(err.rfind("ftrain health: node ", 0), 0u) << err;  // what the controller parses
  EXPECT_NE(err.find("need 4"), std::string::npos) << err;
  fs::remove_all(dev());
  fs::create_directories(dev());  // the driver not loaded: no device file at all
  EXPECT_EQ(Health({"--run-dir", run(), "--gpus", "1", "--dev-dir", dev()}, &err), 1);
  EXPECT_NE(err.find("GPUs: 0 visible"), std::string::npos) << err;
}

TEST_F(HealthTest, AnUnwritableOrMissingRunDirFails) {
  std::string err;
  EXPECT_EQ(Health({"--run-dir", (root_ / "nowhere").string()}, &err), 1);
  EXPECT_NE(err.find("is not writable"), std::string::npos) << err;
  if (::geteuid() != 0) {  // root writes anywhere
    fs::permissions(run(), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_EQ(Health({"--run-dir", run()}, &err), 1);
    EXPECT_NE(err.find("is not writable"), std::string::npos) << err;
  }
}

TEST_F(HealthTest, ALinkInPlaceOfTheProbeFileIsNotFollowed) {
  // O_EXCL | O_NOFOLLOW: a link planted under the probe's name fails the check, its target
  // stays untouched.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::string target = (root_ / "target").string();
  std::ofstream(target) << "keep";
  // The probe's name carries the pid of this process (RunHealth runs in it).
  fs::create_symlink(target, run() + "/.health-" + host + "-" + std::to_string(::getpid()));
  std::string err;
  EXPECT_EQ(Health({"--run-dir", run()}, &err), 1);
  std::ifstream in(target);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "keep");
}

TEST_F(HealthTest, ABadCommandLineIsAUsageError) {
  EXPECT_EQ(Health({}), 2);
  EXPECT_EQ(Health({"--run-dir", run(), "--gpus", "two"}), 2);
  EXPECT_EQ(Health({"--run-dir", run(), "--bogus"}), 2);
}

}  // namespace
}  // namespace ftrain
