// RUN/hangs.jsonl's line: writer and readers (hangs.h).
#include "records/hangs.h"

#include <nlohmann/json.hpp>

#include "records/json_lines.h"
#include "records/lenient_json.h"

namespace ftrain::records {

using nlohmann::json;

std::string EncodeHang(const HangRecord& h) {
  json j = {{"time", h.time},
            {"step", h.step},
            {"rank", h.rank},
            {"node", h.node},
            {"host", h.host},
            {"phase", h.phase},
            {"stuck_s", h.stuck_s},
            {"threshold_s", h.threshold_s},
            {"detected_by", h.detected_by},
            {"generation", h.generation},
            {"launched", h.launched}};
  if (!h.job.empty()) j["job"] = h.job;
  return j.dump();
}

Status AppendHang(const std::string& path, const HangRecord& h) {
  return AppendJsonLine(path, EncodeHang(h));
}

StatusOr<std::vector<HangRecord>> ReadHangsFile(const std::string& path,
                                                std::vector<std::string>* warnings, Env* env) {
  std::vector<std::pair<int, json>> lines;
  FT_RETURN_IF_ERROR(ReadJsonLines(path, &lines, warnings, env));
  std::vector<HangRecord> out;
  for (const auto& [no, j] : lines) {
    const std::string where = path + ":" + std::to_string(no);
    HangRecord h;
    FT_RETURN_IF_ERROR(ReadField(j, "time", true, where, &h.time));
    FT_RETURN_IF_ERROR(ReadField(j, "rank", true, where, &h.rank));
    FT_RETURN_IF_ERROR(ReadField(j, "host", false, where, &h.host));
    FT_RETURN_IF_ERROR(ReadField(j, "node", false, where, &h.node));
    FT_RETURN_IF_ERROR(ReadField(j, "step", false, where, &h.step));
    FT_RETURN_IF_ERROR(ReadField(j, "phase", false, where, &h.phase));
    FT_RETURN_IF_ERROR(ReadField(j, "stuck_s", false, where, &h.stuck_s));
    FT_RETURN_IF_ERROR(ReadField(j, "threshold_s", false, where, &h.threshold_s));
    FT_RETURN_IF_ERROR(ReadField(j, "detected_by", false, where, &h.detected_by));
    FT_RETURN_IF_ERROR(ReadField(j, "generation", false, where, &h.generation));
    FT_RETURN_IF_ERROR(ReadField(j, "launched", false, where, &h.launched));
    FT_RETURN_IF_ERROR(ReadField(j, "job", false, where, &h.job));
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<HangRecord> ParseHangsText(const std::string& text, int* skipped) {
  std::vector<HangRecord> out;
  for (const json& j : HostObjects(text, skipped)) {
    HangRecord h;
    ReadLenient(j, "host", &h.host);
    ReadLenient(j, "step", &h.step);
    ReadLenient(j, "rank", &h.rank);
    ReadLenient(j, "node", &h.node);
    ReadLenient(j, "time", &h.time);
    ReadLenient(j, "phase", &h.phase);
    ReadLenient(j, "stuck_s", &h.stuck_s);
    ReadLenient(j, "threshold_s", &h.threshold_s);
    ReadLenient(j, "detected_by", &h.detected_by);
    ReadLenient(j, "generation", &h.generation);
    ReadLenient(j, "launched", &h.launched);
    ReadLenient(j, "job", &h.job);
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace ftrain::records
