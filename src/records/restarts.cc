// records/restarts.cc - writing and reading RUN/restarts.jsonl and its per-host spools (see
// restarts.h for the one-writer-per-file rule). Plain POSIX calls: every record is one
// write(2); the merged file is replaced by rename, never appended to by two hosts.
#include "records/restarts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "core/env.h"
#include "records/json_lines.h"

namespace ftrain::records {

std::string EscapeJson(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

Field Str(const std::string& key, const std::string& value) {
  return {key, "\"" + EscapeJson(value) + "\""};
}
Field Int(const std::string& key, int64_t value) { return {key, std::to_string(value)}; }
Field Num(const std::string& key, double value, int decimals) {
  if (!std::isfinite(value)) return {key, "null"};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  return {key, buf};
}
Field Bool(const std::string& key, bool value) { return {key, value ? "true" : "false"}; }
Field Raw(const std::string& key, const std::string& json) { return {key, json}; }

std::string EncodeLine(const RestartRecord& r) {
  std::string s = "{\"time\":" + Num("", r.time, 6).json + ",\"job\":\"" + EscapeJson(r.job) +
                  "\",\"restart_count\":" + std::to_string(r.restart_count) + ",\"event\":\"" +
                  EscapeJson(r.event) + "\",\"cause\":\"" + EscapeJson(r.cause) + "\"";
  for (const auto& f : r.fields) s += ",\"" + EscapeJson(f.key) + "\":" + f.json;
  return s + "}";
}

Status AppendToSpool(const RunLayout& layout, const std::string& node, const std::string& line,
                     Env* env) {
  FT_RETURN_IF_ERROR(CreateDirs(env, layout.records_dir()));
  return AppendJsonLine(layout.restarts_spool(node), line);
}

Status AppendForThisProcess(const RunLayout& layout, const LaunchContext& launch,
                            const std::string& line, Env* env) {
  if (!launch.records_spool) return AppendJsonLine(layout.restarts(), line);
  return AppendToSpool(layout, launch.short_host, line, env);
}

namespace {

// The complete lines of one file (a last line without '\n' is reported, not returned).
Status ReadLines(const std::string& path, std::vector<Line>* out,
                 std::vector<std::string>* warnings, bool warn_incomplete, Env* env) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!env->FileExists(path)) return Status::Ok();  // nothing recorded (yet)
    return Status::IOError("cannot read '" + path + "': check its permissions");
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  size_t pos = 0;
  int no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ++no;
    const std::string where = path + ":" + std::to_string(no);
    if (nl == std::string::npos) {
      if (warn_incomplete) {
        warnings->push_back(where + ": incomplete last line (a crash mid-append?), skipped");
      }
      break;
    }
    std::string s = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (s.find_first_not_of(" \t\r") == std::string::npos) {
      warnings->push_back(where + ": empty line (skipped)");
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("time") || !j["time"].is_number()) {
      warnings->push_back(where + ": not a record (a JSON object with a numeric time: " +
                          s.substr(0, std::min<size_t>(s.size(), 60)) + "), skipped");
      continue;
    }
    out->push_back({j["time"].get<double>(), std::move(s), where, std::move(j)});
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> Spools(const RunLayout& layout, Env* env) {
  std::vector<std::string> out;
  if (!env->IsDirectory(layout.records_dir())) return out;
  FT_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(layout.records_dir()));
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const bool spool =
        n.rfind("restarts-", 0) == 0 && n.size() > 15 && n.compare(n.size() - 6, 6, ".jsonl") == 0;
    if (spool) out.push_back(JoinPath(layout.records_dir(), n));
  }
  return out;
}

Status ReadAll(const RunLayout& layout, bool warn_incomplete, std::vector<Line>* main_lines,
               std::vector<Line>* spool_lines, std::vector<std::string>* warnings, Env* env) {
  FT_RETURN_IF_ERROR(ReadLines(layout.restarts(), main_lines, warnings, warn_incomplete, env));
  FT_ASSIGN_OR_RETURN(std::vector<std::string> spools, Spools(layout, env));
  for (const auto& p : spools)
    FT_RETURN_IF_ERROR(ReadLines(p, spool_lines, warnings, warn_incomplete, env));
  return Status::Ok();
}

std::vector<Line> Union(std::vector<Line> a, std::vector<Line> b) {
  std::set<std::string> seen;
  std::vector<Line> out;
  for (auto* v : {&a, &b}) {
    for (auto& l : *v) {
      if (seen.insert(l.text).second) out.push_back(std::move(l));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Line& x, const Line& y) { return x.time < y.time; });
  return out;
}

}  // namespace

StatusOr<Merged> ReadMerged(const RunLayout& layout, Env* env) {
  Merged m;
  std::vector<Line> main_lines, spool_lines;
  FT_RETURN_IF_ERROR(ReadAll(layout, true, &main_lines, &spool_lines, &m.warnings, env));
  m.lines = Union(std::move(main_lines), std::move(spool_lines));
  return m;
}

StatusOr<int> MergeSpools(const RunLayout& layout, Env* env) {
  std::vector<Line> main_lines, spool_lines;
  std::vector<std::string> warnings;  // the merge only copies; the report names bad lines
  FT_RETURN_IF_ERROR(ReadAll(layout, false, &main_lines, &spool_lines, &warnings, env));
  std::set<std::string> have;
  for (const auto& l : main_lines) have.insert(l.text);
  int added = 0;
  for (const auto& l : spool_lines) added += have.insert(l.text).second ? 1 : 0;
  if (added == 0) return 0;
  std::string text;
  for (const auto& l : Union(std::move(main_lines), std::move(spool_lines))) text += l.text + "\n";
  FT_RETURN_IF_ERROR(WriteFileDurably(env, layout.restarts(), text));
  return added;
}

StatusOr<int> SpoolMerger::MaybeMerge() {
  FT_ASSIGN_OR_RETURN(std::vector<std::string> spools, Spools(layout_, env_));
  bool grew = false;
  std::map<std::string, int64_t> now;
  for (const auto& p : spools) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;
    now[p] = st.st_size;
    auto it = sizes_.find(p);
    if (it == sizes_.end() || it->second != st.st_size) grew = true;
  }
  if (!grew) return 0;
  FT_ASSIGN_OR_RETURN(int added, MergeSpools(layout_, env_));
  sizes_ = std::move(now);
  return added;
}

}  // namespace ftrain::records
