// JSON Lines files of a run directory (metrics.jsonl, restarts.jsonl): appending one record
// as a single O_APPEND write, so records of the trainer and of slurm/train.sh never
// interleave, and reading them back line by line with file:line in every error, the torn
// last line a crash mid-append leaves skipped with a warning. The typed field readers name
// the field and file:line of a bad value. Each record's fields are metrics_record.h,
// phases.h and restarts.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::records {

// Appends one line (a JSON object without its newline) to `path` with a single O_APPEND
// write; a symbolic link in place of the file is refused (IOError), never followed.
Status AppendJsonLine(const std::string& path, const std::string& line);

// Every line of `path` that is a JSON object, with its line number. A line that is not a JSON
// object is Corruption naming file:line, except the last line when the file does not end in a
// newline (what a crash in the middle of an append leaves): skipped with a warning, as are
// empty lines. A missing file is no lines; one that cannot be read is an IOError.
Status ReadJsonLines(const std::string& path, std::vector<std::pair<int, nlohmann::json>>* out,
                     std::vector<std::string>* warnings, Env* env);

// Typed field access naming `where` (file:line) and the field; an absent optional field keeps
// `*v`. A string field also takes a number (a job id written as one).
template <typename T>
Status ReadField(const nlohmann::json& j, const char* key, bool required, const std::string& where,
                 T* v) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return Status::Ok();
    return Status::Corruption(where + ": field '" + key + "' is missing");
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) {
      *v = it->template get<std::string>();
    } else if (it->is_number()) {
      *v = it->dump();
    } else {
      return Status::Corruption(where + ": field '" + key + "' is not a string");
    }
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() && !it->is_number_unsigned()) {
      return Status::Corruption(where + ": field '" + key + "' is not an integer");
    }
    *v = it->template get<T>();
  } else {
    if (!it->is_number())
      return Status::Corruption(where + ": field '" + key + "' is not a number");
    *v = static_cast<T>(it->template get<double>());
  }
  return Status::Ok();
}

template <typename T>
Status ReadOptField(const nlohmann::json& j, const char* key, const std::string& where,
                    std::optional<T>* v) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  T x{};
  FT_RETURN_IF_ERROR(ReadField(j, key, true, where, &x));
  *v = x;
  return Status::Ok();
}

}  // namespace ftrain::records
