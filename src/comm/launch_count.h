// How many collectives this process has launched, on every group and backend: the hang
// guard's measure of "is this rank inside the collective the others wait in" (every rank runs
// the same program, so ranks that wait together have launched as many). One relaxed atomic
// increment per launch; read by train/hang_watch.h's thread. No LibTorch.
#pragma once

#include <atomic>
#include <cstdint>

namespace ftrain::comm {

inline std::atomic<uint64_t>& CollectivesLaunched() {
  static std::atomic<uint64_t> count{0};
  return count;
}
inline void NoteCollectiveLaunched() {
  CollectivesLaunched().fetch_add(1, std::memory_order_relaxed);
}

}  // namespace ftrain::comm
