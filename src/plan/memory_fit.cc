#include "plan/memory_fit.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "plan/planner.h"

namespace ftrain {
namespace {

std::string OneDecimal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
std::string Gb(double bytes) { return OneDecimal(bytes / 1e9); }

const StrategyPlan* Row(const PlanResult& p, const std::string& name) {
  for (const auto& s : p.strategies) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// Settings that would fit, each checked with the planner (none of them is a guess).
std::vector<std::string> WhatFits(const PlanInput& in, Sharding sharding, const std::string& name) {
  std::vector<std::string> out;
  auto fits = [&](const PlanInput& alt, const std::string& row) {
    auto p = MakePlan(alt);
    const StrategyPlan* s = p.ok() ? Row(*p, row) : nullptr;
    return s != nullptr && s->fits;
  };
  PlanInput alt = in;
  if (!in.act_ckpt) {
    alt.act_ckpt = true;
    alt.ac_every = 2;  // selective: half the layers recomputed, less recompute than all
    if (fits(alt, name)) {
      out.push_back("train.activation_checkpointing = true with train.ac_every = 2 (selective)");
    } else {
      alt.ac_every = 1;
      if (fits(alt, name)) out.push_back("train.activation_checkpointing = true");
    }
  } else if (in.ac_every > 1) {
    alt.ac_every = 1;  // every layer recomputed: the least activation memory
    if (fits(alt, name)) out.push_back("train.ac_every = 1 (recompute every layer)");
  }
  alt = in;
  for (int64_t mb = in.micro_batch / 2; mb >= 1; mb /= 2) {
    alt = in;
    alt.micro_batch = mb;
    if (fits(alt, name)) {
      out.push_back("train.micro_batch = " + std::to_string(mb) +
                    " (raise train.grad_accum to keep the global batch)");
      break;
    }
  }
  if (sharding != Sharding::kFullShard && fits(in, "full_shard")) {
    out.push_back("dist.sharding = full_shard");
  }
  for (int64_t nodes = in.nodes * 2; nodes <= in.nodes * 64; nodes *= 2) {
    alt = in;
    alt.nodes = nodes;
    if (fits(alt, "full_shard")) {
      out.push_back("dist.sharding = full_shard on " + std::to_string(nodes) + " nodes");
      break;
    }
  }
  return out;
}

}  // namespace

Status CheckMemoryFit(const PlanInput& in, Sharding sharding, const std::string& device) {
  if (in.gpu_mem_gb <= 0) return Status::Ok();  // unknown device memory: nothing to check
  const std::string name = PlanRowName(sharding);
  FT_ASSIGN_OR_RETURN(PlanResult p, MakePlan(in));
  const StrategyPlan* s = Row(p, name);
  if (s == nullptr || s->fits) return Status::Ok();
  std::string msg =
      "memory: dist.sharding = " + std::string(ShardingName(sharding)) + " needs " +
      Gb(s->total_bytes) + " GB per rank by `ftrain plan` (state " + Gb(s->state_bytes) +
      ", gathered units " + Gb(s->gathered_bytes) + ", gradient buffers " +
      Gb(s->grad_buffer_bytes) + ", head + loss " + Gb(s->loss_bytes) + ", activations " +
      Gb(s->activation_bytes) + ") but " + device + " has " + Gb(p.usable_bytes) + " GB usable (" +
      OneDecimal(in.gpu_mem_gb) + " GB less the " +
      std::to_string(static_cast<int>(p.input.reserve_fraction * 100 + 0.5)) + " % reserve)";
  const std::vector<std::string> fixes = WhatFits(in, sharding, name);
  if (fixes.empty()) {
    msg +=
        "; nothing fits, not even full_shard on 64 times the nodes: shorten the sequences or use a "
        "smaller model";
  } else {
    msg += "; what fits:";
    for (size_t i = 0; i < fixes.size(); ++i) msg += (i ? ", or " : " ") + fixes[i];
  }
  // p.input: `in` with the planner's defaults filled in (seq_len, when `in` left it unset).
  char cmd[256];
  std::snprintf(
      cmd, sizeof cmd,
      " (the table: ftrain plan --model CONFIG --nodes %lld --gpus-per-node %lld "
      "--gpu-mem-gb %.1f --seq-len %lld --micro-batch %lld%s%s); "
      "FTRAIN_SKIP_MEMORY_CHECK=1 starts anyway",
      static_cast<long long>(in.nodes), static_cast<long long>(in.gpus_per_node), in.gpu_mem_gb,
      static_cast<long long>(*p.input.seq_len), static_cast<long long>(in.micro_batch),
      in.act_ckpt ? " --act-ckpt" : "",
      in.act_ckpt && in.ac_every > 1 ? (" --ac-every " + std::to_string(in.ac_every)).c_str() : "");
  return Status::InvalidArgument(msg + cmd);
}

uint64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace ftrain
