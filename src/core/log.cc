// Logging implementation: format one line, write it with a single write(2).
#include "core/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace ftrain {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_prefix_mu;
std::string g_prefix;  // guarded by g_prefix_mu

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void SetLogPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_prefix_mu);
  g_prefix = prefix;
}

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  if (text == "debug")
    *level = LogLevel::kDebug;
  else if (text == "info")
    *level = LogLevel::kInfo;
  else if (text == "warning" || text == "warn")
    *level = LogLevel::kWarning;
  else if (text == "error")
    *level = LogLevel::kError;
  else
    return false;
  return true;
}

Status SetLogLevelFromEnv() {
  const char* v = std::getenv(kLogLevelEnv);
  if (v == nullptr || *v == '\0') return Status::Ok();
  LogLevel level;
  if (!ParseLogLevel(v, &level)) {
    return Status::InvalidArgument(std::string(kLogLevelEnv) + "='" + v +
                                   "' is not one of debug, info, warning, error");
  }
  SetLogLevel(level);
  return Status::Ok();
}

LogMessage::~LogMessage() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm_utc;
  gmtime_r(&tv.tv_sec, &tm_utc);
  char when[64];
  std::snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm_utc.tm_year + 1900,
                tm_utc.tm_mon + 1, tm_utc.tm_mday, tm_utc.tm_hour, tm_utc.tm_min, tm_utc.tm_sec,
                static_cast<int>(tv.tv_usec / 1000));
  std::string line = when;
  line += ' ';
  line += LevelName(level_);
  {
    std::lock_guard<std::mutex> lock(g_prefix_mu);
    if (!g_prefix.empty()) line += " [" + g_prefix + "]";
  }
  line += ' ';
  line += stream_.str();
  line += '\n';
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // stderr is gone: nothing better to do with a log line
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace ftrain
