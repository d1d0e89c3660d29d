// Shared by the planner's three files (plan.cc: strategies and the report, plan_time.cc: time
// to train, plan_adapters.cc: LoRA/QLoRA): number formatting, flag checks, and each part's
// compute/format entry points. Internal to ftrain_plan; nothing outside src/train includes it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/status.h"
#include "plan/planner.h"

namespace ftrain::plan_internal {

constexpr double kGB = 1e9;

inline std::string Num(double v, int decimals) {
  char buf[64];
  if (std::fabs(v) < 0.5 * std::pow(10.0, -decimals)) v = 0;  // never print "-0.0"
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}
inline std::string Gb(double bytes) { return Num(bytes / kGB, 1); }
// A flag's value as the user might have typed it: 7e+09, 80, 0.1.
inline std::string Short(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}
// Three significant digits in scientific notation: 8.40e+22.
inline std::string Sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2e", v);
  return buf;
}

// Pads to `width`; a value too wide for its column still gets one separating space.
inline std::string Pad(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return left ? s + " " : " " + s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

// `max` is far above any real cluster or model; a value beyond it is a typo.
Status CheckPositiveInt(const char* flag, int64_t v, int64_t max);
Status CheckPositive(const char* flag, double v);

// plan.cc: activations with --act-ckpt for r's shape (each layer's input + one layer in full).
// How many layers the backward recomputes: 0 without activation checkpointing, else layers
// 0, ac_every, 2 ac_every, ...
double RecomputedLayers(const PlanResult& r);
// How many decoder layers a sharded strategy holds gathered at its peak.
double GatheredLayers(const PlanResult& r);
double CheckpointedActivationBytes(const PlanResult& r);
// Bytes one token's pass through one decoder layer leaves in autograd's graph without
// checkpointing, bf16 compute, fused attention, as ftrain's Llama layer keeps them
// (FsdpMemory.ThePlanHoldsTheAllocatorPeakAndGrowsWithItPerLayer measures it): the layer's
// input; each RMSNorm's output and fp32 rsqrt per row, and the second one's input (model/
// lean_ops.h); q and k after RoPE, v, the attention output and the fp32 log-sum-exp per head;
// the MLP's gate, up and SwiGLU product. 12h + 4kv + 6i + 4a + 8: 32.2h for Llama-2-7B.
double LayerActivationBytesPerToken(const PlanResult& r);

// plan_adapters.cc
Status ValidateAdapterInput(const PlanInput& in);
// Needs r's shape, activations and usable memory. Fails on a rank larger than a target.
StatusOr<std::vector<AdapterPlan>> ComputeAdapters(const PlanResult& r);
void AppendAdapterText(const PlanResult& r, std::ostringstream& o);
nlohmann::ordered_json AdaptersJson(const PlanResult& r);

// plan_time.cc
Status ValidateTimeInput(const PlanInput& in);
// Needs r's shape, GPU counts and checkpoint overhead. Fails only on --calibrate input.
StatusOr<TimePlan> ComputeTime(const PlanResult& r);
void AppendTimeText(const PlanResult& r, std::ostringstream& o);
nlohmann::ordered_json TimeJson(const PlanResult& r);

// JSON number for a byte count: an integer whenever it fits in int64.
inline nlohmann::ordered_json Bytes(double v) {
  if (std::fabs(v) < 9e18) return static_cast<int64_t>(std::llround(v));
  return v;
}

}  // namespace ftrain::plan_internal
