// Comm: the collectives the FSDP engine and the trainer use, over one group of ranks.
// Every call is asynchronous and returns a Work handle; calls execute in issue order (like a
// CUDA stream), so all ranks must issue the same collectives in the same order. Shards of a
// flat tensor follow ShardOf(): ceil-sized chunks, the last ranks may hold fewer (or zero)
// elements. No LibTorch include here: tensors are forward-declared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace at {
class Tensor;
}

namespace ftrain::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// The slice [offset, offset + length) of a flat tensor of `numel` elements owned by `rank`.
struct ShardSpan {
  int64_t offset = 0;
  int64_t length = 0;
};
ShardSpan ShardOf(int64_t numel, int world, int rank);
// ceil(numel / world): the padded per-rank chunk.
int64_t ShardChunk(int64_t numel, int world);

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished; the Status names the group, op and peer on failure.
  virtual Status Wait() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
  virtual const char* backend() const = 0;

  // In place over a contiguous tensor.
  virtual std::unique_ptr<Work> AllReduce(const at::Tensor& tensor, ReduceOp op) = 0;
  // `out` is flat with N elements; `in` holds ShardOf(N, size, rank).length elements.
  virtual std::unique_ptr<Work> AllGather(const at::Tensor& out, const at::Tensor& in) = 0;
  // `in` is flat with N elements; `out` receives the reduced ShardOf(N, size, rank) slice.
  virtual std::unique_ptr<Work> ReduceScatter(const at::Tensor& out, const at::Tensor& in,
                                              ReduceOp op) = 0;
  virtual std::unique_ptr<Work> Broadcast(const at::Tensor& tensor, int root) = 0;
  virtual std::unique_ptr<Work> Barrier() = 0;

  // The group's first failure that a Wait() which already returned cannot show: with NCCL,
  // Wait() only orders the caller's stream after the collective, so a collective that the
  // watchdog aborts (or that fails asynchronously) later leaves partially reduced data
  // behind a successful Wait(). Call it after the host synchronised with the device (an
  // item(), a copy to the host) and before that data changes durable state (the optimizer
  // step, a checkpoint): a failure recorded by then covers every collective issued before.
  // Backends whose Wait() blocks and reports every failure (Gloo) are always healthy.
  virtual Status Health() { return Status::Ok(); }
};

}  // namespace ftrain::comm
