// The lenient side of the JSON Lines records the job controller reads while a run goes on
// (quarantine.h, hangs.h, node_faults.h): a line that does not parse or names no host is
// skipped and counted, a field of the wrong type keeps its default. The strict side, which
// names file:line, is json_lines.h.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace ftrain::records {

// Each line of `text` that is a JSON object with a non-empty string "host"; the others (torn,
// not JSON, an operator's note) are counted in `*skipped` when given (empty lines are not).
std::vector<nlohmann::json> HostObjects(const std::string& text, int* skipped);

// `*out` = j[key] when it has out's type (integers for integral types), else unchanged.
template <typename T>
void ReadLenient(const nlohmann::json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) *out = it->template get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) *out = it->template get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (it->is_number()) *out = it->template get<T>();
  } else {
    if (it->is_number_integer()) *out = it->template get<T>();
  }
}

}  // namespace ftrain::records
