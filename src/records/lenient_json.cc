// Lenient JSON Lines reading for the job controller (lenient_json.h).
#include "records/lenient_json.h"

#include <sstream>

namespace ftrain::records {

std::vector<nlohmann::json> HostObjects(const std::string& text, int* skipped) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("host") || !j["host"].is_string() ||
        j["host"].get<std::string>().empty()) {
      if (skipped != nullptr) ++*skipped;
      continue;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ftrain::records
