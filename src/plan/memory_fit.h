// The memory check `ftrain train` runs before its first step: the plan (planner.h) for the
// run's own model, sharding, device, sequence length and micro-batch, and a refusal (exit 2)
// naming the figure that does not fit and the settings that would make it fit, instead of an
// out-of-memory error (or the kernel's OOM killer on CPU) some steps in. Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>

#include "core/sharding.h"
#include "core/status.h"
#include "plan/planner.h"

namespace ftrain {

// The plan's row for `sharding` (PlanRowName) fits in the usable memory (in.gpu_mem_gb less the
// plan's 10 % reserve): Ok. Else InvalidArgument that names the figures, what to change
// (train.activation_checkpointing, train.micro_batch, dist.sharding, more nodes) and the
// `ftrain plan` command that shows the table. `in` is the run's own plan input: its model,
// nodes, ranks per node (gpus_per_node), seq_len, micro_batch, act_ckpt, ac_every, grad_bytes,
// and as gpu_mem_gb the memory of the device one rank uses: a GPU's, or on CPU the host's share
// per rank (all of a node's ranks share its memory); 0 (unknown): nothing is checked.
// `device` names that device in the message: "cuda:0" or "this host (...)".
Status CheckMemoryFit(const PlanInput& in, Sharding sharding, const std::string& device);

// The host's physical memory in bytes (sysconf); 0 when unknown.
uint64_t HostMemoryBytes();

}  // namespace ftrain
