// The moto S3 server for the checkpoint-on-S3 tests (ckpt_s3_test, ckpt_s3_train_test): one
// server per test binary (a gtest Environment) with the bucket kBucket made by boto3, AWS_*
// pointed at it; child processes that die with the test; the fault-injecting proxy
// (tests/s3_fault_proxy.py) in front of it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace ftrain::testing {

constexpr const char* kS3Bucket = "ftrain-ckpt";

// The server's endpoint (http://127.0.0.1:PORT), once the environment is up.
const std::string& MotoEndpoint();

// Registers the environment; call once per binary (a static initializer does it).
bool RegisterMotoEnvironment();

// A child running argv (PR_SET_PDEATHSIG, PYTHONPATH for moto), output to `log`.
int SpawnChild(const std::vector<std::string>& argv, const std::string& log);

// The fault proxy in front of moto with `flags`, its files in `dir`: endpoint and pid.
std::pair<std::string, int> StartS3Proxy(const TempDir& dir, const std::vector<std::string>& flags);

}  // namespace ftrain::testing
