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

}  // namespace ftrain
