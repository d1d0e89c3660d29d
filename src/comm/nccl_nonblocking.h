// How ftrain drives a non-blocking NCCL communicator (ncclConfig_t.blocking = 0) to a settled
// state: the protocol alone, templated over the NCCL calls it makes, so that a CPU test can
// play NCCL's behaviour (tests/comm_nonblocking_test.cc) and nccl_comm.cc runs it on the real
// library. No NCCL, CUDA or LibTorch here.
//
// What NCCL 2.28 does, seen on an H200 (docs/performance.md#gpu) and in NVIDIA/nccl#1472:
//   - ncclCommInitRankConfig may return ncclSuccess while the communicator's state is still
//     ncclInProgress; a call on it before the state is ncclSuccess fails with
//     ncclInvalidArgument ("Attempt to use communicator before the previous operation
//     returned ncclSuccess").
//   - ncclCommSplit is, for the parent, like a collective: the child handle is written only
//     once the parent's state is ncclSuccess again, possibly after the call returned
//     ncclSuccess with the handle still null.
// So every call is preceded and followed by polling the communicator's state, whatever the
// call returned.
#pragma once

#include <chrono>
#include <functional>

namespace ftrain::comm::nonblocking {

// Api: the NCCL calls, as a type with
//   using Comm = ...; using Result = ...; static constexpr Result kSuccess, kInProgress,
//   kInternalError;
//   Result GetAsyncError(Comm, Result* state); Result Split(Comm parent, int color, int key,
//   Comm* child);  Comm LoadChild(Comm* child) (an acquire load: NCCL's thread writes it);
//   void Pause() (a short sleep between polls); Clock::time_point Now();
// `stop` (may be empty): the group failed meanwhile (its watchdog aborts it); stop polling.
using Clock = std::chrono::steady_clock;

// Polls `comm` while `r` is kInProgress, until `deadline` or `stop`. kInProgress when it
// did not settle in time.
template <typename Api>
typename Api::Result Settle(Api& api, typename Api::Comm comm, typename Api::Result r,
                            Clock::time_point deadline, const std::function<bool()>& stop) {
  while (r == Api::kInProgress) {
    if (api.Now() > deadline) return Api::kInProgress;
    if (stop && stop()) return Api::kInProgress;
    api.Pause();
    typename Api::Result state = Api::kSuccess;
    if (api.GetAsyncError(comm, &state) != Api::kSuccess) return Api::kInternalError;
    r = state;
  }
  return r;
}

// After a call that returned `r`: the communicator's own state, polled until it settles
// (also when the call said kSuccess). An error result is returned as it is.
template <typename Api>
typename Api::Result SettleState(Api& api, typename Api::Comm comm, typename Api::Result r,
                                 Clock::time_point deadline, const std::function<bool()>& stop) {
  if (r != Api::kSuccess && r != Api::kInProgress) return r;
  typename Api::Result state = Api::kSuccess;
  if (api.GetAsyncError(comm, &state) != Api::kSuccess) return Api::kInternalError;
  return Settle(api, comm, state, deadline, stop);
}

// ncclCommSplit of a settled parent, to a settled child: kSuccess with *child set, or the
// failure (kInProgress: not within the deadline); *child may then hold a handle to abort.
template <typename Api>
typename Api::Result Split(Api& api, typename Api::Comm parent, int color, int key,
                           typename Api::Comm* child, Clock::time_point deadline,
                           const std::function<bool()>& stop) {
  typename Api::Result r = SettleState(api, parent, Api::kSuccess, deadline, stop);
  if (r == Api::kSuccess) r = api.Split(parent, color, key, child);
  r = SettleState(api, parent, r, deadline, stop);
  typename Api::Comm filled = api.LoadChild(child);
  while (r == Api::kSuccess && filled == typename Api::Comm{} && api.Now() < deadline) {
    api.Pause();
    filled = api.LoadChild(child);
  }
  *child = filled;
  if (r == Api::kSuccess && filled == typename Api::Comm{}) return Api::kInternalError;
  if (r == Api::kSuccess) r = SettleState(api, filled, r, deadline, stop);
  return r;
}

}  // namespace ftrain::comm::nonblocking
