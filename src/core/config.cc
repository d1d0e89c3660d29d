// Config file parsing, overrides and typed access.
#include "core/config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ftrain {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool ValidKeyPart(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

bool ValidKey(const std::string& key) {
  size_t dot = key.find('.');
  if (dot == std::string::npos) return false;
  return ValidKeyPart(key.substr(0, dot)) && ValidKeyPart(key.substr(dot + 1));
}

}  // namespace

bool ParseInt64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    // Allow integral values written in floating-point form, e.g. 7e9.
    double d;
    if (!ParseDouble(text, &d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  *out = v;
  return true;
}

bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

StatusOr<Config> Config::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Status::InvalidArgument("cannot open config file '" + path +
                                   "': " + std::strerror(errno) + "; check the path");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::IOError("reading config file '" + path + "' failed");
  return Parse(buffer.str(), path);
}

StatusOr<Config> Config::Parse(const std::string& text, const std::string& origin_name) {
  Config config;
  std::istringstream in(text);
  std::string raw;
  std::string section;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = origin_name + ":" + std::to_string(line_no);
    size_t hash = raw.find('#');
    std::string line = Trim(hash == std::string::npos ? raw : raw.substr(0, hash));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return Status::InvalidArgument(where + ": section header '" + line + "' lacks ']'");
      }
      section = Trim(line.substr(1, line.size() - 2));
      if (!ValidKeyPart(section)) {
        return Status::InvalidArgument(where + ": bad section name '" + section + "'");
      }
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(where + ": expected 'key = value', got '" + line + "'");
    }
    std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    if (key.find('.') == std::string::npos) {
      if (section.empty()) {
        return Status::InvalidArgument(where + ": key '" + key +
                                       "' is outside any [section]; add a section header");
      }
      key = section + "." + key;
    }
    if (!ValidKey(key)) {
      return Status::InvalidArgument(where + ": bad key '" + key + "' (want section.key)");
    }
    if (config.entries_.count(key)) {
      return Status::InvalidArgument(where + ": key '" + key + "' is set twice (first at " +
                                     config.entries_[key].origin + ")");
    }
    config.entries_[key] = Entry{value, where};
  }
  return config;
}

Status Config::ApplyOverride(const std::string& arg) {
  std::string body = arg;
  if (body.rfind("--", 0) == 0) body = body.substr(2);
  size_t eq = body.find('=');
  if (eq == std::string::npos) {
    return Status::InvalidArgument("override '" + arg + "' must look like --section.key=value");
  }
  std::string key = body.substr(0, eq);
  if (!ValidKey(key)) {
    return Status::InvalidArgument("override '" + arg + "': bad key '" + key +
                                   "' (want section.key)");
  }
  Set(key, body.substr(eq + 1), "command line");
  return Status::Ok();
}

void Config::Set(const std::string& key, const std::string& value, const std::string& origin) {
  entries_[key] = Entry{value, origin};
}

bool Config::Has(const std::string& key) const { return entries_.count(key) > 0; }

Status Config::BadValue(const std::string& key, const char* what) const {
  const Entry& e = entries_.at(key);
  return Status::InvalidArgument(e.origin + ": " + key + " = '" + e.value + "' is not " + what);
}

Status Config::GetString(const std::string& key, std::string* out) const {
  consumed_.insert(key);
  auto it = entries_.find(key);
  if (it != entries_.end()) *out = it->second.value;
  return Status::Ok();
}

Status Config::GetInt(const std::string& key, int64_t* out) const {
  consumed_.insert(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Ok();
  if (!ParseInt64(it->second.value, out)) return BadValue(key, "an integer");
  return Status::Ok();
}

Status Config::GetDouble(const std::string& key, double* out) const {
  consumed_.insert(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Ok();
  if (!ParseDouble(it->second.value, out)) return BadValue(key, "a number");
  return Status::Ok();
}

Status Config::GetBool(const std::string& key, bool* out) const {
  consumed_.insert(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Ok();
  const std::string& v = it->second.value;
  if (v == "true" || v == "1" || v == "yes" || v == "on") {
    *out = true;
  } else if (v == "false" || v == "0" || v == "no" || v == "off") {
    *out = false;
  } else {
    return BadValue(key, "a boolean (true/false)");
  }
  return Status::Ok();
}

Status Config::RequireString(const std::string& key, std::string* out) const {
  consumed_.insert(key);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return Status::InvalidArgument("config key '" + key + "' is required but not set");
  }
  *out = it->second.value;
  return Status::Ok();
}

Status Config::CheckAllConsumed() const {
  for (const auto& [key, entry] : entries_) {
    if (!consumed_.count(key)) {
      return Status::InvalidArgument(entry.origin + ": unknown config key '" + key +
                                     "'; check the spelling (docs/configuration.md lists keys)");
    }
  }
  return Status::Ok();
}

std::string Config::Canonical() const {
  std::string out;
  for (const auto& [key, entry] : entries_) out += key + " = " + entry.value + "\n";
  return out;
}

}  // namespace ftrain
