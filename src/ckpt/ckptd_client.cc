// ckptd client: Unix socket + shared-memory slots.
#include "ckpt/ckptd_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"

namespace ftrain::ckpt {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
uint64_t Align(uint64_t v) { return (v + 63) & ~uint64_t{63}; }

struct Copy {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t n;
};

// Copies with `threads` threads, each taking an equal share of the bytes (pieces are split
// at 4 KiB boundaries). One core cannot saturate memory bandwidth; the trainer's cores are
// idle during the stall anyway. The copy does not change any bit of the snapshot.
void ParallelCopy(const std::vector<Copy>& copies, int threads) {
  uint64_t total = 0;
  for (const auto& c : copies) total += c.n;
  if (threads <= 1 || total < (8u << 20)) {
    for (const auto& c : copies) std::memcpy(c.dst, c.src, c.n);
    return;
  }
  const uint64_t share = ((total / threads) + 4095) & ~uint64_t{4095};
  // Cut the concatenated byte range [0, total) into `threads` contiguous parts.
  auto run = [&](uint64_t begin, uint64_t end) {
    uint64_t pos = 0;
    for (const auto& c : copies) {
      const uint64_t lo = std::max(begin, pos), hi = std::min(end, pos + c.n);
      if (lo < hi) std::memcpy(c.dst + (lo - pos), c.src + (lo - pos), hi - lo);
      pos += c.n;
      if (pos >= end) break;
    }
  };
  // Part i is [share * i, share * (i + 1)) clipped to the total; memcpy cannot fail.
  (void)ParallelFor(static_cast<size_t>(threads), threads, [&](size_t i) {
    const uint64_t b = std::min(total, share * static_cast<uint64_t>(i));
    run(b, std::min(total, b + share));
    return Status::Ok();
  });
}

}  // namespace

uint64_t SlotBytesFor(const ShardContents& contents) {
  uint64_t n = 0;
  for (const auto& t : contents.tensors)
    n = Align(n + static_cast<uint64_t>(t.length) * DTypeSize(t.dtype));
  for (const auto& b : contents.blobs) n = Align(n + b.bytes.size());
  return n == 0 ? 64 : n;
}

StatusOr<std::unique_ptr<CkptdClient>> CkptdClient::ConnectRaw(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("ckptd socket path '" + socket_path + "' is too long");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return Status::Unavailable("cannot connect to ckptd at '" + socket_path +
                               "': " + std::strerror(err) + " (is ckptd running on this node?)");
  }
  // The run directory is shared: whoever can write it can plant a socket there. Checkpoints go
  // only to a daemon of this user (the kernel says who listens; a file's owner could lie).
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != ::geteuid()) {
    const std::string who = len == sizeof(peer) ? std::to_string(peer.uid) : "unknown";
    ::close(fd);
    return Status::FailedPrecondition(
        "the process listening on '" + socket_path + "' runs as uid " + who +
        ", not as this user (" + std::to_string(::geteuid()) +
        "): refusing to hand checkpoints to it (another user's daemon, or a socket planted in "
        "the run directory)");
  }
  std::unique_ptr<CkptdClient> c(new CkptdClient());
  c->fd_ = fd;
  return c;
}

bool HasDeviceTensors(const ShardContents& contents) {
  for (const auto& t : contents.tensors) {
    if (t.on_device) return true;
  }
  return false;
}

StatusOr<std::unique_ptr<CkptdClient>> CkptdClient::Connect(const std::string& run_dir,
                                                            const std::string& node, int rank,
                                                            int world, uint64_t slot_bytes,
                                                            DeviceMemory* device) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CkptdClient> c, ConnectRaw(proto::SocketPath(run_dir, node)));
  proto::Hello h{rank, world, static_cast<int32_t>(getpid()), slot_bytes};
  FT_ASSIGN_OR_RETURN(std::string reply, c->Call(proto::MsgType::kHello, proto::EncodeHello(h),
                                                 proto::MsgType::kHelloOk, 60));
  FT_ASSIGN_OR_RETURN(proto::HelloOk ok, proto::DecodeHelloOk(reply));
  c->slot_bytes_ = ok.slot_bytes;
  // Before the first registration: a later slot that fails to map returns early, and the
  // destructor must unregister the slots registered so far before it unmaps them (a stale
  // registration would make a later mapping at the same address unpinnable, or DMA into
  // the old pages).
  c->device_ = device;
  for (const auto& name : ok.shm_names) {
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return Status::IOError("shm_open '" + name + "': " + std::strerror(errno));
    // Pre-faulted: the first snapshot's copy does not pay the page-table faults.
    void* p =
        ::mmap(nullptr, ok.slot_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    ::close(fd);  // the mapping keeps the segment
    if (p == MAP_FAILED) return Status::IOError("mmap '" + name + "': " + std::strerror(errno));
    c->maps_.emplace_back(p, ok.slot_bytes);
    if (device != nullptr) device->RegisterHost(p, ok.slot_bytes);
  }
  return c;
}

