// ProgressMeter: "\r"-redrawn line on a tty, periodic FT_LOG lines elsewhere.
#include "data/pack/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/log.h"

namespace ftrain::data {

ProgressMeter::ProgressMeter(std::string label, uint64_t total_bytes, Mode mode, double interval_s)
    : label_(std::move(label)), total_(total_bytes), interval_s_(interval_s) {
  tty_ = mode == Mode::kTerminal || (mode == Mode::kAuto && ::isatty(STDERR_FILENO));
  off_ = mode == Mode::kNone;
  if (tty_) interval_s_ = 0.25;
  start_ = last_ = std::chrono::steady_clock::now();
}

std::string ProgressMeter::Line(uint64_t done, uint64_t text, uint64_t docs) const {
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (el <= 0) el = 1e-9;
  char buf[256];
  double frac = total_ > 0 ? double(done) / double(total_) : 0;
  double eta = frac > 0.001 ? el / frac - el : -1;
  char eta_s[32] = "?";
  if (eta >= 0) {
    long s = long(eta + 0.5);
    std::snprintf(eta_s, sizeof(eta_s), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  }
  std::snprintf(
      buf, sizeof(buf), "%s: %.1f/%.1f MB read (%.0f%%), text %.2f MB/s, %.0f docs/s, ETA %s",
      label_.c_str(), done / 1e6, total_ / 1e6, 100 * frac, text / 1e6 / el, docs / el, eta_s);
  return buf;
}

void ProgressMeter::Update(uint64_t done, uint64_t text, uint64_t docs, bool force) {
  if (off_) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && std::chrono::duration<double>(now - last_).count() < interval_s_) return;
  last_ = now;
  if (tty_) {
    std::string line = "\r" + Line(done, text, docs) + "\x1b[K";
    // A failed progress write is harmless: the final summary is logged anyway.
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    drawn_ = true;
  } else {
    FT_LOG(Info) << Line(done, text, docs);
  }
}

void ProgressMeter::Finish() {
  if (tty_ && drawn_) {
    ssize_t ignored = ::write(STDERR_FILENO, "\n", 1);  // see Update: harmless if it fails
    (void)ignored;
  }
}

}  // namespace ftrain::data
