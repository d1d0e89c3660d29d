// The NCCL implementation of Comm, for CUDA tensors: one non-blocking communicator per group,
// collectives enqueued on the group's own CUDA stream in issue order, ordered after LibTorch's
// current stream by an event, scratch memory from LibTorch's caching allocator. Work::Wait()
// makes the caller's current stream wait for the collective (no host blocking) unless
// FTRAIN_NCCL_BLOCKING_WAIT=1. A watchdog thread bounds every collective by the group's
// timeout: past it (or on an asynchronous NCCL error) it aborts the communicator, so the
// next Wait() or launch fails with a message naming group and operation; a process that is
// still stuck after the grace period exits (the job script's restart or requeue takes over).
// Built only when NCCL and the CUDA runtime are found (FTRAIN_WITH_NCCL); CI has no GPU, so
// there it is compiled and linked, and scripts/gpu-check.sh runs it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/collectives.h"

namespace ftrain::comm {

// Creates the NCCL group `name` of `size` ranks in which this process is `rank`, on CUDA
// device `device`, its unique id exchanged through `store`. Every member must call it with
// the same name and size. Initialisation is bounded by `timeout` too.
StatusOr<std::unique_ptr<Comm>> CreateNcclComm(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& name, int rank, int size,
                                               int device, std::chrono::milliseconds timeout);

// ncclCommSplit of an NCCL group made by CreateNcclComm: ranks with the same `color` form one
// new group, ordered by `key`. Collective over `parent`: every member calls it, in the same
// order relative to other splits. The new group inherits the device and timeout.
StatusOr<std::unique_ptr<Comm>> SplitNcclComm(Comm& parent, int color, int key,
                                              const std::string& name);

// The NCCL settings that fix the reduction order for a given world, set in the environment
// before the first communicator unless the user set them (NCCL_ALGO=Ring, NCCL_PROTO=Simple),
// and the library's version: "NCCL 2.28.9, NCCL_ALGO=Ring NCCL_PROTO=Simple". For logs and
// the checkpoint layout. `order_free` (dist.reduce = exact: every sum of a step is an integer
// sum or a MAX, the same in any order) pins nothing: NCCL's tuner may choose Tree, NVLS or
// CollNet and LL/LL128, and the string says so.
std::string PinNcclReductionOrder(bool order_free = false);

}  // namespace ftrain::comm