int CkptdClient::DefaultCopyThreads() { return std::min(4, DefaultThreads()); }

CkptdClient::~CkptdClient() {
  for (auto& m : maps_) {
    if (device_ != nullptr) device_->UnregisterHost(m.first);
    ::munmap(m.first, m.second);
  }
  if (fd_ >= 0) ::close(fd_);
}

Status CkptdClient::SendRaw(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::Unavailable(std::string("ckptd went away (send: ") + std::strerror(errno) +
                                 ")");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

StatusOr<std::pair<proto::MsgType, std::string>> CkptdClient::Receive(double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto read_exact = [&](char* dst, size_t n) -> Status {
    size_t got = 0;
    while (got < n) {
      const int left_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left_ms <= 0) return Status::DeadlineExceeded("no answer from ckptd in time");
      pollfd p{fd_, POLLIN, 0};
      int pr = ::poll(&p, 1, left_ms);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) continue;
      ssize_t r = ::recv(fd_, dst + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return Status::Unavailable("ckptd closed the connection");
      got += static_cast<size_t>(r);
    }
    return Status::Ok();
  };
  char hdr[proto::kHeaderBytes];
  FT_RETURN_IF_ERROR(read_exact(hdr, sizeof(hdr)));
  FT_ASSIGN_OR_RETURN(proto::Header h, proto::DecodeHeader(reinterpret_cast<uint8_t*>(hdr)));
  std::string payload(h.length, '\0');
  FT_RETURN_IF_ERROR(read_exact(payload.data(), payload.size()));
  return std::make_pair(static_cast<proto::MsgType>(h.type), std::move(payload));
}

StatusOr<std::string> CkptdClient::Call(proto::MsgType type, const std::string& payload,
                                        proto::MsgType want, double timeout_s) {
  FT_RETURN_IF_ERROR(SendRaw(proto::Frame(type, payload)));
  FT_ASSIGN_OR_RETURN(auto reply, Receive(timeout_s));
  if (reply.first == proto::MsgType::kError) {
    return Status::FailedPrecondition("ckptd refused the request: " + reply.second);
  }
  if (reply.first != want)
    return Status::Internal("ckptd answered with an unexpected message type");
  return std::move(reply.second);
}

StatusOr<SubmitStats> CkptdClient::Submit(const CheckpointMeta& meta, const ShardContents& contents,
                                          double timeout_s) {
  FT_ASSIGN_OR_RETURN(Pending p, BeginSubmit(meta, contents, timeout_s));
  return FinishSubmit(std::move(p));
}

