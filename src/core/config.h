// Run configuration: "section.key = value" pairs read from an INI-style file (the syntax of
// Boost.Program_options config files: [section] headers, key = value, '#' comments) and
// overridden by "--section.key=value" arguments. Values remember where they came from, so a
// bad one is reported as "configs/tiny.cfg:12: model.layers = 'x' is not an integer".
// Components read their fields with the typed getters; unknown keys are reported by
// CheckAllConsumed() once every component has read its part.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain {

class Config {
 public:
  struct Entry {
    std::string value;
    std::string origin;  // "file:line" or "command line"
  };

  // Parses a config file. Errors name the file and line.
  static StatusOr<Config> LoadFile(const std::string& path);
  static StatusOr<Config> Parse(const std::string& text, const std::string& origin_name);

  // "--section.key=value" or "section.key=value". The key must contain a dot.
  Status ApplyOverride(const std::string& arg);
  void Set(const std::string& key, const std::string& value, const std::string& origin);

  bool Has(const std::string& key) const;
  // Typed getters: when the key is absent the default stays in *out and OK is returned.
  // Every getter marks the key as consumed.
  Status GetString(const std::string& key, std::string* out) const;
  Status GetInt(const std::string& key, int64_t* out) const;
  Status GetDouble(const std::string& key, double* out) const;
  Status GetBool(const std::string& key, bool* out) const;
  // Fails with InvalidArgument naming the key when it is absent.
  Status RequireString(const std::string& key, std::string* out) const;

  // Keys that no getter has read: a typo or a key this version does not know.
  Status CheckAllConsumed() const;

  // Canonical "key = value" lines sorted by key: what the run actually used; its hash is the
  // config hash a checkpoint pins.
  std::string Canonical() const;
  const std::map<std::string, Entry>& entries() const { return entries_; }

 private:
  Status BadValue(const std::string& key, const char* what) const;

  std::map<std::string, Entry> entries_;
  mutable std::set<std::string> consumed_;
};

// Number parsing shared by configs and CLI flags: whole string, no trailing junk.
bool ParseInt64(const std::string& text, int64_t* out);
// Accepts 7e9, 1.5, 80 ...; rejects NaN/inf and trailing junk.
bool ParseDouble(const std::string& text, double* out);

}  // namespace ftrain
