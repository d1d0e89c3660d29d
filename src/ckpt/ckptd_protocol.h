// The ckptd wire protocol, shared by the daemon and its client library: every message is a
// 16-byte header (magic, version, type, payload length) and a payload of little-endian fixed
// integers and u32-length-prefixed strings. Decoding range-checks every field and never
// trusts a length; any violation is an InvalidArgument, on which the daemon disconnects the
// peer. No I/O here (see ckptd_client.h and daemon/server.h) and no file paths on the wire:
// the daemon derives every path itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/manifest.h"
#include "core/status.h"

namespace ftrain::ckpt::proto {

constexpr uint32_t kMagic = 0x44504b43;  // "CKPD"
constexpr uint16_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 16;
constexpr uint32_t kMaxPayload = 4u << 20;  // descriptors of very large models still fit
constexpr int kMaxPieces = 200000;
constexpr size_t kMaxNameBytes = 512;
constexpr size_t kMaxMetaBytes = 64u << 10;

enum class MsgType : uint16_t {
  kHello = 1,       // c->d: rank, world, pid, slot bytes wanted
  kHelloOk = 2,     // d->c: slot capacity, slot shm names
  kAcquire = 3,     // c->d: wait for a free slot of this rank
  kAcquireOk = 4,   // d->c: slot index
  kSubmit = 5,      // c->d: step, slot, meta, descriptor
  kSubmitOk = 6,    // d->c: queued
  kStatus = 7,      // c->d
  kStatusOk = 8,    // d->c: JSON text
  kError = 9,       // d->c: a refused (but well-formed) request; the connection stays
  kRestore = 10,    // c->d: [i64 step] this rank's persisted snapshot (of step) in memory?
  kRestoreOk = 11,  // d->c: u8 found, then (if found) a Submit naming the retained slot
  kFetchPeer = 12,  // c->d: pull this rank's replica of a step from peer memory (FetchPeer)
  kFetchOk = 13,    // d->c: FetchPeerOk; if found, RESTORE now serves it
};

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t type = 0;
  uint32_t length = 0;
  uint32_t reserved = 0;
};

std::string EncodeHeader(MsgType type, uint32_t length);
// Checks magic, version, known type and length <= kMaxPayload.
StatusOr<Header> DecodeHeader(const uint8_t* bytes);

struct Hello {
  int32_t rank = 0;
  int32_t world = 1;
  int32_t pid = 0;
  uint64_t slot_bytes = 0;
};
struct HelloOk {
  uint64_t slot_bytes = 0;
  std::vector<std::string> shm_names;  // one per slot of this rank
};

// One piece of the snapshot in the slot: a tensor slice or a blob.
struct PieceDesc {
  bool is_blob = false;
  std::string kind;  // tensor kind, or blob group
  std::string name;
  std::string policy;  // blobs only
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;  // tensors: global shape
  int64_t offset = 0;          // tensors: first element of this slice
  int64_t length = 0;          // elements (bytes for blobs)
  uint64_t slot_offset = 0;    // where the bytes start in the slot
};

struct Submit {
  int64_t step = 0;
  uint32_t slot = 0;
  uint64_t stall_ns = 0;  // what the trainer waited for a slot + copied (for the save log)
  CheckpointMeta meta;
  std::vector<PieceDesc> pieces;
  // Memory tier: the daemon keeps the snapshot in memory and replicates it to its buddy, but
  // never persists it (optional trailer after the generation; absent = false).
  bool memory_only = false;
};

std::string EncodeHello(const Hello& m);
StatusOr<Hello> DecodeHello(const std::string& payload);
std::string EncodeHelloOk(const HelloOk& m);
StatusOr<HelloOk> DecodeHelloOk(const std::string& payload);
std::string EncodeU32(uint32_t v);
StatusOr<uint32_t> DecodeU32(const std::string& payload);
std::string EncodeSubmit(const Submit& m);
// The snapshot a SUBMIT describes, as the checkpoint library takes it: tensor pieces point
// into the slot mapping at `base`, blobs are copied out of it.
ShardContents ContentsOf(const Submit& m, const uint8_t* base);
// XXH3 of each piece's bytes in the slot at `base`, in descriptor order (the hashes a shard
// file records), and the memory tier's digest of a rank's snapshot: XXH3 over those hashes
// (u64 little-endian, in order). The daemon computes them when it takes a memory snapshot;
// a restore recomputes them and compares the digest with the memory manifest's.
std::vector<uint64_t> PieceHashes(const Submit& m, const uint8_t* base);
uint64_t SnapshotDigest(const std::vector<uint64_t>& piece_hashes);

// RESTORE: empty (the newest snapshot the daemon holds for the rank) or one i64, the step
// wanted (the newest committed checkpoint, which need not be the newest snapshot: ranks that
// got further than a dead one hold a newer one that was never committed). Returns -1 for empty.
std::string EncodeRestore(int64_t step);
StatusOr<int64_t> DecodeRestore(const std::string& payload);
// RESTORE_OK: `found` and, if found, the retained snapshot's descriptor (Submit encoding).
std::string EncodeRestoreOk(const Submit* m);
StatusOr<std::optional<Submit>> DecodeRestoreOk(const std::string& payload, uint64_t slot_bytes);
// Validates everything that does not need daemon state: step and world ranges, safe names,
// dtypes, shapes, slice bounds, and that every piece lies inside [0, slot_bytes).
StatusOr<Submit> DecodeSubmit(const std::string& payload, uint64_t slot_bytes);

// FETCH_PEER (after HELLO): the daemon pulls the replica of this rank at `step` from a
// peer's memory into one of the rank's slots. `address` "" = every peer of the run dir.
// `timeout_s`: how long the client waits for FETCH_PEER_OK (0 = no bound); the daemon
// answers within half of it (not found, if the peers took longer) and never later, so a
// reply can never arrive after the client gave up and answer its next request.
struct FetchPeer {
  int64_t step = 0;
  std::string address;
  double timeout_s = 0;
};
struct FetchPeerOk {
  bool found = false;
  int64_t step = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::string source;  // "peer HOST:PORT"
  std::string detail;  // not found: what each peer said
};
std::string EncodeFetchPeer(const FetchPeer& m);
StatusOr<FetchPeer> DecodeFetchPeer(const std::string& payload);
std::string EncodeFetchPeerOk(const FetchPeerOk& m);
StatusOr<FetchPeerOk> DecodeFetchPeerOk(const std::string& payload);

// A full message (header + payload).
std::string Frame(MsgType type, const std::string& payload);

// Names the daemon derives from (run dir, node); never sent by a client.
//   RUN/ckptd-<node>/        0700, owned by the job's user
//   RUN/ckptd-<node>/sock    the Unix socket;  RUN/ckptd-<node>/lock  one daemon per node
//   /dev/shm/ftrain-ckptd-<hash(run dir, node)>-r<rank>-s<slot>   0600 snapshot slots
std::string SocketDir(const std::string& run_dir, const std::string& node);
std::string SocketPath(const std::string& run_dir, const std::string& node);
std::string ShmPrefix(const std::string& run_dir, const std::string& node);  // no leading '/'
std::string ShmName(const std::string& run_dir, const std::string& node, int rank, int slot);
// A node id usable in a directory name: [A-Za-z0-9._-], 1..64 chars.
bool IsSafeNodeId(const std::string& node);

// A tensor kind / blob group / name that can become an HDF5 path component: [A-Za-z0-9._/-],
// non-empty, no "..", no leading or trailing '/', no "//".
bool IsSafeDatasetName(const std::string& s);

}  // namespace ftrain::ckpt::proto
