// Line-oriented logging to stderr: "<UTC time> <LEVEL> [<prefix>] message", each line written
// with one write() so that lines from many ranks sharing a terminal or file never interleave.
// Not a metrics sink (that is metrics.jsonl) and not buffered: a crash loses nothing logged.
#pragma once

#include <sstream>
#include <string>

#include "core/status.h"

namespace ftrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// A tag printed on every line, e.g. "rank 3/8" (empty: none).
void SetLogPrefix(const std::string& prefix);
// Parses "debug|info|warning|error"; false on anything else.
bool ParseLogLevel(const std::string& text, LogLevel* level);

// The environment variable every binary reads its starting level from (unset: info). The
// mains' --log-level flag overrides it (cli/cli_util.h: InitLogLevel).
constexpr char kLogLevelEnv[] = "FTRAIN_LOG_LEVEL";
// Applies $FTRAIN_LOG_LEVEL when it is set and not empty; a bad value is InvalidArgument
// naming the variable (the level is then left unchanged).
Status SetLogLevelFromEnv();

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace ftrain

// Turns the stream expression into void so it fits the ternary in FT_LOG (glog's trick: safe
// inside an unbraced if/else, unlike an if-else macro).
namespace ftrain {
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace ftrain

#define FT_LOG(level)                                        \
  !(::ftrain::LogLevel::k##level >= ::ftrain::GetLogLevel()) \
      ? (void)0                                              \
      : ::ftrain::LogVoidify() & ::ftrain::LogMessage(::ftrain::LogLevel::k##level).stream()
