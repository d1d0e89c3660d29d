// RUN/rollbacks.jsonl: its writer and strict reader (rollbacks.h).
#include "records/rollbacks.h"

#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/run_layout.h"
#include "records/json_lines.h"

namespace ftrain::records {

StatusOr<std::vector<RollbackRecord>> ReadRollbacks(const std::string& run_dir) {
  const std::string path = RunLayout(run_dir).rollbacks();
  std::vector<std::pair<int, nlohmann::json>> lines;
  std::vector<std::string> warnings;
  FT_RETURN_IF_ERROR(ReadJsonLines(path, &lines, &warnings));
  std::vector<RollbackRecord> out;
  for (const auto& [n, j] : lines) {
    const std::string where = path + ":" + std::to_string(n);
    RollbackRecord r;
    FT_RETURN_IF_ERROR(ReadField(j, "step", true, where, &r.step));
    FT_RETURN_IF_ERROR(ReadField(j, "reason", true, where, &r.reason));
    FT_RETURN_IF_ERROR(ReadField(j, "resumed_from", false, where, &r.resumed_from));
    FT_RETURN_IF_ERROR(ReadField(j, "grad_norm", false, where, &r.grad_norm));
    if (r.step < 1) return Status::Corruption(where + ": field 'step' must be >= 1");
    out.push_back(r);
  }
  return out;
}

Status AppendRollback(const std::string& run_dir, const RollbackRecord& r, double grad_norm) {
  nlohmann::json j = {{"time", static_cast<double>(std::time(nullptr))},
                      {"step", r.step},
                      {"reason", r.reason},
                      {"resumed_from", r.resumed_from}};
  if (std::isfinite(grad_norm)) j["grad_norm"] = grad_norm;
  return AppendJsonLine(RunLayout(run_dir).rollbacks(), j.dump());
}

}  // namespace ftrain::records
