// LaunchContext::FromEnvironment: the one place the launch facts are read from the environment.
#include "records/launch_context.h"

#include <unistd.h>

#include <cstdlib>

namespace ftrain::records {
namespace {

// A non-negative integer, else -1 (unset, empty or not a number).
int64_t Index(const char* v, int64_t limit) {
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < limit) ? x : -1;
}

std::string Str(const char* v) { return v == nullptr ? std::string() : std::string(v); }

}  // namespace

LaunchContext LaunchContext::FromLookup(const Lookup& getenv) {
  LaunchContext c;
  c.job_id = Str(getenv("SLURM_JOB_ID"));
  c.node_name = Str(getenv("SLURMD_NODENAME"));
  if (c.node_name.empty()) {
    char buf[256] = {};
    // Without a host name the records still say what happened; readers skip an empty host.
    if (::gethostname(buf, sizeof(buf) - 1) == 0) c.node_name = buf;
  }
  c.short_host = c.node_name.substr(0, c.node_name.find('.'));
  c.node_index = static_cast<int>(Index(getenv("SLURM_NODEID"), 1LL << 30));
  c.rank = static_cast<int>(Index(getenv("RANK"), 1LL << 30));
  if (c.rank < 0) c.rank = static_cast<int>(Index(getenv("SLURM_PROCID"), 1LL << 30));
  const int64_t epoch = Index(getenv("FTRAIN_FENCE_EPOCH"), 1000000000000000LL);
  c.fence_epoch = epoch > 0 ? epoch : 0;
  const std::string spool = Str(getenv("FTRAIN_RECORDS_SPOOL"));
  c.records_spool = !spool.empty();
  c.ckptd_node = Str(getenv("FTRAIN_CKPTD_NODE"));
  return c;
}

LaunchContext LaunchContext::FromEnvironment() {
  return FromLookup([](const char* name) { return std::getenv(name); });
}

}  // namespace ftrain::records
