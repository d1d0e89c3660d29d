// Peer frames, messages and blocking frame I/O with deadlines.
#include "daemon/peer_wire.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ckpt/filename.h"
#include "ckpt/shard_file.h"
#include "ckpt/wire_codec.h"
#include "core/env.h"

namespace ftrain::ckptd::peer {
namespace proto = ckpt::proto;
using ckpt::WireReader;
using ckpt::WireWriter;
namespace {

Status Bad(const std::string& what) { return Status::InvalidArgument("peer protocol: " + what); }

}  // namespace

uint32_t MaxPayload(PeerMsg type) {
  switch (type) {
    case PeerMsg::kHello:
      return 4 + kNonceBytes + 4 + kMaxJobIdBytes;
    case PeerMsg::kChallenge:
      return kNonceBytes + kMacBytes;
    case PeerMsg::kAuth:
      return kMacBytes;
    case PeerMsg::kAuthOk:
    case PeerMsg::kAccept:
    case PeerMsg::kEnd:
    case PeerMsg::kStoreOk:
      return 0;
    case PeerMsg::kStore:
    case PeerMsg::kOffer:  // the descriptor plus one hash per piece
      return proto::kMaxPayload + 8 * static_cast<uint32_t>(proto::kMaxPieces) + 256;
    case PeerMsg::kData:
      return kChunkBytes;
    case PeerMsg::kRefused:
    case PeerMsg::kAbort:
      return 4 + kMaxReasonBytes;
    case PeerMsg::kFetch:
      return 4 + kMaxJobIdBytes + 4 + 8;
  }
  return 0;
}

const char* PeerMsgName(PeerMsg type) {
  switch (type) {
    case PeerMsg::kHello:
      return "HELLO";
    case PeerMsg::kChallenge:
      return "CHALLENGE";
    case PeerMsg::kAuth:
      return "AUTH";
    case PeerMsg::kAuthOk:
      return "AUTH_OK";
    case PeerMsg::kStore:
      return "STORE";
    case PeerMsg::kAccept:
      return "ACCEPT";
    case PeerMsg::kData:
      return "DATA";
    case PeerMsg::kEnd:
      return "END";
    case PeerMsg::kStoreOk:
      return "STORE_OK";
    case PeerMsg::kRefused:
      return "REFUSED";
    case PeerMsg::kFetch:
      return "FETCH";
    case PeerMsg::kOffer:
      return "OFFER";
    case PeerMsg::kAbort:
      return "ABORT";
  }
  return "?";
}

std::string EncodeFrameHeader(PeerMsg type, uint32_t length) {
  return ckpt::EncodeFrameHeader16(kMagic, kVersion, static_cast<uint16_t>(type), length);
}

StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t* bytes) {
  uint32_t magic = 0, length = 0, reserved = 0;
  uint16_t version = 0, type = 0;
  std::memcpy(&magic, bytes, 4);
  std::memcpy(&version, bytes + 4, 2);
  std::memcpy(&type, bytes + 6, 2);
  std::memcpy(&length, bytes + 8, 4);
  std::memcpy(&reserved, bytes + 12, 4);
  if (magic != kMagic) return Bad("bad magic (not a ckptd peer)");
  if (version != kVersion) return Bad("version " + std::to_string(version));
  if (reserved != 0) return Bad("reserved header field is not 0");
  const uint32_t max = MaxPayload(static_cast<PeerMsg>(type));
  if (type < 1 || type > static_cast<uint16_t>(PeerMsg::kAbort))
    return Bad("unknown message type " + std::to_string(type));
  if (length > max) {
    return Bad(std::string(PeerMsgName(static_cast<PeerMsg>(type))) + " of " +
               std::to_string(length) + " bytes exceeds its bound of " + std::to_string(max));
  }
  return FrameHeader{static_cast<PeerMsg>(type), length};
}

bool IsSafeJobId(const std::string& job) { return proto::IsSafeNodeId(job); }

std::string EncodeHello(const Hello& m) {
  WireWriter w;
  w.Str(m.nonce);
  w.Str(m.job);
  return w.Take();
}

