// DistContext: the process's place in the job and its communicators. Init() discovers the
// world (PMIx, Slurm env, torchrun env, single), runs the rendezvous (PMIx put/fence/get of
// the store address, or the TCPStore named by MASTER_ADDR/MASTER_PORT), checks that every
// rank agrees on the world size, and builds the world, intra-node and inter-node groups.
#pragma once

#include <memory>
#include <string>

#include "comm/collectives.h"
#include "comm/world.h"
#include "core/status.h"

namespace ftrain::comm {

struct DistOptions {
  std::string backend = "gloo";   // "gloo" or "nccl" (when built with NCCL)
  int rdzv_timeout_s = 300;       // how long a rank waits for the others to appear
  int op_timeout_s = 600;         // how long one collective may take before it fails
  bool build_node_groups = true;  // also create intra-node and inter-node groups
  // nccl: the CUDA device of this rank (the GPU Slurm bound to the task; -1 = local rank).
  int cuda_device = -1;
  // nccl: every reduction that decides a step's bits is order-free (dist.reduce = exact), so
  // NCCL's algorithm and protocol are not pinned (comm/nccl_comm.h PinNcclReductionOrder).
  bool order_free = false;
};

// Reads FTRAIN_RDZV_TIMEOUT (seconds) over the defaults; errors name the variable.
StatusOr<DistOptions> DistOptionsFromEnv(DistOptions base);

class DistContext {
 public:
  static StatusOr<std::unique_ptr<DistContext>> Init(const DistOptions& options);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  const WorldInfo& world() const;
  Comm& world_comm();
  // A Gloo group over the world for small control collectives on CPU tensors (votes, the
  // loss for logging, decisions): with backend = gloo it is world_comm() itself; with nccl a
  // separate Gloo group, so that no CPU tensor is ever handed to NCCL.
  Comm& control();
  // Ranks on this node (same node_rank), ordered by local rank.
  Comm& intra_node();
  // Ranks with the same local rank on every node, ordered by node.
  Comm& inter_node();
  // With nccl: a second communicator over the same ranks as world_comm() / intra_node(), for
  // the gradient reduce-scatters, so that they run on a stream of their own next to the
  // parameter all-gathers (one NCCL communicator serialises its collectives on one stream).
  // With gloo: world_comm() / intra_node() themselves.
  Comm& world_reduce();
  Comm& intra_node_reduce();
  // The first failed group of this process (Comm::Health of the world, node and control
  // groups): every NCCL group's asynchronous error, checked before a snapshot begins.
  Status Health();
  // Where the rendezvous happened, for logs: "pmix ns=... store=host:port".
  const std::string& rendezvous_description() const;
  // With nccl: the NCCL version and the settings that fix its reduction order
  // ("NCCL 2.28.9, NCCL_ALGO=Ring, NCCL_PROTO=Simple"), for logs and the checkpoint layout;
  // empty with gloo.
  const std::string& collective_settings() const;

 private:
  DistContext();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftrain::comm
