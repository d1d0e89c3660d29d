// The Gloo implementation of Comm (CPU tensors, TCP), over c10d's ProcessGroupGloo.
// Internal to src/comm: includes c10d headers, so only comm .cc files include it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/collectives.h"

namespace ftrain::comm {

// Creates the group `name` of `size` ranks in which this process is `rank`. Every member
// must call it with the same name and size; `store` is shared (a prefix keeps groups apart).
StatusOr<std::unique_ptr<Comm>> CreateGlooComm(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& name, int rank, int size,
                                               const std::string& hostname,
                                               std::chrono::milliseconds timeout);

}  // namespace ftrain::comm
