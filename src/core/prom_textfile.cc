// Prometheus textfile writing. Plain POSIX calls, not Env: these files are not crash-sensitive
// state (a lost update is rewritten a second later), and counting their operations would move
// the crash points (FTRAIN_CRASH_AT) that the crash tests aim at checkpoint writes.
#include "core/prom_textfile.h"

#include <fcntl.h>
#include <prometheus/check_names.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace ftrain {
namespace {

std::string Errno() { return std::strerror(errno); }

}  // namespace

Status MakeMetricsDirs(const std::string& dir) {
  std::string path;
  std::stringstream parts(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') path = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    path += (path.empty() || path.back() == '/' ? "" : "/") + part;
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IOError("cannot create directory '" + path + "': " + Errno());
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::IOError("'" + dir + "' is not a directory");
  }
  return Status::Ok();
}

namespace {

// Writes `text` to a new `path` (truncating an old one).
Status WriteWhole(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::IOError("cannot create '" + path + "': " + Errno());
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? Errno() : "short write";
      ::close(fd);
      return Status::IOError("cannot write '" + path + "': " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return Status::IOError("cannot close '" + path + "': " + Errno());
  return Status::Ok();
}

}  // namespace

std::string SerializePromText(const PromLabels& labels, const std::vector<PromSample>& samples) {
  std::vector<prometheus::MetricFamily> families;
  families.reserve(samples.size());
  for (const PromSample& s : samples) {
    prometheus::MetricFamily f;
    f.name = s.name;
    f.help = s.help;
    f.type = s.counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    for (const auto& [k, v] : labels) m.label.push_back({k, v});
    if (s.counter) {
      m.counter.value = s.value;
    } else {
      m.gauge.value = s.value;
    }
    f.metric.push_back(std::move(m));
    families.push_back(std::move(f));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

std::string PromSafeName(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

StatusOr<std::unique_ptr<PromTextfile>> PromTextfile::Open(const std::string& dir,
                                                           const std::string& file_name,
                                                           PromLabels labels) {
  const std::string suffix = ".prom";
  if (file_name.size() <= suffix.size() || file_name.find('/') != std::string::npos ||
      file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return Status::InvalidArgument("Prometheus textfile name '" + file_name +
                                   "' must be a plain file name ending in .prom");
  }
  for (const auto& [k, v] : labels) {
    if (!prometheus::CheckLabelName(k)) {
      return Status::InvalidArgument("'" + k + "' is not a valid Prometheus label name");
    }
  }
  Status s = MakeMetricsDirs(dir);
  if (!s.ok()) return s.Annotate("Prometheus textfile directory");
  std::unique_ptr<PromTextfile> p(new PromTextfile());
  p->path_ = dir + "/" + file_name;
  p->tmp_path_ = dir + "/." + file_name + ".tmp." + std::to_string(::getpid());
  p->labels_ = std::move(labels);
  // Fail now, at start-up, if the directory is not writable, rather than at every update.
  s = WriteWhole(p->tmp_path_, "");
  if (!s.ok()) return s.Annotate("Prometheus textfile directory '" + dir + "' is not writable");
  ::unlink(p->tmp_path_.c_str());  // ignored: the probe file is rewritten by every update
  return p;
}

Status PromTextfile::Write(const std::vector<PromSample>& samples) {
  for (const PromSample& s : samples) {
    if (!prometheus::CheckMetricName(s.name)) {
      return Status::InvalidArgument("'" + s.name + "' is not a valid Prometheus metric name");
    }
    // prometheus-cpp 1.0 writes HELP text unescaped (labels it escapes): refuse what would
    // need escaping rather than depend on the library version's behaviour.
    if (s.help.find_first_of("\\\n") != std::string::npos) {
      return Status::InvalidArgument("the HELP text of '" + s.name +
                                     "' contains a backslash or a newline");
    }
  }
  Status s = WriteWhole(tmp_path_, SerializePromText(labels_, samples));
  if (s.ok() && std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    s = Status::IOError("cannot rename '" + tmp_path_ + "' to '" + path_ + "': " + Errno());
  }
  return s;
}

}  // namespace ftrain
