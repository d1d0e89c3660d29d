// Appending and reading JSON Lines records (json_lines.h).
#include "records/json_lines.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/env.h"

namespace ftrain::records {

using nlohmann::json;

Status AppendJsonLine(const std::string& path, const std::string& line) {
  const std::string text = line + "\n";
  // O_NOFOLLOW: the run directory is shared, and a record is never written through a link
  // someone else put in its place.
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    const int err = errno;
    return Status::IOError("cannot open '" + path + "' to append a record: " + std::strerror(err) +
                           (err == ELOOP ? " (a symbolic link)" : ""));
  }
  const ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  // Durable before the caller goes on: a record is what the next start and the controller
  // act on (a rollback, a quarantine), and the process may exit right after it.
  const bool synced = n == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (!synced && n == static_cast<ssize_t>(text.size())) err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Status::IOError("cannot append to '" + path +
                           "': " + (n < 0 ? std::strerror(err) : "short write"));
  }
  if (!synced) return Status::IOError("cannot fsync '" + path + "': " + std::strerror(err));
  return Status::Ok();
}

Status ReadJsonLines(const std::string& path, std::vector<std::pair<int, json>>* out,
                     std::vector<std::string>* warnings, Env* env) {
  std::string text;
  Status read = env->ReadFile(path, &text);
  if (!read.ok()) {
    // No file: nothing recorded (yet). A file that cannot be read is an error, not silence.
    if (!env->FileExists(path)) return Status::Ok();
    return Status::IOError("cannot read '" + path + "': check its permissions");
  }
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const bool torn = nl == std::string::npos;
    if (torn) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      warnings->push_back(where + ": empty line (skipped)");
      continue;
    }
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      if (torn) {
        warnings->push_back(where + ": incomplete last line (a crash mid-append?), skipped");
        continue;
      }
      return Status::Corruption(where + ": not a JSON object (" +
                                line.substr(0, std::min<size_t>(line.size(), 60)) +
                                "); fix or remove that line and run the report again");
    }
    out->emplace_back(line_no, std::move(j));
  }
  return Status::Ok();
}

}  // namespace ftrain::records
