// RUN/quarantine.jsonl's line: writer and readers (quarantine.h).
#include "records/quarantine.h"

#include <nlohmann/json.hpp>

#include "records/json_lines.h"
#include "records/lenient_json.h"

namespace ftrain::records {

using nlohmann::json;

std::string EncodeQuarantine(const QuarantineRecord& q) {
  json j = {{"time", q.time}, {"host", q.host}};
  if (q.node >= 0) j["node"] = q.node;
  if (q.rank >= 0) j["rank"] = q.rank;
  if (q.shard >= 0) j["shard"] = q.shard;
  if (q.step >= 0) j["step"] = q.step;
  for (const Field& f : q.fields) {
    json v = json::parse(f.json, nullptr, false);
    if (!v.is_discarded()) j[f.key] = v;  // a field that is not JSON is the writer's bug: left out
  }
  j["cause"] = q.cause;
  j["by_majority"] = q.by_majority;
  if (!q.job.empty()) j["job"] = q.job;
  return j.dump();
}

Status AppendQuarantine(const std::string& path, const QuarantineRecord& q) {
  return AppendJsonLine(path, EncodeQuarantine(q));
}

StatusOr<std::vector<QuarantineRecord>> ReadQuarantineFile(const std::string& path,
                                                           std::vector<std::string>* warnings,
                                                           Env* env) {
  std::vector<std::pair<int, json>> lines;
  FT_RETURN_IF_ERROR(ReadJsonLines(path, &lines, warnings, env));
  std::vector<QuarantineRecord> out;
  for (const auto& [no, j] : lines) {
    const std::string where = path + ":" + std::to_string(no);
    QuarantineRecord q;
    FT_RETURN_IF_ERROR(ReadField(j, "time", true, where, &q.time));
    FT_RETURN_IF_ERROR(ReadField(j, "host", true, where, &q.host));
    FT_RETURN_IF_ERROR(ReadField(j, "cause", false, where, &q.cause));
    FT_RETURN_IF_ERROR(ReadField(j, "node", false, where, &q.node));
    FT_RETURN_IF_ERROR(ReadField(j, "rank", false, where, &q.rank));
    FT_RETURN_IF_ERROR(ReadField(j, "shard", false, where, &q.shard));
    FT_RETURN_IF_ERROR(ReadField(j, "step", false, where, &q.step));
    FT_RETURN_IF_ERROR(ReadField(j, "job", false, where, &q.job));
    q.by_majority =
        j.contains("by_majority") && j["by_majority"].is_boolean() && j["by_majority"].get<bool>();
    out.push_back(std::move(q));
  }
  return out;
}

std::vector<QuarantineRecord> ParseQuarantineText(const std::string& text, int* skipped) {
  std::vector<QuarantineRecord> out;
  for (const json& j : HostObjects(text, skipped)) {
    QuarantineRecord q;
    ReadLenient(j, "host", &q.host);
    ReadLenient(j, "cause", &q.cause);
    ReadLenient(j, "step", &q.step);
    ReadLenient(j, "rank", &q.rank);
    ReadLenient(j, "by_majority", &q.by_majority);
    ReadLenient(j, "time", &q.time);
    ReadLenient(j, "node", &q.node);
    ReadLenient(j, "shard", &q.shard);
    ReadLenient(j, "job", &q.job);
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace ftrain::records
