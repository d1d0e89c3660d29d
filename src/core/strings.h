// Small string helpers that several libraries need (one definition each, not one per file).
#pragma once

#include <string>
#include <vector>

namespace ftrain {

// "a<sep>b<sep>c"; "" for no items.
inline std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

// Whether `s` ends with `suffix`.
inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `s` without leading and trailing spaces, tabs, CRs and LFs.
inline std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace ftrain
