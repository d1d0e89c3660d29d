// Prometheus textfile-collector files (node_exporter --collector.textfile.directory): the
// current values of one process's gauges and counters, serialized by prometheus-cpp's text
// serializer (names checked, label values escaped) and replaced atomically: a temp file in
// the same directory, then rename(2), so a scraper never reads half a file. Not a time-series
// store, not crash-durable (no fsync: the next update rewrites it), no HTTP endpoint.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ftrain {

struct PromSample {
  std::string name;  // e.g. ftrain_step; [a-zA-Z_:][a-zA-Z0-9_:]*
  std::string help;
  bool counter = false;  // false: a gauge
  double value = 0;
};

using PromLabels = std::vector<std::pair<std::string, std::string>>;

// The text exposition of `samples`, each with `labels`: # HELP, # TYPE, then the sample.
std::string SerializePromText(const PromLabels& labels, const std::vector<PromSample>& samples);

// mkdir -p for metrics directories (plain POSIX, not Env: see prom_textfile.cc). Errors name
// the directory.
Status MakeMetricsDirs(const std::string& dir);

// "[A-Za-z0-9._-]" only: what may go into a .prom file name (a job id, a node name).
std::string PromSafeName(const std::string& s);

class PromTextfile {
 public:
  // Creates `dir` (and its parents) if needed and checks that a file can be written there;
  // `file_name` must end in ".prom" (node_exporter reads nothing else). Errors name the
  // directory and the failed operation.
  static StatusOr<std::unique_ptr<PromTextfile>> Open(const std::string& dir,
                                                      const std::string& file_name,
                                                      PromLabels labels);
  // Replaces the file with `samples` (temp file, then rename).
  Status Write(const std::vector<PromSample>& samples);
  const std::string& path() const { return path_; }

 private:
  PromTextfile() = default;
  std::string path_;
  std::string tmp_path_;  // ".<file_name>.tmp.<pid>": hidden, and not *.prom
  PromLabels labels_;
};

}  // namespace ftrain