StatusOr<CkptdClient::Pending> CkptdClient::BeginSubmit(const CheckpointMeta& meta,
                                                        const ShardContents& contents,
                                                        double timeout_s) {
  SubmitStats st;
  const uint64_t need = SlotBytesFor(contents);
  if (need > slot_bytes_) {
    return Status::InvalidArgument(
        "snapshot of " + std::to_string(need) + " bytes does not fit the daemon's slots of " +
        std::to_string(slot_bytes_) + " bytes; reconnect with a larger size");
  }
  auto t0 = Clock::now();
  FT_ASSIGN_OR_RETURN(std::string a,
                      Call(proto::MsgType::kAcquire, "", proto::MsgType::kAcquireOk, timeout_s));
  FT_ASSIGN_OR_RETURN(uint32_t slot, proto::DecodeU32(a));
  if (slot >= maps_.size())
    return Status::Internal("ckptd gave slot " + std::to_string(slot) + " of " +
                            std::to_string(maps_.size()));
  st.wait_s = Since(t0);
  st.slot = slot;

  auto t1 = Clock::now();
  auto* base = static_cast<uint8_t*>(maps_[slot].first);
  proto::Submit sub;
  sub.step = meta.step;
  sub.slot = slot;
  sub.meta = meta;
  uint64_t off = 0;
  std::vector<Copy> copies;
  std::vector<DeviceCopy> device_copies;  // GPU state: straight into the slot
  for (const auto& t : contents.tensors) {
    const uint64_t n = static_cast<uint64_t>(t.length) * DTypeSize(t.dtype);
    if (n > 0 && t.on_device) {
      if (device_ == nullptr) {
        return Status::Internal("tensor " + t.kind + "/" + t.name +
                                " is in device memory, but the ckptd client has no device");
      }
      device_copies.push_back({base + off, t.data, n});
    } else if (n > 0) {
      copies.push_back({base + off, static_cast<const uint8_t*>(t.data), n});
    }
    proto::PieceDesc p;
    p.kind = t.kind;
    p.name = t.name;
    p.dtype = t.dtype;
    p.shape = t.shape;
    p.offset = t.offset;
    p.length = t.length;
    p.slot_offset = off;
    sub.pieces.push_back(std::move(p));
    off = Align(off + n);
  }
  for (const auto& b : contents.blobs) {
    if (!b.bytes.empty()) {
      copies.push_back(
          {base + off, reinterpret_cast<const uint8_t*>(b.bytes.data()), b.bytes.size()});
    }
    proto::PieceDesc p;
    p.is_blob = true;
    p.kind = b.group;
    p.name = b.name;
    p.policy = b.policy;
    p.length = static_cast<int64_t>(b.bytes.size());
    p.slot_offset = off;
    sub.pieces.push_back(std::move(p));
    off = Align(off + b.bytes.size());
  }
  if (!device_copies.empty()) {
    FT_RETURN_IF_ERROR(
        device_->StartCopyToHost(device_copies).Annotate("snapshot into ckptd slot"));
  }
  ParallelCopy(copies, copy_threads_);
  st.copy_s = Since(t1);
  st.bytes = off;
  return Pending{std::move(sub), st};
}

StatusOr<SubmitStats> CkptdClient::FinishSubmit(Pending pending) {
  SubmitStats st = pending.stats;
  auto t2 = Clock::now();
  if (device_ != nullptr) {
    FT_RETURN_IF_ERROR(device_->WaitForCopies().Annotate("snapshot into ckptd slot"));
  }
  pending.submit.stall_ns = static_cast<uint64_t>((st.wait_s + st.copy_s) * 1e9);
  FT_RETURN_IF_ERROR(Call(proto::MsgType::kSubmit, proto::EncodeSubmit(pending.submit),
                          proto::MsgType::kSubmitOk, 60)
                         .status());
  st.send_s = Since(t2);
  return st;
}

StatusOr<std::optional<CkptdClient::MemorySnapshot>> CkptdClient::Restore(int64_t step) {
  FT_ASSIGN_OR_RETURN(std::string reply, Call(proto::MsgType::kRestore, proto::EncodeRestore(step),
                                              proto::MsgType::kRestoreOk, 30));
  FT_ASSIGN_OR_RETURN(std::optional<proto::Submit> sub, proto::DecodeRestoreOk(reply, slot_bytes_));
  if (!sub.has_value()) return std::optional<MemorySnapshot>();
  if (sub->slot >= maps_.size()) {
    return Status::Internal("ckptd named slot " + std::to_string(sub->slot) + " of " +
                            std::to_string(maps_.size()));
  }
  MemorySnapshot snap;
  snap.base = static_cast<const uint8_t*>(maps_[sub->slot].first);
  snap.submit = std::move(*sub);
  return std::optional<MemorySnapshot>(std::move(snap));
}

StatusOr<CkptdClient::PeerFetch> CkptdClient::FetchFromPeer(int64_t step,
                                                            const std::string& address,
                                                            double timeout_s) {
  FT_ASSIGN_OR_RETURN(std::string reply, Call(proto::MsgType::kFetchPeer,
                                              proto::EncodeFetchPeer({step, address, timeout_s}),
                                              proto::MsgType::kFetchOk, timeout_s));
  FT_ASSIGN_OR_RETURN(proto::FetchPeerOk ok, proto::DecodeFetchPeerOk(reply));
  PeerFetch f;
  f.found = ok.found;
  f.step = ok.step;
  f.source = ok.source;
  f.bytes = ok.bytes;
  f.seconds = ok.seconds;
  f.detail = ok.detail;
  return f;
}

StatusOr<std::string> CkptdClient::StatusJson() {
  return Call(proto::MsgType::kStatus, "", proto::MsgType::kStatusOk, 10);
}

StatusOr<std::string> QueryCkptdStatus(const std::string& socket_path, double timeout_s) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<CkptdClient> c, CkptdClient::ConnectRaw(socket_path));
  (void)timeout_s;  // StatusJson uses its own 10 s deadline
  return c->StatusJson();
}

}  // namespace ftrain::ckpt
