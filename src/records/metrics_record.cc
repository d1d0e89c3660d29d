// Writing and reading metrics.jsonl records (metrics_record.h).
#include "records/metrics_record.h"

#include <cmath>
#include <cstdio>

#include "records/json_lines.h"

namespace ftrain::records {

namespace {
// %.9g, or null for a value JSON cannot hold (a skipped step's NaN loss).
std::string Num9g(double v) {
  if (!std::isfinite(v)) return "null";
  char num[40];
  std::snprintf(num, sizeof(num), "%.9g", v);
  return num;
}
}  // namespace

std::string FormatMetricsLine(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"step_time_s\":%.6f,"
                "\"tokens_per_s\":%.1f,\"data_wait_s\":%.6f,\"comm_s\":%.6f,\"ckpt_stall_s\":%.6f,"
                "\"restart_count\":%lld,\"tokens\":%lld,\"time\":%.3f",
                static_cast<long long>(m.step), Num9g(m.loss).c_str(), m.lr,
                Num9g(m.grad_norm).c_str(), m.step_time_s, m.tokens_per_s, m.data_wait_s, m.comm_s,
                m.ckpt_stall_s, static_cast<long long>(m.restart_count),
                static_cast<long long>(m.tokens), m.unix_time);
  std::string line = buf;
  auto optional = [&line](const char* key, const std::optional<double>& v, const char* format) {
    if (!v) return;
    char num[64];
    std::snprintf(num, sizeof(num), format, *v);
    line += std::string(",\"") + key + "\":" + num;
  };
  optional("gpu_util", m.gpu_util, "%.0f");
  optional("gpu_mem_gb", m.gpu_mem_gb, "%.3f");
  optional("gpu_alloc_peak_gb", m.gpu_alloc_peak_gb, "%.3f");
  optional("gpu_reserved_peak_gb", m.gpu_reserved_peak_gb, "%.3f");
  optional("gpu_alloc_retries", m.gpu_alloc_retries, "%.0f");
  optional("tokens_per_s_per_gpu", m.tokens_per_s_per_gpu, "%.1f");
  optional("mfu", m.mfu, "%.4f");
  optional("mfu_attn", m.mfu_attn, "%.4f");
  optional("scaling_efficiency", m.scaling_efficiency, "%.4f");
  optional("eval_loss", m.eval_loss, "%.9g");
  optional("eval_s", m.eval_s, "%.6f");
  optional("data_reads", m.data_reads, "%.0f");
  optional("data_read_p50_s", m.data_read_p50_s, "%.6f");
  optional("data_read_p95_s", m.data_read_p95_s, "%.6f");
  if (!m.skipped.empty()) line += ",\"skipped\":\"" + m.skipped + "\"";
  if (m.phases) line += PhaseSummaryJson(*m.phases);
  return line + "}";
}

StatusOr<StepMetrics> ParseMetricsRecord(const nlohmann::json& j, const std::string& where,
                                         std::vector<Straggler>* named) {
  StepMetrics s;
  FT_RETURN_IF_ERROR(ReadField(j, "step", true, where, &s.step));
  FT_RETURN_IF_ERROR(
      ReadField(j, j.contains("time") ? "time" : "unix_time", true, where, &s.unix_time));
  FT_RETURN_IF_ERROR(ReadField(j, "step_time_s", true, where, &s.step_time_s));
  FT_RETURN_IF_ERROR(ReadField(j, "loss", false, where, &s.loss));
  FT_RETURN_IF_ERROR(ReadField(j, "lr", false, where, &s.lr));
  FT_RETURN_IF_ERROR(ReadField(j, "grad_norm", false, where, &s.grad_norm));
  FT_RETURN_IF_ERROR(ReadField(j, "tokens_per_s", false, where, &s.tokens_per_s));
  FT_RETURN_IF_ERROR(ReadField(j, "data_wait_s", false, where, &s.data_wait_s));
  FT_RETURN_IF_ERROR(ReadField(j, "comm_s", false, where, &s.comm_s));
  FT_RETURN_IF_ERROR(ReadField(j, "ckpt_stall_s", false, where, &s.ckpt_stall_s));
  FT_RETURN_IF_ERROR(ReadField(j, "restart_count", false, where, &s.restart_count));
  FT_RETURN_IF_ERROR(ReadField(j, "tokens", false, where, &s.tokens));
  FT_RETURN_IF_ERROR(ReadField(j, "skipped", false, where, &s.skipped));
  if (j.contains("loss") && j["loss"].is_null()) s.loss = std::nanf("");
  if (j.contains("grad_norm") && j["grad_norm"].is_null()) s.grad_norm = std::nan("");
  for (const auto& [key, field] :
       {std::pair<const char*, std::optional<double>*>{"gpu_util", &s.gpu_util},
        {"gpu_mem_gb", &s.gpu_mem_gb},
        {"gpu_alloc_peak_gb", &s.gpu_alloc_peak_gb},
        {"gpu_reserved_peak_gb", &s.gpu_reserved_peak_gb},
        {"gpu_alloc_retries", &s.gpu_alloc_retries},
        {"tokens_per_s_per_gpu", &s.tokens_per_s_per_gpu},
        {"mfu", &s.mfu},
        {"mfu_attn", &s.mfu_attn},
        {"scaling_efficiency", &s.scaling_efficiency},
        {"eval_loss", &s.eval_loss},
        {"eval_s", &s.eval_s},
        {"data_reads", &s.data_reads},
        {"data_read_p50_s", &s.data_read_p50_s},
        {"data_read_p95_s", &s.data_read_p95_s}}) {
    FT_RETURN_IF_ERROR(ReadOptField(j, key, where, field));
  }
  if (s.step_time_s < 0 || !std::isfinite(s.unix_time)) {
    return Status::Corruption(where + ": negative step_time_s or a time that is not finite");
  }
  FT_RETURN_IF_ERROR(ParsePhaseMembers(j, where, s.step, &s.phases, named));
  return s;
}

}  // namespace ftrain::records
