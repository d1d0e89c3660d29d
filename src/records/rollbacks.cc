// RUN/rollbacks.jsonl: its writer and strict reader (rollbacks.h).
#include "records/rollbacks.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/run_layout.h"
#include "records/json_lines.h"

namespace ftrain::records {
namespace {

// The fields of one line after its version: a version 1 line is a rollback without "kind".
Status ParseLine(const nlohmann::json& j, const std::string& where, RollbackRecord* r) {
  std::string kind = "rollback";
  FT_RETURN_IF_ERROR(ReadField(j, "kind", r->version >= 2, where, &kind));
  FT_RETURN_IF_ERROR(ReadField(j, "step", true, where, &r->step));
  FT_RETURN_IF_ERROR(ReadField(j, "resumed_from", false, where, &r->resumed_from));
  if (r->step < 1) return Status::Corruption(where + ": field 'step' must be >= 1");
  if (kind == "rollback") {
    r->kind = RollbackKind::kRollback;
    FT_RETURN_IF_ERROR(ReadField(j, "reason", true, where, &r->reason));
    return ReadField(j, "grad_norm", false, where, &r->grad_norm);
  }
  if (kind != "applied") {
    return Status::Corruption(where + ": field 'kind' is '" + kind +
                              "', not 'rollback' or 'applied'");
  }
  r->kind = RollbackKind::kApplied;
  FT_RETURN_IF_ERROR(ReadField(j, "first", true, where, &r->first));
  FT_RETURN_IF_ERROR(ReadField(j, "last", true, where, &r->last));
  if (r->first < 1 || r->last < r->first) {
    return Status::Corruption(where + ": fields 'first' (" + std::to_string(r->first) +
                              ") and 'last' (" + std::to_string(r->last) +
                              ") must name a range 1 <= first <= last");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<RollbackRecord>> ReadRollbacks(const std::string& run_dir, Env* env) {
  const std::string path = RunLayout(run_dir).rollbacks();
  std::vector<std::pair<int, nlohmann::json>> lines;
  std::vector<std::string> warnings;
  FT_RETURN_IF_ERROR(ReadJsonLines(path, &lines, &warnings, env));
  std::vector<RollbackRecord> out;
  for (const auto& [n, j] : lines) {
    const std::string where = path + ":" + std::to_string(n);
    RollbackRecord r;
    r.version = 1;
    FT_RETURN_IF_ERROR(ReadField(j, "v", false, where, &r.version));
    if (r.version < 1 || r.version > kRollbacksVersion) {
      return Status::Corruption(where + ": field 'v' is " + std::to_string(r.version) +
                                "; this ftrain reads versions 1 to " +
                                std::to_string(kRollbacksVersion) +
                                " (a newer ftrain wrote it: run that one)");
    }
    FT_RETURN_IF_ERROR(ParseLine(j, where, &r));
    out.push_back(r);
  }
  return out;
}

Status AppendRollback(const std::string& run_dir, const RollbackRecord& r, double grad_norm) {
  nlohmann::json j = {{"v", kRollbacksVersion}, {"time", static_cast<double>(std::time(nullptr))},
                      {"kind", "rollback"},     {"step", r.step},
                      {"reason", r.reason},     {"resumed_from", r.resumed_from}};
  if (std::isfinite(grad_norm)) j["grad_norm"] = grad_norm;
  return AppendJsonLine(RunLayout(run_dir).rollbacks(), j.dump());
}

Status AppendAppliedRollback(const std::string& run_dir, const RollbackRecord& applied) {
  const nlohmann::json j = {{"v", kRollbacksVersion},
                            {"time", static_cast<double>(std::time(nullptr))},
                            {"kind", "applied"},
                            {"step", applied.step},
                            {"first", applied.first},
                            {"last", applied.last},
                            {"resumed_from", applied.resumed_from}};
  return AppendJsonLine(RunLayout(run_dir).rollbacks(), j.dump());
}

int CountRollbacks(const std::vector<RollbackRecord>& records) {
  return static_cast<int>(std::count_if(records.begin(), records.end(), [](const auto& r) {
    return r.kind == RollbackKind::kRollback;
  }));
}

}  // namespace ftrain::records
