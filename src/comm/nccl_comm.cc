// NcclComm: Comm over NCCL on CUDA tensors (see nccl_comm.h for the contract). Uneven shards
// are staged through padded buffers from LibTorch's caching allocator, because NCCL's
// all-gather and reduce-scatter need equal counts per rank. Nothing here blocks the host
// except the bounded waits for communicator set-up and, when asked, Work::Wait().
#include "comm/nccl_comm.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/comm_guard.h"
#include "comm/launch_count.h"
#include "comm/nccl_nonblocking.h"
#include "core/log.h"

namespace ftrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

// After an abort, how long the process may take to notice and exit on its own before the
// watchdog ends it (a rank blocked in a CUDA call behind a dead peer never returns).
constexpr auto kAbortGrace = std::chrono::seconds(30);

Status NcclError(const std::string& what, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string msg = what + " failed: " + ncclGetErrorString(r);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
  }
  return Status::Unavailable(msg);
}
Status CudaError(const std::string& what, cudaError_t e) {
  return Status::Unavailable(what + " failed: " + cudaGetErrorString(e));
}

StatusOr<ncclDataType_t> NcclType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    case at::kChar:
      return ncclInt8;
    default:
      return Status::InvalidArgument(std::string("NCCL cannot reduce dtype ") +
                                     c10::toString(t.scalar_type()));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// The non-blocking protocol (comm/nccl_nonblocking.h) on the real library.
struct NcclApi {
  using Comm = ncclComm_t;
  using Result = ncclResult_t;
  static constexpr Result kSuccess = ncclSuccess;
  static constexpr Result kInProgress = ncclInProgress;
  static constexpr Result kInternalError = ncclInternalError;
  Result GetAsyncError(Comm c, Result* state) { return ncclCommGetAsyncError(c, state); }
  Result Split(Comm parent, int color, int key, Comm* child) {
    return ncclCommSplit(parent, color, key, child, config);
  }
  Comm LoadChild(Comm* child) { return __atomic_load_n(child, __ATOMIC_ACQUIRE); }
  void Pause() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }
  Clock::time_point Now() { return Clock::now(); }
  ncclConfig_t* config = nullptr;  // the child's, for Split
};

std::function<bool()> StopWhenFailed(const CommGuard* guard) {
  if (guard == nullptr) return {};
  return [guard] { return guard->Failed(); };
}

ncclResult_t Settle(ncclComm_t comm, ncclResult_t r, Clock::time_point deadline,
                    const CommGuard* guard = nullptr) {
  NcclApi api;
  return nonblocking::Settle(api, comm, r, deadline, StopWhenFailed(guard));
}

ncclResult_t SettleState(ncclComm_t comm, ncclResult_t r, Clock::time_point deadline,
                         const CommGuard* guard = nullptr) {
  NcclApi api;
  return nonblocking::SettleState(api, comm, r, deadline, StopWhenFailed(guard));
}

ncclConfig_t NonBlockingConfig(const std::string& name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name.c_str();  // copied by NCCL during the call
  return config;
}

