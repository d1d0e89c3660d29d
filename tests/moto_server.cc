// The moto S3 server environment and the fault proxy (moto_server.h).
#include "moto_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

namespace ftrain::testing {
namespace {

namespace fs = std::filesystem;

struct Moto {
  int pid = -1;
  std::string endpoint;
  std::unique_ptr<TempDir> dir;
};
Moto* moto = nullptr;

std::string Q(const std::string& s) { return "'" + s + "'"; }

class MotoEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    moto = new Moto;
    moto->dir = std::make_unique<TempDir>("ftrain-ckpt-s3");
    ASSERT_TRUE(fs::exists(std::string(FTRAIN_MOTO_PYTHONPATH) + "/moto/server.py"))
        << FTRAIN_MOTO_PYTHONPATH << " holds no moto: run scripts/install-deps.sh";
    const int port = FreePort();
    moto->endpoint = "http://127.0.0.1:" + std::to_string(port);
    moto->pid =
        SpawnChild({"python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", std::to_string(port)},
                   (*moto->dir) / "moto.log");
    ASSERT_GT(moto->pid, 0);
    auto r = RunCommand("PYTHONPATH=" + Q(FTRAIN_MOTO_PYTHONPATH) +
                            " python3 -c \"import boto3,time\n"
                            "for i in range(300):\n"
                            "  try:\n"
                            "    boto3.client('s3', endpoint_url='" +
                            moto->endpoint +
                            "', region_name='us-east-1', aws_access_key_id='k', "
                            "aws_secret_access_key='s').create_bucket(Bucket='" +
                            kS3Bucket +
                            "'); break\n"
                            "  except Exception: time.sleep(0.1)\"",
                        60);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ::setenv("AWS_ENDPOINT_URL", moto->endpoint.c_str(), 1);
    ::setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "secret/for+tests", 1);
    ::unsetenv("AWS_PROFILE");
    ::unsetenv("AWS_SESSION_TOKEN");
  }
  void TearDown() override {
    if (moto != nullptr && moto->pid > 0) SignalAndReap(moto->pid, SIGKILL);
    delete moto;
    moto = nullptr;
  }
};

}  // namespace

const std::string& MotoEndpoint() { return moto->endpoint; }

bool RegisterMotoEnvironment() {
  ::testing::AddGlobalTestEnvironment(new MotoEnv);
  return true;
}

int SpawnChild(const std::vector<std::string>& argv, const std::string& log) {
  const int pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed test binary leaves nothing behind
    ::setenv("PYTHONPATH", FTRAIN_MOTO_PYTHONPATH, 1);
    ::setenv("S3_UPLOAD_PART_MIN_SIZE", "4096", 1);  // moto: small parts in the tests
    FILE* f = std::fopen(log.c_str(), "w");
    ::dup2(fileno(f), 1);
    ::dup2(fileno(f), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::pair<std::string, int> StartS3Proxy(const TempDir& dir,
                                         const std::vector<std::string>& flags) {
  const std::string port_file = dir / "proxy.port";
  std::vector<std::string> argv = {"python3",
                                   std::string(FTRAIN_SOURCE_DIR) + "/tests/s3_fault_proxy.py",
                                   moto->endpoint, port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const int pid = SpawnChild(argv, dir / "proxy.log");
  for (int i = 0; i < 300 && !fs::exists(port_file); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {"http://127.0.0.1:" + ReadFile(port_file), pid};
}

}  // namespace ftrain::testing
