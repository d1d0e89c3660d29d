// NcclComm: Comm over NCCL on raw CUDA pointers. Uneven shards are staged through padded
// device buffers, because NCCL's all-gather and reduce-scatter need equal counts per rank.
#include "dist/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <torch/torch.h>

#include <cstring>
#include <mutex>

namespace ftrain::dist {
namespace {

Status NcclError(const std::string& what, ncclResult_t r) {
  return Status::Unavailable(what + " failed: " + ncclGetErrorString(r));
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

class EventWork : public Work {
 public:
  EventWork(cudaEvent_t ev, Status launch) : event_(ev), launch_(std::move(launch)) {}
  ~EventWork() override {
    if (event_ != nullptr) cudaEventDestroy(event_);  // nothing to report at destruction
  }
  Status Wait() override {
    if (!launch_.ok() || event_ == nullptr) return launch_;
    cudaError_t e = cudaEventSynchronize(event_);
    if (e != cudaSuccess) return CudaError("waiting for an NCCL collective", e);
    return Status::Ok();
  }

 private:
  cudaEvent_t event_;
  Status launch_;
};

class NcclComm : public Comm {
 public:
  NcclComm(ncclComm_t comm, cudaStream_t stream, std::string name, int rank, int size, int device)
      : comm_(comm),
        stream_(stream),
        name_(std::move(name)),
        rank_(rank),
        size_(size),
        device_(device) {}
  ~NcclComm() override {
    cudaStreamSynchronize(stream_);  // drain before tearing down; errors are moot here
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (inputs_ready_ != nullptr) cudaEventDestroy(inputs_ready_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "nccl"; }

  std::unique_ptr<Work> AllReduce(const at::Tensor& t, ReduceOp op) override {
    return Launch("all_reduce", [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t));
      ncclResult_t r = ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                     type, NcclOp(op), comm_, stream_);
      return r == ncclSuccess ? Status::Ok() : NcclError("ncclAllReduce", r);
    });
  }

