// orch/job_policy_util.h - small helpers shared by the files of JobPolicy (job_policy*.cc):
// list and number formatting and action constructors. Internal to src/orch.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/strings.h"
#include "orch/job_types.h"

namespace ftrain::orch::policy_util {

using ftrain::Join;  // core/strings.h (the policy files name it policy_util::Join)

// Seconds as the scripts printed them: no needless decimals.
inline std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

inline bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

inline Action Act(Action::Kind k) {
  Action a;
  a.kind = k;
  return a;
}

inline Action WithNodes(Action::Kind k, std::vector<std::string> nodes) {
  Action a = Act(k);
  a.nodes = std::move(nodes);
  return a;
}

inline Action LastStop(const std::string& why) {
  Action a = Act(Action::Kind::kWriteLastStop);
  a.text = why;
  return a;
}

}  // namespace ftrain::orch::policy_util
