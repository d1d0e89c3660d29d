// The check that every rule of a policy's table fired in some test of its binary
// (orch_job_policy_all for the job's kRules, orch_agent_policy_all for kWatcherRules): each test
// inserts the rules its decisions named into Fired(), and a gtest environment fails after the
// whole binary ran unfiltered when one never did. A filtered run (one ctest entry per test)
// proves nothing and checks nothing.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "orch/policy_table.h"

namespace ftrain::orch::testing {

// The rules named by the decisions of this binary's tests so far.
inline std::set<std::string>& Fired() {
  static std::set<std::string> fired;
  return fired;
}

class EveryRuleFired : public ::testing::Environment {
 public:
  explicit EveryRuleFired(const std::vector<Rule>* rules) : rules_(rules) {}
  void TearDown() override {
#ifdef GTEST_FLAG_GET
    const std::string filter = GTEST_FLAG_GET(filter);
#else
    const std::string filter = ::testing::GTEST_FLAG(filter);
#endif
    if (filter != "*") return;  // a partial run proves nothing
    for (const auto& r : *rules_) {
      EXPECT_TRUE(Fired().count(r.id)) << "rule '" << r.id << "' fired in no test";
    }
  }

 private:
  const std::vector<Rule>* rules_;
};

}  // namespace ftrain::orch::testing
