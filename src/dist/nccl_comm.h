// The NCCL implementation of Comm, for CUDA tensors: one communicator per group, its unique
// id exchanged through the rendezvous store, collectives enqueued on the group's own CUDA
// stream in issue order (Work::Wait synchronises an event recorded after the collective).
// Built only when NCCL and the CUDA runtime are found (FTRAIN_WITH_NCCL); this repository's
// CI has no GPU, so here it is compiled and linked, and scripts/gpu-smoke.sh runs it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/comm.h"

namespace ftrain::dist {

// Creates the NCCL group `name` of `size` ranks in which this process is `rank`, on CUDA
// device `device`. Every member must call it with the same name and size.
StatusOr<std::unique_ptr<Comm>> CreateNcclComm(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& name, int rank, int size,
                                               int device, std::chrono::milliseconds timeout);

}  // namespace ftrain::dist
