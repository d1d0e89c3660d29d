// Progress of a long job on stderr: on a terminal one line redrawn in place (MB/s, docs/s,
// percent, ETA); otherwise a plain log line every `interval_s` seconds. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ftrain::data {

class ProgressMeter {
 public:
  enum class Mode { kAuto, kTerminal, kPlain, kNone };
  ProgressMeter(std::string label, uint64_t total_bytes, Mode mode, double interval_s);
  // done_bytes counts toward total_bytes (stored input bytes); text_bytes and docs are rates.
  void Update(uint64_t done_bytes, uint64_t text_bytes, uint64_t docs, bool force = false);
  void Finish();

 private:
  std::string Line(uint64_t done, uint64_t text, uint64_t docs) const;

  std::string label_;
  uint64_t total_;
  bool tty_;
  bool off_;
  double interval_s_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
};

}  // namespace ftrain::data