StatusOr<Hello> DecodeHello(const std::string& payload) {
  WireReader r(payload);
  Hello m;
  if (!r.Str(&m.nonce, kNonceBytes) || m.nonce.size() != kNonceBytes ||
      !r.Str(&m.job, kMaxJobIdBytes) || !r.Done()) {
    return Bad("malformed HELLO");
  }
  if (!IsSafeJobId(m.job)) return Bad("HELLO with an unsafe job id");
  return m;
}

std::string EncodeChallenge(const Challenge& m) { return m.nonce + m.mac; }

StatusOr<Challenge> DecodeChallenge(const std::string& payload) {
  if (payload.size() != kNonceBytes + kMacBytes) return Bad("malformed CHALLENGE");
  return Challenge{payload.substr(0, kNonceBytes), payload.substr(kNonceBytes)};
}

std::string EncodeReplicaHeader(const ReplicaHeader& m) {
  WireWriter w;
  w.Str(m.job);
  w.Put(m.rank);
  w.Put(m.step);
  w.Put(m.extent);
  w.Put<uint32_t>(static_cast<uint32_t>(m.xxh3.size()));
  for (uint64_t h : m.xxh3) w.Put(h);
  w.Raw(proto::EncodeSubmit(m.submit));
  return w.Take();
}

StatusOr<ReplicaHeader> DecodeReplicaHeader(const std::string& payload, uint64_t max_extent) {
  WireReader r(payload);
  ReplicaHeader m;
  uint32_t n = 0;
  if (!r.Str(&m.job, kMaxJobIdBytes) || !r.Get(&m.rank) || !r.Get(&m.step) || !r.Get(&m.extent) ||
      !r.Get(&n) || n > static_cast<uint32_t>(proto::kMaxPieces)) {
    return Bad("malformed replica header");
  }
  m.xxh3.resize(n);  // bounded: n <= kMaxPieces, and the bytes are checked one by one
  for (auto& h : m.xxh3) {
    if (!r.Get(&h)) return Bad("malformed replica header (hashes)");
  }
  if (!IsSafeJobId(m.job)) return Bad("replica header with an unsafe job id");
  if (m.extent == 0 || m.extent > max_extent) {
    return Bad("replica image of " + std::to_string(m.extent) + " bytes (at most " +
               std::to_string(max_extent) + ")");
  }
  auto sub = proto::DecodeSubmit(r.Rest(), m.extent);
  if (!sub.ok()) return sub.status();
  m.submit = std::move(sub).value();
  if (m.submit.step != m.step) return Bad("replica header step differs from its descriptor");
  if (m.rank < 0 || m.rank >= m.submit.meta.world_size) return Bad("replica rank out of range");
  if (m.xxh3.size() != m.submit.pieces.size()) return Bad("replica header: one hash per piece");
  if (ImageExtent(m.submit) > m.extent) return Bad("replica pieces lie outside the image");
  return m;
}

std::string EncodeFetch(const Fetch& m) {
  WireWriter w;
  w.Str(m.job);
  w.Put(m.rank);
  w.Put(m.step);
  return w.Take();
}

StatusOr<Fetch> DecodeFetch(const std::string& payload) {
  WireReader r(payload);
  Fetch m;
  if (!r.Str(&m.job, kMaxJobIdBytes) || !r.Get(&m.rank) || !r.Get(&m.step) || !r.Done())
    return Bad("malformed FETCH");
  if (!IsSafeJobId(m.job)) return Bad("FETCH with an unsafe job id");
  if (m.rank < 0 || m.rank >= ckpt::kMaxWorldSize || m.step < 0 || m.step > ckpt::kMaxStep)
    return Bad("FETCH rank or step out of range");
  return m;
}

uint64_t ImageExtent(const proto::Submit& submit) {
  uint64_t end = 0;
  for (const auto& p : submit.pieces) {
    const uint64_t elem = p.is_blob ? 1 : ckpt::DTypeSize(p.dtype);
    end = std::max(end, p.slot_offset + static_cast<uint64_t>(p.length) * elem);
  }
  return end == 0 ? 1 : end;
}

