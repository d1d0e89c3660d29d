// guard.policy = rollback's rules (rollback.h; the record is records/rollbacks.h).
#include "train/verdicts/rollback.h"

#include <algorithm>

namespace ftrain::train {

Status CheckRollbackBudget(const std::vector<RollbackRecord>& past, int64_t step,
                           const GuardSection& g) {
  std::string steps;
  int64_t count = 1;  // this one
  for (const RollbackRecord& r : past) {
    if (r.kind != records::RollbackKind::kRollback) continue;  // an applied range, not an event
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

namespace {

// Sorted, with overlapping or adjacent ranges joined.
std::vector<std::pair<int64_t, int64_t>> Merge(std::vector<std::pair<int64_t, int64_t>> in) {
  std::sort(in.begin(), in.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& r : in) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

RollbackSkips PlanRollbackSkips(const std::vector<RollbackRecord>& records, int64_t resumed_step,
                                int64_t train_steps) {
  RollbackSkips out;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t pending = resumed_step;  // the newest rollback step no applied line answers yet
  for (const RollbackRecord& r : records) {
    if (r.kind == records::RollbackKind::kApplied) {
      const int64_t first = std::max(r.first, resumed_step + 1);
      const int64_t last = std::min(r.last, train_steps);
      if (first <= last) ranges.emplace_back(first, last);
      pending = resumed_step;  // every rollback before it is answered by it
    } else {
      pending = std::max(pending, r.step);
    }
  }
  const int64_t last = std::min(pending, train_steps);
  if (last > resumed_step) {
    ranges.emplace_back(resumed_step + 1, last);
    out.to_record.kind = records::RollbackKind::kApplied;
    out.to_record.step = pending;
    out.to_record.first = resumed_step + 1;
    out.to_record.last = last;
    out.to_record.resumed_from = resumed_step;
  }
  out.ranges = Merge(std::move(ranges));
  return out;
}

std::map<int64_t, std::vector<double>> RolledBackSuspects(
    const std::vector<RollbackRecord>& records, int64_t resumed_step) {
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> at;
  std::vector<std::pair<int64_t, double>> since;  // spike rollbacks since the last applied line
  for (const RollbackRecord& r : records) {
    if (r.kind == records::RollbackKind::kApplied) {
      for (const auto& x : since) {
        if (x.first > r.resumed_from && r.resumed_from >= resumed_step) {
          at[r.resumed_from].push_back(x);
        }
      }
      since.clear();
    } else if (r.reason == "spike" && r.grad_norm >= 0) {
      since.emplace_back(r.step, r.grad_norm);
    }
  }
  for (const auto& x : since) {  // pending: this start applies them
    if (x.first > resumed_step) at[resumed_step].push_back(x);
  }
  std::map<int64_t, std::vector<double>> out;
  for (auto& [key, list] : at) {
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& x : list) out[key].push_back(x.second);
  }
  return out;
}

}  // namespace ftrain::train
