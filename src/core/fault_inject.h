// Numeric fault injection for tests: FTRAIN_FAULT names faults to inject into chosen training
// steps on chosen ranks (a NaN in the loss, a NaN in one gradient element, a multiplied
// gradient, one flipped bit in the fp32 master shard after the optimizer). Parsing only; the
// FSDP engine applies an armed fault (fsdp/engine.h), the trainer a bitflip
// (train/sdc_check.h). Compiled into every build like FTRAIN_CRASH_AT (core/env.h), off unless
// the variable is set, and costs one branch per step when off. For testing only:
// docs/operations.md ("Guardrails").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain {

constexpr char kFaultEnv[] = "FTRAIN_FAULT";
constexpr char kFaultFactorEnv[] = "FTRAIN_FAULT_FACTOR";  // spike multiplier, default 1000

enum class FaultKind { kNanLoss, kNanGrad, kSpike, kBitflip };
const char* FaultKindName(FaultKind k);  // "nan_loss", "nan_grad", "spike", "bitflip"

struct Fault {
  FaultKind kind = FaultKind::kNanLoss;
  int64_t step = 0;  // the optimizer step it hits (1-based, as metrics.jsonl's "step")
  int rank = -1;     // -1: every rank
};

struct FaultPlan {
  std::vector<Fault> faults;
  double spike_factor = 1000;
  bool empty() const { return faults.empty(); }
  // The faults that hit `step` on `rank` (usually none).
  std::vector<Fault> At(int64_t step, int rank) const;
};

// Parses "KIND@STEP[:RANK],..." (KIND: nan_loss | nan_grad | spike | bitflip) and a spike factor;
// InvalidArgument names the variable and the bad item.
StatusOr<FaultPlan> ParseFaultPlan(const std::string& spec, const std::string& factor);
// The plan of $FTRAIN_FAULT / $FTRAIN_FAULT_FACTOR (empty when unset); warns once when set.
StatusOr<FaultPlan> FaultPlanFromEnv();

}  // namespace ftrain
