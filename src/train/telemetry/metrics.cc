// metrics.jsonl writing (the record itself is records/metrics_record.h).
#include "train/telemetry/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace ftrain::train {

void SetReadLatency(std::vector<float> latencies, records::StepMetrics* m) {
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

Status MetricsWriter::Append(const records::StepMetrics& m) {
  const std::string line = records::FormatMetricsLine(m) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return Status::IOError("writing metrics file '" + path_ + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace ftrain::train