  std::unique_ptr<Work> AllGather(const at::Tensor& out, const at::Tensor& in) override {
    return Launch("all_gather", [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(out));
      const int64_t n = out.numel();
      const int64_t chunk = ShardChunk(n, size_);
      const size_t elem = out.element_size();
      const ShardSpan mine = ShardOf(n, size_, rank_);
      if (in.numel() != mine.length) return Status::InvalidArgument("all_gather input size");
      if (chunk * size_ == n && mine.length == chunk) {
        ncclResult_t r = ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(chunk),
                                       type, comm_, stream_);
        return r == ncclSuccess ? Status::Ok() : NcclError("ncclAllGather", r);
      }
      // Padded staging: [chunk x size] in scratch, our piece copied into its slot first.
      FT_ASSIGN_OR_RETURN(char* buf, Scratch(static_cast<size_t>(chunk * size_) * elem));
      char* slot = buf + static_cast<size_t>(rank_ * chunk) * elem;
      cudaMemsetAsync(slot, 0, static_cast<size_t>(chunk) * elem, stream_);
      cudaMemcpyAsync(slot, in.data_ptr(), static_cast<size_t>(mine.length) * elem,
                      cudaMemcpyDeviceToDevice, stream_);
      ncclResult_t r = ncclAllGather(slot, buf, static_cast<size_t>(chunk), type, comm_, stream_);
      if (r != ncclSuccess) return NcclError("ncclAllGather", r);
      cudaMemcpyAsync(out.data_ptr(), buf, static_cast<size_t>(n) * elem, cudaMemcpyDeviceToDevice,
                      stream_);
      return Status::Ok();
    });
  }

  std::unique_ptr<Work> ReduceScatter(const at::Tensor& out, const at::Tensor& in,
                                      ReduceOp op) override {
    return Launch("reduce_scatter", [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(in));
      const int64_t n = in.numel();
      const int64_t chunk = ShardChunk(n, size_);
      const size_t elem = in.element_size();
      const ShardSpan mine = ShardOf(n, size_, rank_);
      if (out.numel() != mine.length) return Status::InvalidArgument("reduce_scatter output size");
      if (chunk * size_ == n && mine.length == chunk) {
        ncclResult_t r =
            ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(chunk), type,
                              NcclOp(op), comm_, stream_);
        return r == ncclSuccess ? Status::Ok() : NcclError("ncclReduceScatter", r);
      }
      const size_t padded = static_cast<size_t>(chunk * size_) * elem;
      FT_ASSIGN_OR_RETURN(char* buf, Scratch(padded + static_cast<size_t>(chunk) * elem));
      cudaMemsetAsync(buf, 0, padded, stream_);
      cudaMemcpyAsync(buf, in.data_ptr(), static_cast<size_t>(n) * elem, cudaMemcpyDeviceToDevice,
                      stream_);
      char* result = buf + padded;
      ncclResult_t r = ncclReduceScatter(buf, result, static_cast<size_t>(chunk), type, NcclOp(op),
                                         comm_, stream_);
      if (r != ncclSuccess) return NcclError("ncclReduceScatter", r);
      cudaMemcpyAsync(out.data_ptr(), result, static_cast<size_t>(mine.length) * elem,
                      cudaMemcpyDeviceToDevice, stream_);
      return Status::Ok();
    });
  }

  std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) override {
    return Launch("broadcast", [&]() -> Status {
      FT_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t));
      ncclResult_t r = ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                     type, root, comm_, stream_);
      return r == ncclSuccess ? Status::Ok() : NcclError("ncclBroadcast", r);
    });
  }

  std::unique_ptr<Work> Barrier() override {
    return Launch("barrier", [&]() -> Status {
      FT_ASSIGN_OR_RETURN(char* buf, Scratch(sizeof(float)));
      ncclResult_t r = ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm_, stream_);
      return r == ncclSuccess ? Status::Ok() : NcclError("ncclAllReduce (barrier)", r);
    });
  }

 private:
  template <typename F>
  std::unique_ptr<Work> Launch(const char* op, F enqueue) {
    std::lock_guard<std::mutex> lock(mu_);
    cudaSetDevice(device_);
    // The collective's stream is non-blocking, so it does not order itself after the legacy
    // default stream, where LibTorch's kernels that produced the inputs run: make it wait.
    Status s = WaitForDefaultStream();
    if (s.ok()) s = enqueue();
    cudaEvent_t ev = nullptr;
    if (s.ok()) {
      cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (e == cudaSuccess) e = cudaEventRecord(ev, stream_);
      if (e != cudaSuccess) s = CudaError("recording an event", e);
    }
    if (!s.ok()) s = s.Annotate("rank " + std::to_string(rank_) + " of group " + name_ + " " + op);
    return std::make_unique<EventWork>(ev, s);
  }

  // Orders stream_ after everything enqueued so far on the legacy default stream (mu_ held).
  Status WaitForDefaultStream() {
    cudaError_t e = cudaSuccess;
    if (inputs_ready_ == nullptr)
      e = cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(inputs_ready_, cudaStreamLegacy);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, inputs_ready_, 0);
    return e == cudaSuccess ? Status::Ok() : CudaError("ordering after the default stream", e);
  }

  // A device buffer of at least `bytes`, reused (guarded by mu_).
  StatusOr<char*> Scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      cudaStreamSynchronize(stream_);  // the old buffer may still be in use
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&scratch_), bytes);
      if (e != cudaSuccess) return CudaError("cudaMalloc of NCCL staging", e);
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  const std::string name_;
  const int rank_;
  const int size_;
  const int device_;
  std::mutex mu_;
  char* scratch_ = nullptr;             // guarded by mu_
  cudaEvent_t inputs_ready_ = nullptr;  // guarded by mu_
  size_t scratch_bytes_ = 0;            // guarded by mu_
};

}  // namespace

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
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
  if (r != ncclSuccess) return NcclError("ncclCommInitRank of group " + name, r);
  cudaStream_t stream;
  ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) return CudaError("cudaStreamCreate", ce);
  return std::unique_ptr<Comm>(new NcclComm(comm, stream, name, rank, size, device));
}

}  // namespace ftrain::dist