bool BlockingWaitRequested() {
  const char* v = std::getenv("FTRAIN_NCCL_BLOCKING_WAIT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// One CUDA event, destroyed when the last holder (the Work, the watchdog) lets go.
struct Event {
  cudaEvent_t ev = nullptr;
  ~Event() {
    if (ev != nullptr) cudaEventDestroy(ev);  // legal while pending; nothing to report
  }
};

// How the guard queries, aborts and ends an NCCL group. Captures the handle by value, never
// the NcclComm: a watchdog left behind by ~NcclComm may still run these.
CommGuard::Backend GuardBackend(ncclComm_t comm, const std::string& name, int device) {
  CommGuard::Backend b;
  b.log_prefix = "nccl";
  b.on_watchdog_start = [device] {
    cudaSetDevice(device);  // event queries need the device's context on this thread
  };
  b.async_error = [comm, name]() -> Status {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return Status::Ok();  // cannot tell
    if (async == ncclSuccess || async == ncclInProgress) return Status::Ok();
    return NcclError("group " + name, async, comm);
  };
  b.abort = [comm] {
    ncclCommAbort(comm);  // the verdict is already recorded; abort has nothing to add
  };
  b.exit_process = [](const std::string& why) {
    FT_LOG(Error) << "nccl: " << why << "; exiting so that the job restarts";
    std::_Exit(1);  // the same exit code as a collective timeout that returned
  };
  return b;
}

class EventWork : public Work {
 public:
  EventWork(std::shared_ptr<CommGuard> guard, std::shared_ptr<Event> done, Status launch,
            int device, bool blocking)
      : guard_(std::move(guard)),
        done_(std::move(done)),
        launch_(std::move(launch)),
        device_(device),
        blocking_(blocking) {}

  Status Wait() override {
    if (!launch_.ok()) return launch_;
    FT_RETURN_IF_ERROR(guard_->Error());
    if (done_ == nullptr) return Status::Ok();
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    if (!blocking_) {
      // Like c10d's work.wait(): the caller's current stream waits on the device.
      cudaStream_t cur = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
      cudaError_t e = cudaStreamWaitEvent(cur, done_->ev, 0);
      if (e != cudaSuccess) return CudaError("ordering after an NCCL collective", e);
      return Status::Ok();
    }
    // Blocking on the host, but never past the watchdog's verdict.
    for (;;) {
      cudaError_t e = cudaEventQuery(done_->ev);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return CudaError("waiting for an NCCL collective", e);
      FT_RETURN_IF_ERROR(guard_->Error());
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<CommGuard> guard_;
  std::shared_ptr<Event> done_;
  Status launch_;
  const int device_;
  const bool blocking_;
};

class NcclComm : public Comm {
 public:
  NcclComm(ncclComm_t comm, std::string name, int rank, int size, int device,
           std::chrono::milliseconds timeout)
      : comm_(comm),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                             static_cast<c10::DeviceIndex>(device))),
        name_(std::move(name)),
        rank_(rank),
        size_(size),
        device_(device),
        timeout_(timeout),
        blocking_wait_(BlockingWaitRequested()) {
    cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming);  // checked at launch
    guard_ =
        CommGuard::Start(name_, std::to_string(timeout_.count() / 1000) + " s (dist.timeout_s)",
                         GuardBackend(comm_, name_, device_),
                         CommGuard::Timing{std::chrono::milliseconds(100), kAbortGrace});
  }

  ~NcclComm() override {
    // Bounded: a watchdog stuck in an abort is left behind (it holds only the guard), and
    // its grace timer still ends the process.
    const bool usable = guard_->Stop(kAbortGrace);
    if (inputs_ready_ != nullptr) cudaEventDestroy(inputs_ready_);
    if (!usable) return;  // aborted (NCCL freed it), or the abort may still be running
    // Flush and tear down, bounded: a peer that is gone must not hang the exit.
    const auto deadline = Clock::now() + timeout_;
    ncclResult_t r = Settle(comm_, ncclCommFinalize(comm_), deadline);
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);  // nothing left to report at teardown
    } else {
      ncclCommAbort(comm_);  // did not quiesce in time: drop it
    }
  }

  // Health of the group: the watchdog's verdict, or NCCL's asynchronous error now.
  Status Health() override { return guard_->Health(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "nccl"; }

  std::unique_ptr<Work> AllReduce(const at::Tensor& t, ReduceOp op) override {
    return Launch("all_reduce", {t}, [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t));
      return Call("ncclAllReduce",
                  ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type,
                                NcclOp(op), comm_, stream_.stream()));
    });
  }

  std::unique_ptr<Work> AllGather(const at::Tensor& out, const at::Tensor& in) override {
    return Launch("all_gather", {out, in}, [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(out));
      const int64_t n = out.numel();
      const int64_t chunk = ShardChunk(n, size_);
      const size_t elem = out.element_size();
      const ShardSpan mine = ShardOf(n, size_, rank_);
      if (in.numel() != mine.length) return Status::InvalidArgument("all_gather input size");
      if (chunk * size_ == n && mine.length == chunk) {
        return Call("ncclAllGather",
                    ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(chunk), type,
                                  comm_, stream_.stream()));
      }
      // Padded staging: [chunk x size] in scratch, our piece copied into its slot first.
      at::Tensor scratch = Scratch(static_cast<size_t>(chunk * size_) * elem);
      char* buf = static_cast<char*>(scratch.data_ptr());
      char* slot = buf + static_cast<size_t>(rank_ * chunk) * elem;
      FT_RETURN_IF_ERROR(Cuda("cudaMemsetAsync", cudaMemsetAsync(slot, 0, chunk * elem, stream_)));
      FT_RETURN_IF_ERROR(
          Cuda("cudaMemcpyAsync", cudaMemcpyAsync(slot, in.data_ptr(), mine.length * elem,
                                                  cudaMemcpyDeviceToDevice, stream_)));
      FT_RETURN_IF_ERROR(Call("ncclAllGather", ncclAllGather(slot, buf, static_cast<size_t>(chunk),
                                                             type, comm_, stream_.stream())));
      return Cuda("cudaMemcpyAsync", cudaMemcpyAsync(out.data_ptr(), buf, n * elem,
                                                     cudaMemcpyDeviceToDevice, stream_));
    });
  }

  std::unique_ptr<Work> ReduceScatter(const at::Tensor& out, const at::Tensor& in,
                                      ReduceOp op) override {
    return Launch("reduce_scatter", {out, in}, [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(in));
      const int64_t n = in.numel();
      const int64_t chunk = ShardChunk(n, size_);
      const size_t elem = in.element_size();
      const ShardSpan mine = ShardOf(n, size_, rank_);
      if (out.numel() != mine.length) return Status::InvalidArgument("reduce_scatter output size");
      if (chunk * size_ == n && mine.length == chunk) {
        return Call("ncclReduceScatter",
                    ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(chunk),
                                      type, NcclOp(op), comm_, stream_.stream()));
      }
      const size_t padded = static_cast<size_t>(chunk * size_) * elem;
      at::Tensor scratch = Scratch(padded + static_cast<size_t>(chunk) * elem);
      char* buf = static_cast<char*>(scratch.data_ptr());
      FT_RETURN_IF_ERROR(Cuda("cudaMemsetAsync", cudaMemsetAsync(buf, 0, padded, stream_)));
      FT_RETURN_IF_ERROR(
          Cuda("cudaMemcpyAsync",
               cudaMemcpyAsync(buf, in.data_ptr(), n * elem, cudaMemcpyDeviceToDevice, stream_)));
      char* result = buf + padded;
      FT_RETURN_IF_ERROR(
          Call("ncclReduceScatter", ncclReduceScatter(buf, result, static_cast<size_t>(chunk), type,
                                                      NcclOp(op), comm_, stream_.stream())));
      return Cuda("cudaMemcpyAsync", cudaMemcpyAsync(out.data_ptr(), result, mine.length * elem,
                                                     cudaMemcpyDeviceToDevice, stream_));
    });
  }

  std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) override {
    return Launch("broadcast", {t}, [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t));
      return Call("ncclBroadcast",
                  ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type,
                                root, comm_, stream_.stream()));
    });
  }

  std::unique_ptr<Work> Barrier() override {
    return Launch("barrier", {}, [&]() -> Status {
      at::Tensor scratch = Scratch(sizeof(float));
      return Call("ncclAllReduce (barrier)",
                  ncclAllReduce(scratch.data_ptr(), scratch.data_ptr(), 1, ncclFloat32, ncclSum,
                                comm_, stream_.stream()));
    });
  }

  StatusOr<std::unique_ptr<Comm>> Split(int color, int key, const std::string& name) {
    auto lock = guard_->LockLaunch();
    FT_RETURN_IF_ERROR(guard_->Error());
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclConfig_t config = NonBlockingConfig(name);
    ncclComm_t child = nullptr;
    const auto deadline = Clock::now() + timeout_;
    NcclApi api;
    api.config = &config;
    ncclResult_t r =
        nonblocking::Split(api, comm_, color, key, &child, deadline, StopWhenFailed(guard_.get()));
    if (r == ncclInProgress && guard_->Failed()) {
      if (child != nullptr) ncclCommAbort(child);
      return guard_->Error();
    }
    if (r != ncclSuccess) {
      if (child != nullptr) ncclCommAbort(child);
      if (r == ncclInProgress) {
        return Status::DeadlineExceeded("ncclCommSplit of group " + name_ + " into " + name +
                                        " did not finish within " +
                                        std::to_string(timeout_.count() / 1000) + " s");
      }
      return NcclError("ncclCommSplit of group " + name_ + " into " + name, r, comm_);
    }
    int child_rank = 0, child_size = 0;
    ncclCommUserRank(child, &child_rank);
    ncclCommCount(child, &child_size);
    return std::unique_ptr<Comm>(
        new NcclComm(child, name, child_rank, child_size, device_, timeout_));
  }

 private:
  // Called under the launch lock.
  Status Call(const char* what, ncclResult_t r) {
    r = SettleState(comm_, r, Clock::now() + timeout_, guard_.get());
    if (r == ncclSuccess) return Status::Ok();
    if (guard_->Failed()) return guard_->Error();  // the watchdog aborts once we let go
    if (r == ncclInProgress) {
      return Status::DeadlineExceeded(std::string(what) + " was not enqueued within " +
                                      std::to_string(timeout_.count() / 1000) + " s");
    }
    return NcclError(what, r, comm_);
  }
  static Status Cuda(const char* what, cudaError_t e) {
    return e == cudaSuccess ? Status::Ok() : CudaError(what, e);
  }

  // Device memory from LibTorch's caching allocator, allocated on the caller's current
  // stream and recorded on ours, so the allocator reuses it only after the collective ran.
  at::Tensor Scratch(size_t bytes) {
    at::Tensor t = at::empty({static_cast<int64_t>(bytes)},
                             at::TensorOptions().dtype(at::kByte).device(
                                 at::kCUDA, static_cast<c10::DeviceIndex>(device_)));
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    return t;
  }

  template <typename F>
  std::unique_ptr<Work> Launch(const char* op, std::initializer_list<at::Tensor> tensors,
                               F enqueue) {
    NoteCollectiveLaunched();  // the hang guard's progress (comm/launch_count.h)
    // A failed group answers at once: the lock may be held by an abort that hangs.
    Status s = guard_->Error();
    if (!s.ok()) return std::make_unique<EventWork>(guard_, nullptr, s, device_, false);
    auto lock = guard_->LockLaunch();
    const std::string what = std::string(op) + " on group " + name_ + " (rank " +
                             std::to_string(rank_) + " of " + std::to_string(size_) + ")";
    s = guard_->Error();
    if (!s.ok()) return std::make_unique<EventWork>(guard_, nullptr, s, device_, false);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    for (const at::Tensor& t : tensors) {
      if (!t.is_cuda() || t.get_device() != device_) {
        s = Status::InvalidArgument(what + ": tensor on " + t.device().str() +
                                    ", NCCL needs tensors on cuda:" + std::to_string(device_));
        return std::make_unique<EventWork>(guard_, nullptr, s, device_, false);
      }
    }
    // Inputs were produced on LibTorch's current stream: order our stream after it.
    cudaStream_t cur = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
    if (inputs_ready_ == nullptr) s = Status::Unavailable("cudaEventCreate failed");
    if (s.ok()) s = Cuda("cudaEventRecord", cudaEventRecord(inputs_ready_, cur));
    if (s.ok()) s = Cuda("cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, inputs_ready_, 0));
    if (s.ok()) s = enqueue();
    // The caller may free its tensors once Wait() returned on its stream; the allocator must
    // not hand their memory out again before our stream is done with it.
    for (const at::Tensor& t : tensors) {
      if (s.ok() && t.numel() > 0) {
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
      }
    }
    auto done = std::make_shared<Event>();
    if (s.ok())
      s = Cuda("cudaEventCreate", cudaEventCreateWithFlags(&done->ev, cudaEventDisableTiming));
    if (s.ok()) s = Cuda("cudaEventRecord", cudaEventRecord(done->ev, stream_));
    if (!s.ok()) {
      s = s.Annotate(what);
      // A half-enqueued collective leaves the group out of step with its peers.
      guard_->FailLocked(s);
      return std::make_unique<EventWork>(guard_, nullptr, s, device_, false);
    }
    guard_->Track({[done](std::string* why) {
                     cudaError_t e = cudaEventQuery(done->ev);
                     if (e == cudaSuccess) return CommGuard::Progress::kDone;
                     if (e == cudaErrorNotReady) return CommGuard::Progress::kRunning;
                     *why = cudaGetErrorString(e);
                     return CommGuard::Progress::kFailed;
                   },
                   Clock::now() + timeout_, what});
    return std::make_unique<EventWork>(guard_, done, Status::Ok(), device_, blocking_wait_);
  }

  ncclComm_t comm_;
  c10::cuda::CUDAStream stream_;
  const std::string name_;
  const int rank_;
  const int size_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  const bool blocking_wait_;
  // The first error, the launch lock (it serialises launches: the issue order is the order;
  // the abort takes it too), the watchdog.
  std::shared_ptr<CommGuard> guard_;
  cudaEvent_t inputs_ready_ = nullptr;  // guarded by the launch lock (after construction)
};

}  // namespace

