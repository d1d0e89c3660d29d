// guard.policy = rollback's rules (rollback.h; the record is records/rollbacks.h).
#include "train/config/rollback.h"

#include <algorithm>

namespace ftrain::train {

Status CheckRollbackBudget(const std::vector<RollbackRecord>& past, int64_t step,
                           const GuardSection& g) {
  std::string steps;
  int64_t count = 1;  // this one
  for (const RollbackRecord& r : past) {
    if (r.step >= step || r.step <= step - g.max_skips_window) continue;
    ++count;
    steps += std::to_string(r.step) + ",";
  }
  if (count <= g.max_rollbacks) return Status::Ok();
  return Status::FailedPrecondition(
      "guard: step " + std::to_string(step) + " would be rollback number " + std::to_string(count) +
      " within the last " + std::to_string(g.max_skips_window) +
      " steps (earlier: " + steps.substr(0, steps.size() - 1) +
      "; guard.max_rollbacks = " + std::to_string(g.max_rollbacks) +
      "): the run keeps diverging, so it ends here instead of rolling back again. Inspect "
      "those steps' batches (RUN/rollbacks.jsonl), then resume with a lower train.lr, a "
      "larger guard.max_rollbacks or --data.skip");
}

std::vector<std::pair<int64_t, int64_t>> RolledBackRanges(
    const std::vector<RollbackRecord>& records, int64_t resumed_step) {
  int64_t last = resumed_step;
  for (const RollbackRecord& r : records) last = std::max(last, r.step);
  if (last == resumed_step) return {};
  return {{resumed_step + 1, last}};
}

std::vector<double> RolledBackSuspects(const std::vector<RollbackRecord>& records,
                                       int64_t resumed_step) {
  std::vector<std::pair<int64_t, double>> later;
  for (const RollbackRecord& r : records) {
    if (r.step > resumed_step && r.reason == "spike" && r.grad_norm >= 0) {
      later.emplace_back(r.step, r.grad_norm);
    }
  }
  std::stable_sort(later.begin(), later.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<double> out;
  for (const auto& [step, norm] : later) out.push_back(norm);
  return out;
}

}  // namespace ftrain::train
