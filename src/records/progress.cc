// The hang guard's progress records: writer and reader (progress.h).
#include "records/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/env.h"

namespace ftrain::records {
namespace {

nlohmann::json ProgressObject(const RankProgress& p) {
  nlohmann::json j = {{"rank", p.rank},
                      {"node", p.node},
                      {"host", p.host},
                      {"generation", p.generation},
                      {"step", p.step},
                      {"phase", p.phase},
                      {"launched", p.launched},
                      {"stuck_s", p.stuck_s},
                      {"threshold_s", p.threshold_s},
                      {"time", p.time},
                      {"pid", p.pid}};
  if (p.mono > 0) j["mono"] = p.mono;
  return j;
}

bool ProgressFrom(const nlohmann::json& j, RankProgress* out) {
  if (!j.is_object()) return false;
  try {
    RankProgress p;
    p.rank = j.at("rank").get<int>();
    p.node = j.at("node").get<int>();
    p.host = j.at("host").get<std::string>();
    p.generation = j.at("generation").get<std::string>();
    p.step = j.at("step").get<int64_t>();
    p.phase = j.at("phase").get<std::string>();
    p.launched = j.at("launched").get<uint64_t>();
    p.stuck_s = j.at("stuck_s").get<double>();
    p.threshold_s = j.at("threshold_s").get<double>();
    p.time = j.at("time").get<double>();
    p.pid = j.value("pid", int64_t{0});
    p.mono = j.value("mono", 0.0);
    *out = std::move(p);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;  // a field missing or of another type: not a record of ours
  }
}

}  // namespace

std::string ProgressJson(const RankProgress& p) { return ProgressObject(p).dump(); }

bool ParseProgress(const std::string& text, RankProgress* out) {
  return ProgressFrom(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false), out);
}

std::string NodeProgressJson(const NodeProgress& n) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankProgress& p : n.ranks) ranks.push_back(ProgressObject(p));
  return nlohmann::json({{"node", n.node},
                         {"host", n.host},
                         {"generation", n.generation},
                         {"time", n.time},
                         {"ranks", ranks}})
      .dump();
}

bool ParseNodeProgress(const std::string& text, NodeProgress* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  try {
    NodeProgress n;
    n.node = j.at("node").get<int>();
    n.host = j.at("host").get<std::string>();
    n.generation = j.at("generation").get<std::string>();
    n.time = j.at("time").get<double>();
    const nlohmann::json& ranks = j.at("ranks");
    if (!ranks.is_array()) return false;
    for (const nlohmann::json& r : ranks) {
      RankProgress p;
      if (!ProgressFrom(r, &p)) return false;
      n.ranks.push_back(std::move(p));
    }
    *out = std::move(n);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;  // a field missing or of another type: not a record of ours
  }
}

Status WriteReplace(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::IOError("open " + tmp + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(tmp.c_str());  // best effort: the next write replaces it anyway
    return Status::IOError("write " + tmp + ": " +
                           (n < 0 ? std::strerror(write_errno) : "short write"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status WriteNodeProgress(const std::string& path, const NodeProgress& n) {
  return WriteReplace(path, NodeProgressJson(n));
}

bool ReadNodeProgress(const std::string& path, NodeProgress* out, Env* env) {
  std::string text;
  if (!env->ReadFile(path, &text).ok()) return false;
  return ParseNodeProgress(text, out);
}

}  // namespace ftrain::records
