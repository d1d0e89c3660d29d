// metrics.jsonl writing.
#include "train/telemetry/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/env.h"
#include "core/run_layout.h"
#include "train/telemetry/step_phases.h"

namespace ftrain::train {

std::string FormatMetricsLine(const StepMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"step_time_s\":%.6f,"
                "\"tokens_per_s\":%.1f,\"data_wait_s\":%.6f,\"comm_s\":%.6f,\"ckpt_stall_s\":%.6f,"
                "\"restart_count\":%lld,\"tokens\":%lld,\"time\":%.3f",
                static_cast<long long>(m.step), m.loss, m.lr, m.grad_norm, m.step_time_s,
                m.tokens_per_s, m.data_wait_s, m.comm_s, m.ckpt_stall_s,
                static_cast<long long>(m.restart_count), static_cast<long long>(m.tokens),
                m.unix_time);
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
  optional("scaling_efficiency", m.scaling_efficiency, "%.4f");
  optional("eval_loss", m.eval_loss, "%.9g");
  optional("eval_s", m.eval_s, "%.6f");
  optional("data_reads", m.data_reads, "%.0f");
  optional("data_read_p50_s", m.data_read_p50_s, "%.6f");
  optional("data_read_p95_s", m.data_read_p95_s, "%.6f");
  if (m.phases) line += PhaseSummaryJson(*m.phases);
  return line + "}";
}

void SetReadLatency(std::vector<float> latencies, StepMetrics* m) {
  if (latencies.empty()) return;
  const size_t n = latencies.size();
  auto nearest_rank = [&latencies, n](double q) {
    const size_t k =
        std::min(n - 1, static_cast<size_t>(std::ceil(q * static_cast<double>(n))) - 1);
    std::nth_element(latencies.begin(), latencies.begin() + static_cast<std::ptrdiff_t>(k),
                     latencies.end());
    return static_cast<double>(latencies[k]);
  };
  m->data_reads = static_cast<double>(n);
  m->data_read_p50_s = nearest_rank(0.50);
  m->data_read_p95_s = nearest_rank(0.95);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path,
                                                             int64_t truncate_after_step,
                                                             const std::string& resume_line) {
  // Keep only lines of steps <= truncate_after_step (a resumed run rewrites the rest).
  std::ifstream in(path);
  std::string kept;
  bool have_last = false;
  if (in) {
    std::string line;
    while (std::getline(in, line)) {
      const auto pos = line.find("\"step\":");
      if (pos == std::string::npos) continue;
      const long long step = std::atoll(line.c_str() + pos + 7);
      if (step <= truncate_after_step && !line.empty() && line.back() == '}') {
        kept += line + "\n";
        have_last = have_last || step == truncate_after_step;
      }
    }
  }
  if (!have_last && !resume_line.empty()) kept += resume_line + "\n";
  std::unique_ptr<MetricsWriter> w(new MetricsWriter());
  w->path_ = path;
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return Status::IOError("cannot create metrics file '" + tmp + "': " + std::strerror(errno));
  }
  std::fwrite(kept.data(), 1, kept.size(), f);
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("cannot write metrics file '" + path + "': " + std::strerror(errno));
  }
  w->file_ = std::fopen(path.c_str(), "a");
  if (w->file_ == nullptr) {
    return Status::IOError("cannot open metrics file '" + path + "': " + std::strerror(errno));
  }
  return w;
}

Status MetricsWriter::Append(const StepMetrics& m) {
  const std::string line = FormatMetricsLine(m) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return Status::IOError("writing metrics file '" + path_ + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

Status AppendJsonLine(const std::string& path, const std::string& line) {
  const std::string text = line + "\n";
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot open '" + path + "': " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Status::IOError("cannot append to '" + path +
                           "': " + (n < 0 ? std::strerror(err) : "short write"));
  }
  return Status::Ok();
}

Status RecordConfigError(const std::string& run_dir, const std::string& message) {
  if (run_dir.empty()) return Status::Ok();
  Env* env = Env::Default();
  if (!env->IsDirectory(run_dir)) return Status::Ok();  // nothing started: nothing to tell
  return WriteFileDurably(env, RunLayout(run_dir).config_error(), message + "\n");
}

}  // namespace ftrain::train
