// The memory check `ftrain train` runs before its first step: the plan (planner.h) for the
// run's own model, sharding, device, sequence length and micro-batch, and a refusal (exit 2)
// naming the figure that does not fit and the settings that would make it fit, instead of an
// out-of-memory error (or the kernel's OOM killer on CPU) some steps in. Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "formats/llama_config.h"

namespace ftrain {

struct MemoryFitInput {
  LlamaConfig model;
  std::string sharding = "full_shard";  // dist.sharding
  int64_t nodes = 1;
  int64_t ranks_per_node = 1;
  // Memory of the device one rank uses: a GPU's, or on CPU the host's share per rank (all of a
  // node's ranks share its memory).
  uint64_t device_bytes = 0;
  std::string device = "cpu";  // for the message: "cuda:0 ..." or "cpu"
  int64_t seq_len = 0;         // the data's sequence length
  int64_t micro_batch = 1;     // train.micro_batch
  bool act_ckpt = true;        // train.activation_checkpointing
  int64_t ac_every = 1;        // train.ac_every
  double grad_bytes = 2;       // train.reduce_dtype: bf16 2, fp32 4
};

// The plan's row for `sharding` (ddp for no_shard, zero2 for shard_grad_op) fits in the usable
// memory (device_bytes less the plan's 10 % reserve): Ok. Else InvalidArgument that names the
// figures, what to change (train.activation_checkpointing, train.micro_batch, dist.sharding,
// more nodes) and the `ftrain plan` command that shows the table.
Status CheckMemoryFit(const MemoryFitInput& in);

// The host's physical memory in bytes (sysconf); 0 when unknown.
uint64_t HostMemoryBytes();

}  // namespace ftrain
