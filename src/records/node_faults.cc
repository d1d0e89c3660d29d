// Appending RUN/node_faults.jsonl (node_faults.h).
#include "records/node_faults.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/run_layout.h"
#include "records/json_lines.h"

namespace ftrain::records {
namespace {

// A non-negative integer environment variable, else -1 (unset or not a number).
int EnvIndex(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1L << 30)) ? static_cast<int>(x) : -1;
}

}  // namespace

NodeFaultWho NodeFaultWhoFromEnv() {
  NodeFaultWho w;
  if (const char* n = std::getenv("SLURMD_NODENAME"); n != nullptr && *n != '\0') {
    w.host = n;
  } else {
    char buf[256] = {};
    // Without a host name the line still says what failed; the controller skips it.
    if (::gethostname(buf, sizeof(buf) - 1) == 0) w.host = buf;
  }
  w.node = EnvIndex("SLURM_NODEID");
  w.rank = EnvIndex("RANK");
  if (w.rank < 0) w.rank = EnvIndex("SLURM_PROCID");
  return w;
}

std::string EncodeNodeFault(double time, const NodeFaultWho& who, const std::string& reason) {
  nlohmann::ordered_json j;  // the fields in the documented order
  j["time"] = time;
  j["host"] = who.host;
  if (who.node >= 0) j["node"] = who.node;
  if (who.rank >= 0) j["rank"] = who.rank;
  j["reason"] = reason;
  // A reason that is not UTF-8 (a driver's message) is written with U+FFFD, never refused.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status RecordNodeFault(const std::string& run_dir, const std::string& reason) {
  if (run_dir.empty() || !Env::Default()->IsDirectory(run_dir)) return Status::Ok();
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return AppendJsonLine(RunLayout(run_dir).node_faults(),
                        EncodeNodeFault(now, NodeFaultWhoFromEnv(), reason));
}

}  // namespace ftrain::records
