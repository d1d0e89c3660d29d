// Appending RUN/node_faults.jsonl (node_faults.h).
#include "records/node_faults.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/run_layout.h"
#include "records/json_lines.h"

namespace ftrain::records {
NodeFaultWho NodeFaultWhoOf(const LaunchContext& launch) {
  NodeFaultWho w;
  w.host = launch.node_name;
  w.node = launch.node_index;
  w.rank = launch.rank;
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

Status RecordNodeFault(const std::string& run_dir, const LaunchContext& launch,
                       const std::string& reason, Env* env) {
  if (run_dir.empty() || !env->IsDirectory(run_dir)) return Status::Ok();
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return AppendJsonLine(RunLayout(run_dir).node_faults(),
                        EncodeNodeFault(now, NodeFaultWhoOf(launch), reason));
}

}  // namespace ftrain::records
