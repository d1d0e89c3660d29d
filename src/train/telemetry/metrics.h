// metrics.jsonl's writer: one record (records/metrics_record.h) per optimizer step, appended
// and flushed line by line so a crash loses at most the line being written; a resumed run
// first drops the lines past its checkpoint. Written by rank 0 only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "records/metrics_record.h"

namespace ftrain::train {

// Sets m's data_reads and read latency p50/p95 (nearest rank) from `latencies` (seconds;
// reordered); leaves them unset when it is empty.
void SetReadLatency(std::vector<float> latencies, records::StepMetrics* m);

class MetricsWriter {
 public:
  ~MetricsWriter();
  // Appends to `path` (created if needed). Lines of steps after `truncate_after_step` that a
  // crashed previous run left behind are dropped first, so the file stays one line per step.
  // `resume_line` (the line of step truncate_after_step saved in the checkpoint) is appended
  // when the file lacks that step: the previous run died between its commit and its append.
  static StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path,
                                                       int64_t truncate_after_step,
                                                       const std::string& resume_line = "");
  Status Append(const records::StepMetrics& m);

 private:
  MetricsWriter() = default;
  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace ftrain::train
