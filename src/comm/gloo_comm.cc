// GlooComm: Comm over c10d::ProcessGroupGloo. One worker thread per group runs the
// collectives in issue order, so composite operations (the ring reduce-scatter that Gloo
// lacks in LibTorch 1.13, padded all-gathers for uneven shards) stay ordered and async.
#include "comm/gloo_comm.h"

#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "comm/launch_count.h"

namespace ftrain::comm {
namespace {

class FutureWork : public Work {
 public:
  explicit FutureWork(std::future<Status> f) : future_(std::move(f)) {}
  Status Wait() override {
    if (!waited_) {
      status_ = future_.get();
      waited_ = true;
    }
    return status_;
  }

 private:
  std::future<Status> future_;
  bool waited_ = false;
  Status status_;
};

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

// Gloo in LibTorch 1.13 cannot move bfloat16. Data movement is bit-for-bit, so bfloat16
// tensors travel as float16 views; reductions of 16-bit floats run in float32 (AllReduce).
bool IsHalfFloat(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}
at::Tensor Wire(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t;  // same bits, a type Gloo moves
}

void Accumulate(at::Tensor& acc, const at::Tensor& incoming, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      acc.add_(incoming);
      break;
    case ReduceOp::kMax:
      at::maximum_out(acc, acc, incoming);
      break;
    case ReduceOp::kMin:
      at::minimum_out(acc, acc, incoming);
      break;
  }
}

class GlooComm : public Comm {
 public:
  GlooComm(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::string name, int rank, int size)
      : pg_(std::move(pg)), name_(std::move(name)), rank_(rank), size_(size) {
    worker_ = std::thread([this] { Loop(); });
  }
  ~GlooComm() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "gloo"; }

  std::unique_ptr<Work> AllReduce(const at::Tensor& tensor, ReduceOp op) override {
    return Enqueue("all_reduce", [this, tensor, op]() mutable {
      // 16-bit floats are reduced in float32 and rounded once at the end.
      at::Tensor work = IsHalfFloat(tensor) ? tensor.to(at::kFloat) : tensor;
      std::vector<at::Tensor> v{work};
      c10d::AllreduceOptions opts;
      opts.reduceOp = ToC10d(op);
      pg_->allreduce(v, opts)->wait();
      if (op == ReduceOp::kAvg) work.div_(size_);
      if (!work.is_same(tensor)) tensor.copy_(work);
    });
  }