std::string PinNcclReductionOrder(bool order_free) {
  // Ring all-reduce / reduce-scatter with the Simple protocol add in one fixed order for a
  // given world and topology; NCCL's tuner would otherwise pick per message size and
  // topology. A user who sets these (to tune) keeps theirs, and the log shows it.
  if (!order_free) {
    ::setenv("NCCL_ALGO", "Ring", /*overwrite=*/0);
    ::setenv("NCCL_PROTO", "Simple", /*overwrite=*/0);
  }
  int version = 0;
  ncclGetVersion(&version);  // on failure 0, printed as such
  std::string out = "NCCL " + std::to_string(version / 10000) + "." +
                    std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  for (const char* var : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"}) {
    if (const char* v = std::getenv(var)) out += std::string(", ") + var + "=" + v;
  }
  if (order_free) out += ", algorithm unpinned (dist.reduce = exact: integer sums)";
  return out;
}

StatusOr<std::unique_ptr<Comm>> CreateNcclComm(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& name, int rank, int size,
                                               int device, std::chrono::milliseconds timeout) {
  cudaError_t ce = cudaSetDevice(device);
  if (ce != cudaSuccess) return CudaError("cudaSetDevice(" + std::to_string(device) + ")", ce);
  const std::string key = "ftrain/nccl/" + name + "/unique_id";
  ncclUniqueId id;
  try {
    store->setTimeout(timeout);
    if (rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return NcclError("ncclGetUniqueId", r);
      const auto* p = reinterpret_cast<const uint8_t*>(&id);
      store->set(key, std::vector<uint8_t>(p, p + sizeof(id)));
    } else {
      std::vector<uint8_t> bytes = store->get(key);
      if (bytes.size() != sizeof(id))
        return Status::Internal("malformed NCCL unique id in the store");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  } catch (const std::exception& e) {
    return Status::DeadlineExceeded("exchanging the NCCL id of group " + name + ": " + e.what());
  }
  ncclConfig_t config = NonBlockingConfig(name);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (comm != nullptr) r = SettleState(comm, r, Clock::now() + timeout);
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    if (r == ncclInProgress) {
      return Status::DeadlineExceeded(
          "NCCL communicator of group " + name + " was not set up within " +
          std::to_string(timeout.count() / 1000) + " s (a peer is missing or cannot be reached)");
    }
    return NcclError("ncclCommInitRankConfig of group " + name, r);
  }
  return std::unique_ptr<Comm>(new NcclComm(comm, name, rank, size, device, timeout));
}

StatusOr<std::unique_ptr<Comm>> SplitNcclComm(Comm& parent, int color, int key,
                                              const std::string& name) {
  auto* nccl = dynamic_cast<NcclComm*>(&parent);
  if (nccl == nullptr) {
    return Status::InvalidArgument("SplitNcclComm: group " + parent.name() + " is " +
                                   parent.backend() + ", not nccl");
  }
  return nccl->Split(color, key, name);
}

}  // namespace ftrain::comm
