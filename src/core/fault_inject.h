// Numeric fault injection for tests: FTRAIN_FAULT names faults to inject into chosen training
// steps on chosen ranks (a NaN in the loss, a NaN in one gradient element, a multiplied
// gradient, one flipped bit in the fp32 master shard after the optimizer). Parsing only; the
// FSDP engine applies an armed fault (fsdp/engine.h), the trainer a bitflip
// (train/sdc_check.h) and a stall (train/trainer.cc). A fault that ends the process (a
// bitflip: the replica check stops the run; a stall: the hang guard does) fires once per run: it is
// recorded in RUN/.faults_fired before it fires, and a restart drops what is recorded there, so the
// job's restart trains on instead of meeting it again. The numeric faults fire whenever their step
// is computed, so a replay decides alike. Compiled into every build like FTRAIN_CRASH_AT
// (core/env.h), off unless the variable is set, and costs one branch per step when off. For testing
// only: docs/operations.md ("Guardrails").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain {

constexpr char kFaultEnv[] = "FTRAIN_FAULT";
constexpr char kFaultFactorEnv[] = "FTRAIN_FAULT_FACTOR";  // spike multiplier, default 1000

// kStall: the rank stops progressing at the start of the step (sleeps until it is killed or
// the hang guard ends it: train/hang_watch.h).
enum class FaultKind { kNanLoss, kNanGrad, kSpike, kBitflip, kStall };
// "nan_loss", "nan_grad", "spike", "bitflip", "stall"
const char* FaultKindName(FaultKind k);

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

// "KIND@STEP:RANK" (":*" for every rank): how RUN/.faults_fired names a fault.
std::string FaultName(const Fault& f);
// Whether `k` ends the process, and so fires once per run (bitflip, stall).
bool FiresOncePerRun(FaultKind k);
// Appends `f` to `fired_path` (RUN/.faults_fired) and syncs it; called before the fault fires.
Status RecordFiredFault(const std::string& fired_path, const Fault& f);
// Removes from `plan` the faults `fired_path` lists (an absent file lists none).
void DropFiredFaults(const std::string& fired_path, FaultPlan* plan);

// Parses "KIND@STEP[:RANK],..." (KIND: nan_loss | nan_grad | spike | bitflip |
// stall) and a spike factor;
// InvalidArgument names the variable and the bad item.
StatusOr<FaultPlan> ParseFaultPlan(const std::string& spec, const std::string& factor);
// The plan of $FTRAIN_FAULT / $FTRAIN_FAULT_FACTOR (empty when unset); warns once when set.
StatusOr<FaultPlan> FaultPlanFromEnv();

}  // namespace ftrain