Status VerifyPieces(const proto::Submit& submit, const std::vector<uint64_t>& xxh3,
                    const uint8_t* base) {
  if (xxh3.size() != submit.pieces.size())
    return Status::Corruption("replica: " + std::to_string(xxh3.size()) + " hashes for " +
                              std::to_string(submit.pieces.size()) + " pieces");
  for (size_t i = 0; i < xxh3.size(); ++i) {
    const auto& p = submit.pieces[i];
    const uint64_t n = static_cast<uint64_t>(p.length) * (p.is_blob ? 1 : ckpt::DTypeSize(p.dtype));
    if (ckpt::Xxh3(base + p.slot_offset, n) != xxh3[i]) {
      return Status::Corruption("replica of step " + std::to_string(submit.step) + ": piece " +
                                p.kind + "/" + p.name + " does not match its recorded XXH3");
    }
  }
  return Status::Ok();
}

PeerConn::PeerConn(int fd, std::string peer, double timeout_s, Env* env)
    : fd_(fd), peer_(std::move(peer)), timeout_s_(timeout_s), env_(env) {}

PeerConn::~PeerConn() {
  if (fd_ >= 0) ::close(fd_);
}

Status PeerConn::WriteAll(const void* p, size_t n) {
  const double deadline = NowSeconds(env_) + timeout_s_;
  const auto* b = static_cast<const uint8_t*>(p);
  size_t done = 0;
  while (done < n) {
    const int left_ms = static_cast<int>((deadline - NowSeconds(env_)) * 1000);
    if (left_ms <= 0) return Status::DeadlineExceeded("peer " + peer_ + " does not read (send)");
    pollfd pf{fd_, POLLOUT, 0};
    int pr = ::poll(&pf, 1, left_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t w = ::send(fd_, b + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (w < 0) return Status::Unavailable("send to peer " + peer_ + ": " + std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status PeerConn::ReadAll(void* p, size_t n, double deadline) {
  auto* b = static_cast<uint8_t*>(p);
  size_t got = 0;
  while (got < n) {
    const int left_ms = static_cast<int>((deadline - NowSeconds(env_)) * 1000);
    if (left_ms <= 0) {
      return Status::DeadlineExceeded("peer " + peer_ + " sent " + std::to_string(got) + " of " +
                                      std::to_string(n) + " bytes within " +
                                      std::to_string(timeout_s_) + " s");
    }
    pollfd pf{fd_, POLLIN, 0};
    int pr = ::poll(&pf, 1, left_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t r = ::recv(fd_, b + got, n - got, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r < 0) return Status::Unavailable("recv from peer " + peer_ + ": " + std::strerror(errno));
    if (r == 0) {
      eof_ = true;
      return Status::Unavailable("peer " + peer_ + " closed the connection" +
                                 (got > 0 ? " in the middle of a frame (truncated)" : ""));
    }
    got += static_cast<size_t>(r);
    bytes_in_ += static_cast<uint64_t>(r);
    got_any_ = true;
  }
  return Status::Ok();
}

Status PeerConn::Send(PeerMsg type, const std::string& payload) {
  const std::string msg = EncodeFrameHeader(type, static_cast<uint32_t>(payload.size())) + payload;
  return WriteAll(msg.data(), msg.size());
}

Status PeerConn::SendData(const uint8_t* data, uint32_t n) {
  const std::string h = EncodeFrameHeader(PeerMsg::kData, n);
  FT_RETURN_IF_ERROR(WriteAll(h.data(), h.size()));
  return WriteAll(data, n);
}

StatusOr<PeerMsg> PeerConn::Receive(std::string* payload) {
  const double deadline = NowSeconds(env_) + timeout_s_;
  uint8_t h[kHeaderBytes];
  const uint64_t seen = bytes_in_;
  Status s = ReadAll(h, sizeof(h), deadline);
  clean_eof_ = !s.ok() && eof_ && bytes_in_ == seen;
  FT_RETURN_IF_ERROR(s);
  FT_ASSIGN_OR_RETURN(FrameHeader fh, DecodeFrameHeader(h));
  payload->assign(fh.length, '\0');  // bounded by MaxPayload(type)
  FT_RETURN_IF_ERROR(ReadAll(payload->data(), fh.length, deadline));
  return fh.type;
}

Status PeerConn::Expect(PeerMsg want, std::string* payload) {
  FT_ASSIGN_OR_RETURN(PeerMsg got, Receive(payload));
  if (got == want) return Status::Ok();
  if (got == PeerMsg::kRefused) {
    std::string reason = payload->size() >= 4 ? payload->substr(4) : "";
    return Status::FailedPrecondition("peer " + peer_ + " refused: " + reason);
  }
  return Bad(std::string("peer ") + peer_ + " sent " + PeerMsgName(got) + " where " +
             PeerMsgName(want) + " was expected");
}

Status PeerConn::SendImage(const uint8_t* image, uint64_t extent, const std::atomic<bool>* cancel) {
  for (uint64_t pos = 0; pos < extent;) {
    if (cancel != nullptr && cancel->load()) {
      WireWriter w;
      w.Str("the snapshot's slot was reused before it was sent whole");
      (void)Send(PeerMsg::kAbort, w.Take());  // ignored: the connection is dropped anyway
      return Status::Aborted("the slot was reused while it was being sent");
    }
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kChunkBytes, extent - pos));
    FT_RETURN_IF_ERROR(SendData(image + pos, n));
    pos += n;
  }
  if (cancel != nullptr && cancel->load()) {
    (void)Send(PeerMsg::kAbort, "");  // ignored: the connection is dropped anyway
    return Status::Aborted("the slot was reused while it was being sent");
  }
  return Send(PeerMsg::kEnd, "");
}

Status PeerConn::ReceiveImage(uint8_t* dst, uint64_t extent) {
  uint64_t pos = 0;
  for (;;) {
    const double deadline = NowSeconds(env_) + timeout_s_;
    uint8_t h[kHeaderBytes];
    FT_RETURN_IF_ERROR(ReadAll(h, sizeof(h), deadline));
    FT_ASSIGN_OR_RETURN(FrameHeader fh, DecodeFrameHeader(h));
    if (fh.type == PeerMsg::kEnd) {
      if (pos != extent) {
        return Bad("image ended after " + std::to_string(pos) + " of " + std::to_string(extent) +
                   " bytes");
      }
      return Status::Ok();
    }
    if (fh.type == PeerMsg::kAbort) {
      std::string reason(fh.length, '\0');
      FT_RETURN_IF_ERROR(ReadAll(reason.data(), fh.length, deadline));
      return Status::Aborted("peer " + peer_ + " aborted the image" +
                             (reason.size() > 4 ? ": " + reason.substr(4) : std::string()));
    }
    if (fh.type != PeerMsg::kData) {
      return Bad(std::string(PeerMsgName(fh.type)) + " in the middle of an image");
    }
    if (fh.length > extent - pos) {
      return Bad("image data beyond its announced " + std::to_string(extent) + " bytes");
    }
    FT_RETURN_IF_ERROR(ReadAll(dst + pos, fh.length, deadline));
    pos += fh.length;
  }
}

Status ParseHostPort(const std::string& s, bool allow_zero, std::string* host, int* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= s.size())
    return Status::InvalidArgument("'" + s + "' is not HOST:PORT");
  *host = s.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  const std::string p = s.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
    return Status::InvalidArgument("'" + s + "': the port is not a number");
  *port = std::stoi(p);
  if (*port > 65535 || (*port == 0 && !allow_zero))
    return Status::InvalidArgument("'" + s + "': port out of range");
  return Status::Ok();
}

StatusOr<std::unique_ptr<PeerConn>> ConnectPeer(const std::string& address, double timeout_s,
                                                Env* env) {
  std::string host;
  int port = 0;
  FT_RETURN_IF_ERROR(ParseHostPort(address, false, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
    return Status::Unavailable("resolve '" + host + "': " + ::gai_strerror(e));
  Status last = Status::Unavailable("no address for '" + address + "'");
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pf{fd, POLLOUT, 0};
      rc = ::poll(&pf, 1, static_cast<int>(timeout_s * 1000)) == 1 ? 0 : -1;
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 0 && (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
        errno = err;
        rc = -1;
      } else if (rc != 0) {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      int one = 1;
      // Ignored: only latency of the small handshake frames.
      (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::freeaddrinfo(res);
      return std::make_unique<PeerConn>(fd, address, timeout_s, env);
    }
    last = Status::Unavailable("connect to peer " + address + ": " + std::strerror(errno));
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return last;
}

}  // namespace ftrain::ckptd::peer
