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

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

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

// A non-blocking communicator answers ncclInProgress while it works in the background:
// poll its state until it settles, at most until `deadline`.
ncclResult_t Settle(ncclComm_t comm, ncclResult_t r, Clock::time_point deadline) {
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    r = state;
  }
  return r;
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

// What the communicator, its Work handles and its watchdog share.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  Status error;       // guarded by mu: set once, by the watchdog or a failed launch
  bool stop = false;  // guarded by mu
  struct Pending {
    std::shared_ptr<Event> done;
    Clock::time_point deadline;
    std::string what;
  };
  std::deque<Pending> pending;  // guarded by mu, in issue order
  Status Error() {
    std::lock_guard<std::mutex> lock(mu);
    return error;
  }
};

class EventWork : public Work {
 public:
  EventWork(std::shared_ptr<Shared> shared, std::shared_ptr<Event> done, Status launch, int device,
            bool blocking)
      : shared_(std::move(shared)),
        done_(std::move(done)),
        launch_(std::move(launch)),
        device_(device),
        blocking_(blocking) {}

  Status Wait() override {
    if (!launch_.ok()) return launch_;
    FT_RETURN_IF_ERROR(shared_->Error());
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
      FT_RETURN_IF_ERROR(shared_->Error());
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<Shared> shared_;
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
        blocking_wait_(BlockingWaitRequested()),
        shared_(std::make_shared<Shared>()) {
    cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming);  // checked at launch
    watchdog_ = std::thread([this] { Watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stop = true;
    }
    shared_->cv.notify_all();
    watchdog_.join();
    if (inputs_ready_ != nullptr) cudaEventDestroy(inputs_ready_);
    if (!shared_->Error().ok()) return;  // aborted: NCCL freed the communicator
    // Flush and tear down, bounded: a peer that is gone must not hang the exit.
    const auto deadline = Clock::now() + timeout_;
    ncclResult_t r = Settle(comm_, ncclCommFinalize(comm_), deadline);
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);  // nothing left to report at teardown
    } else {
      ncclCommAbort(comm_);  // did not quiesce in time: drop it
    }
  }

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
    std::lock_guard<std::mutex> lock(launch_mu_);
    FT_RETURN_IF_ERROR(shared_->Error());
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclConfig_t config = NonBlockingConfig(name);
    ncclComm_t child = nullptr;
    const auto deadline = Clock::now() + timeout_;
    ncclResult_t r = ncclCommSplit(comm_, color, key, &child, &config);
    if (r == ncclInProgress && child != nullptr) r = Settle(child, r, deadline);
    if (r == ncclInProgress) r = Settle(comm_, r, deadline);
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
  Status Call(const char* what, ncclResult_t r) {
    if (r == ncclInProgress) r = Settle(comm_, r, Clock::now() + timeout_);
    if (r == ncclSuccess) return Status::Ok();
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
    std::lock_guard<std::mutex> lock(launch_mu_);
    const std::string what = std::string(op) + " on group " + name_ + " (rank " +
                             std::to_string(rank_) + " of " + std::to_string(size_) + ")";
    Status s = shared_->Error();
    if (!s.ok()) return std::make_unique<EventWork>(shared_, nullptr, s, device_, false);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    for (const at::Tensor& t : tensors) {
      if (!t.is_cuda() || t.get_device() != device_) {
        s = Status::InvalidArgument(what + ": tensor on " + t.device().str() +
                                    ", NCCL needs tensors on cuda:" + std::to_string(device_));
        return std::make_unique<EventWork>(shared_, nullptr, s, device_, false);
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
      Fail(s);  // a half-enqueued collective leaves the group out of step with its peers
      return std::make_unique<EventWork>(shared_, nullptr, s, device_, false);
    }
    {
      std::lock_guard<std::mutex> l(shared_->mu);
      shared_->pending.push_back({done, Clock::now() + timeout_, what});
    }
    shared_->cv.notify_all();
    return std::make_unique<EventWork>(shared_, done, Status::Ok(), device_, blocking_wait_);
  }

  // Records the group's first error and aborts the communicator (its peers' collectives
  // then fail or time out too). Later launches and waits return the error.
  void Fail(const Status& s) {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (!shared_->error.ok()) return;
      shared_->error = s;
    }
    FT_LOG(Error) << "nccl: " << s.message() << "; aborting the communicator of group " << name_;
    ncclCommAbort(comm_);  // the verdict is already recorded; abort has nothing to add
  }

  // The watchdog: every collective finishes within the timeout, or the group is aborted.
  void Watch() {
    cudaSetDevice(device_);  // event queries need the device's context on this thread
    std::unique_lock<std::mutex> lock(shared_->mu);
    for (;;) {
      shared_->cv.wait_for(lock, std::chrono::milliseconds(100));
      if (shared_->stop) return;
      if (!shared_->error.ok()) {
        // Aborted: the process should be on its way out. If it is still here after the
        // grace period, a thread is stuck behind the dead collective for good.
        if (!shared_->cv.wait_for(lock, kAbortGrace, [this] { return shared_->stop; })) {
          FT_LOG(Error) << "nccl: group " << name_ << " was aborted (" << shared_->error.message()
                        << ") and the process did not stop within "
                        << std::chrono::duration_cast<std::chrono::seconds>(kAbortGrace).count()
                        << " s; exiting so that the job restarts";
          std::_Exit(1);  // the same exit code as a collective timeout that returned
        }
        return;
      }
      Status verdict;
      while (!shared_->pending.empty()) {
        Shared::Pending& p = shared_->pending.front();
        cudaError_t e = cudaEventQuery(p.done->ev);
        if (e == cudaSuccess) {
          shared_->pending.pop_front();
          continue;
        }
        if (e != cudaErrorNotReady) {
          verdict = CudaError(p.what, e);
        } else if (Clock::now() > p.deadline) {
          verdict = Status::DeadlineExceeded(
              p.what + " timed out after " + std::to_string(timeout_.count() / 1000) +
              " s (dist.timeout_s): a peer is dead, hung or unreachable");
        }
        break;
      }
      if (verdict.ok()) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
          verdict = NcclError("group " + name_, async, comm_);
        }
      }
      if (!verdict.ok()) {
        lock.unlock();
        Fail(verdict);
        lock.lock();
      }
    }
  }

  ncclComm_t comm_;
  c10::cuda::CUDAStream stream_;
  const std::string name_;
  const int rank_;
  const int size_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  const bool blocking_wait_;
  std::shared_ptr<Shared> shared_;
  std::mutex launch_mu_;                // serialises launches: the issue order is the order
  cudaEvent_t inputs_ready_ = nullptr;  // guarded by launch_mu_ (after construction)
  std::thread watchdog_;
};

}  // namespace

std::string PinNcclReductionOrder() {
  // Ring all-reduce / reduce-scatter with the Simple protocol add in one fixed order for a
  // given world and topology; NCCL's tuner would otherwise pick per message size and
  // topology. A user who sets these (to tune) keeps theirs, and the log shows it.
  ::setenv("NCCL_ALGO", "Ring", /*overwrite=*/0);
  ::setenv("NCCL_PROTO", "Simple", /*overwrite=*/0);
  int version = 0;
  ncclGetVersion(&version);  // on failure 0, printed as such
  std::string out = "NCCL " + std::to_string(version / 10000) + "." +
                    std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  for (const char* var : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"}) {
    if (const char* v = std::getenv(var)) out += std::string(", ") + var + "=" + v;
  }
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
  if (comm != nullptr) r = Settle(comm, r, Clock::now() + timeout);
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
