// The peer (daemon <-> daemon, TCP) wire format of buddy replication: a 16-byte frame header
// with a per-type hard bound on the payload (checked before anything is allocated), the
// messages of the handshake, STORE/FETCH and the replica image, and blocking frame I/O with
// a deadline per frame (a silent or trickling peer cannot pin a thread). No policy here:
// peer_auth.h proves identities, peer_server.h / replicator.h / peer_fetch.h act.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "core/env.h"
#include "core/status.h"

namespace ftrain::ckptd::peer {

constexpr uint32_t kMagic = 0x52504b43;  // "CKPR"
constexpr uint16_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 16;
constexpr uint32_t kNonceBytes = 32;
constexpr uint32_t kMacBytes = 32;  // HMAC-SHA256
constexpr uint32_t kChunkBytes = 1u << 20;
constexpr size_t kMaxJobIdBytes = 64;
constexpr size_t kMaxReasonBytes = 1024;

enum class PeerMsg : uint16_t {
  kHello = 1,      // c->s: nonce_c, job id
  kChallenge = 2,  // s->c: nonce_s, server MAC
  kAuth = 3,       // c->s: client MAC
  kAuthOk = 4,     // s->c
  kStore = 5,      // c->s: a replica follows (ReplicaHeader)
  kAccept = 6,     // s->c: send the image
  kData = 7,       // both: the next bytes of the image (<= kChunkBytes)
  kEnd = 8,        // both: the image is complete
  kStoreOk = 9,    // s->c: received whole, every piece's XXH3 verified, now the newest
  kRefused = 10,   // s->c: a well-formed request that is declined (reason text)
  kFetch = 11,     // c->s: job, rank, step
  kOffer = 12,     // s->c: the replica asked for (ReplicaHeader), then DATA..., END
  kAbort = 13,     // c->s: the image will not be completed (reason text)
};

struct FrameHeader {
  PeerMsg type = PeerMsg::kHello;
  uint32_t length = 0;
};

std::string EncodeFrameHeader(PeerMsg type, uint32_t length);
// Magic, version, reserved == 0, known type, and length within that type's bound.
StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t* bytes);
// The largest payload a frame of `type` may carry (0 for unknown types).
uint32_t MaxPayload(PeerMsg type);
const char* PeerMsgName(PeerMsg type);

struct Hello {
  std::string nonce;  // kNonceBytes
  std::string job;
};
std::string EncodeHello(const Hello& m);
StatusOr<Hello> DecodeHello(const std::string& payload);

struct Challenge {
  std::string nonce;  // kNonceBytes
  std::string mac;    // kMacBytes
};
std::string EncodeChallenge(const Challenge& m);
StatusOr<Challenge> DecodeChallenge(const std::string& payload);

// What STORE and OFFER carry: whose snapshot, how big its image is (the slot bytes
// [0, extent) that hold every piece), the XXH3 of each piece as the persist recorded it
// (the manifest's hashes) and the SUBMIT descriptor.
struct ReplicaHeader {
  std::string job;
  int32_t rank = 0;
  int64_t step = 0;
  uint64_t extent = 0;
  std::vector<uint64_t> xxh3;  // parallel to submit.pieces
  ckpt::proto::Submit submit;
};
std::string EncodeReplicaHeader(const ReplicaHeader& m);
// Validates the descriptor (ckpt::proto::DecodeSubmit with slot size = extent), that
// step and world agree with it, rank < world, one hash per piece, extent <= max_extent.
StatusOr<ReplicaHeader> DecodeReplicaHeader(const std::string& payload, uint64_t max_extent);

struct Fetch {
  std::string job;
  int32_t rank = 0;
  int64_t step = 0;
};
std::string EncodeFetch(const Fetch& m);
StatusOr<Fetch> DecodeFetch(const std::string& payload);

// A job id: [A-Za-z0-9._-], 1..64 chars.
bool IsSafeJobId(const std::string& job);
// The bytes [0, extent) of a slot that hold every piece of `submit`.
uint64_t ImageExtent(const ckpt::proto::Submit& submit);
// Each piece's bytes in the image at `base` against `xxh3` (Corruption naming the piece).
Status VerifyPieces(const ckpt::proto::Submit& submit, const std::vector<uint64_t>& xxh3,
                    const uint8_t* base);

// A connected TCP socket with frame I/O; every read and write of one frame must finish
// within `timeout_s`. Owns the fd.
class PeerConn {
 public:
  PeerConn(int fd, std::string peer, double timeout_s, Env* env);
  ~PeerConn();
  PeerConn(const PeerConn&) = delete;
  PeerConn& operator=(const PeerConn&) = delete;

  const std::string& peer() const { return peer_; }
  int fd() const { return fd_; }
  // The deadline of each frame from now on.
  void set_timeout(double timeout_s) { timeout_s_ = timeout_s; }
  // The last Receive failed because the peer closed the connection between two frames.
  bool closed_between_frames() const { return clean_eof_; }
  // Whether any byte came from the peer so far.
  bool received_any() const { return got_any_; }
  Status Send(PeerMsg type, const std::string& payload);
  Status SendData(const uint8_t* data, uint32_t n);
  // One frame; its payload (up to MaxPayload(type), never more) is read into *payload.
  StatusOr<PeerMsg> Receive(std::string* payload);
  // Expects exactly `want`; a REFUSED is returned as FailedPrecondition with its reason.
  Status Expect(PeerMsg want, std::string* payload);
  // Sends [0, extent) of `image` as DATA frames and END; stops with Aborted (after an
  // ABORT frame) once *cancel becomes true.
  Status SendImage(const uint8_t* image, uint64_t extent, const std::atomic<bool>* cancel);
  // Receives DATA frames straight into dst[0, extent) and the END; anything else, or a
  // byte count other than extent, is an error.
  Status ReceiveImage(uint8_t* dst, uint64_t extent);

 private:
  Status WriteAll(const void* p, size_t n);
  Status ReadAll(void* p, size_t n, double deadline);
  int fd_;
  std::string peer_;
  double timeout_s_;
  Env* env_;                // the clock of the deadlines
  bool got_any_ = false;    // any byte received
  uint64_t bytes_in_ = 0;   // bytes received
  bool eof_ = false;        // the peer closed its side
  bool clean_eof_ = false;  // see closed_between_frames()
};

// "HOST:PORT" -> host and port (1..65535, or 0 where allow_zero).
Status ParseHostPort(const std::string& s, bool allow_zero, std::string* host, int* port);
// A TCP connection to "HOST:PORT" within timeout_s.
StatusOr<std::unique_ptr<PeerConn>> ConnectPeer(const std::string& address, double timeout_s,
                                                Env* env);

}  // namespace ftrain::ckptd::peer