  std::unique_ptr<Work> AllGather(const at::Tensor& out, const at::Tensor& in) override {
    return Enqueue("all_gather", [this, out, in]() mutable {
      const int64_t n = out.numel();
      const int64_t chunk = ShardChunk(n, size_);
      const ShardSpan mine = ShardOf(n, size_, rank_);
      CheckShapes(in.numel(), mine.length, "all_gather input");
      at::Tensor padded_in = in;
      if (mine.length != chunk) {
        padded_in = at::zeros({chunk}, in.options());
        padded_in.narrow(0, 0, mine.length).copy_(in.reshape({-1}));
      }
      const bool exact = n == chunk * size_;
      at::Tensor flat = exact ? out.view({-1}) : at::empty({chunk * size_}, out.options());
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < size_; ++r) outputs[0].push_back(Wire(flat.narrow(0, r * chunk, chunk)));
      std::vector<at::Tensor> inputs{Wire(padded_in.reshape({-1}))};
      pg_->allgather(outputs, inputs)->wait();
      if (!exact) out.view({-1}).copy_(flat.narrow(0, 0, n));
    });
  }

  std::unique_ptr<Work> ReduceScatter(const at::Tensor& out, const at::Tensor& in,
                                      ReduceOp op) override {
    const uint64_t tag_base = NextTags(static_cast<uint64_t>(size_));
    return Enqueue("reduce_scatter", [this, out, in, op, tag_base]() mutable {
      const int64_t n = in.numel();
      const int64_t chunk = ShardChunk(n, size_);
      const ShardSpan mine = ShardOf(n, size_, rank_);
      CheckShapes(out.numel(), mine.length, "reduce_scatter output");
      const at::Tensor flat = in.reshape({-1});
      // Chunk c of the input, zero-padded to `chunk` elements when it runs past the end.
      auto chunk_of = [&](int c) -> at::Tensor {
        const ShardSpan s = ShardOf(n, size_, c);
        if (s.length == chunk) return flat.narrow(0, s.offset, chunk);
        at::Tensor padded = at::zeros({chunk}, in.options());
        if (s.length > 0) padded.narrow(0, 0, s.length).copy_(flat.narrow(0, s.offset, s.length));
        return padded;
      };
      // Ring reduce-scatter with chunk-sized buffers only: at step s rank r sends its running
      // partial sum of chunk r-s-1 to r+1 and adds its own chunk r-s-2 to what r-1 sent. After
      // size-1 steps it holds chunk r reduced over all ranks, summed in the fixed order
      // c+1, c+2, ..., c (mod size): deterministic.
      at::Tensor incoming = at::empty({chunk}, in.options());
      at::Tensor running[2] = {at::empty({chunk}, in.options()), at::empty({chunk}, in.options())};
      at::Tensor send = chunk_of(((rank_ - 1) % size_ + size_) % size_);
      const int next = (rank_ + 1) % size_;
      const int prev = (rank_ - 1 + size_) % size_;
      for (int step = 0; step < size_ - 1; ++step) {
        const int recv_chunk = ((rank_ - step - 2) % size_ + size_) % size_;
        std::vector<at::Tensor> send_v{Wire(send)};
        std::vector<at::Tensor> recv_v{Wire(incoming)};
        const int tag = static_cast<int>((tag_base + static_cast<uint64_t>(step)) % (1u << 30));
        auto recv_work = pg_->recv(recv_v, prev, tag);
        auto send_work = pg_->send(send_v, next, tag);
        recv_work->wait();
        send_work->wait();
        at::Tensor& acc = running[step % 2];
        acc.copy_(chunk_of(recv_chunk));
        Accumulate(acc, incoming, op);
        send = acc;
      }
      at::Tensor result =
          size_ == 1 ? flat.narrow(0, mine.offset, mine.length) : send.narrow(0, 0, mine.length);
      if (op == ReduceOp::kAvg) result = result / size_;
      out.view({-1}).copy_(result);
    });
  }

  std::unique_ptr<Work> Broadcast(const at::Tensor& tensor, int root) override {
    return Enqueue("broadcast", [this, tensor, root]() mutable {
      std::vector<at::Tensor> v{Wire(tensor)};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      pg_->broadcast(v, opts)->wait();
    });
  }

  std::unique_ptr<Work> Barrier() override {
    return Enqueue("barrier", [this]() { pg_->barrier()->wait(); });
  }

 private:
  void CheckShapes(int64_t got, int64_t want, const char* what) {
    if (got != want) {
      throw StatusError(Status::InvalidArgument(std::string(what) + " has " + std::to_string(got) +
                                                " elements, expected " + std::to_string(want) +
                                                " (ShardOf of the full tensor)"));
    }
  }

  uint64_t NextTags(uint64_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t base = next_tag_;
    next_tag_ += count;
    return base;
  }

  std::unique_ptr<Work> Enqueue(const char* op, std::function<void()> fn) {
    NoteCollectiveLaunched();  // the hang guard's progress (comm/launch_count.h)
    auto task = std::make_shared<std::packaged_task<Status()>>([this, op, fn]() -> Status {
      try {
        fn();
        return Status::Ok();
      } catch (const StatusError& e) {
        return e.status().Annotate(std::string("group ") + name_ + " " + op);
      } catch (const std::exception& e) {
        std::string what = e.what();
        size_t nl = what.find('\n');  // c10 errors append a backtrace; keep the first line
        if (nl != std::string::npos) what = what.substr(0, nl);
        return Status::Unavailable("rank " + std::to_string(rank_) + " of group " + name_ + ": " +
                                   op + " failed: " + what +
                                   " (a peer rank probably died; see its log)");
      }
    });
    auto work = std::make_unique<FutureWork>(task->get_future());
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return work;
  }

  void Loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  const std::string name_;
  const int rank_;
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  uint64_t next_tag_ = 1;                    // guarded by mu_
  std::thread worker_;
};

}  // namespace

StatusOr<std::unique_ptr<Comm>> CreateGlooComm(const c10::intrusive_ptr<c10d::Store>& store,
                                               const std::string& name, int rank, int size,
                                               const std::string& hostname,
                                               std::chrono::milliseconds timeout) {
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = timeout;
    opts->threads = 1;  // ops run one at a time from our worker anyway; fewer threads, less noise
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && *ifname != '\0') {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
    }
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("ftrain/group/" + name, store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
    return std::unique_ptr<Comm>(new GlooComm(std::move(pg), name, rank, size));
  } catch (const std::exception& e) {
    std::string what = e.what();
    size_t nl = what.find('\n');
    if (nl != std::string::npos) what = what.substr(0, nl);
    return Status::Unavailable("creating Gloo group '" + name + "' (rank " + std::to_string(rank) +
                               " of " + std::to_string(size) + ") failed: " + what);
  }
}

}  // namespace ftrain::comm
