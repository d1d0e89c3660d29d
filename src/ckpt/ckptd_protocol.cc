// Encoding and validating decoding of ckptd messages.
#include "ckpt/ckptd_protocol.h"

#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>

#include "ckpt/filename.h"
#include "ckpt/shard_file.h"
#include "ckpt/wire_codec.h"
#include "core/env.h"
#include "core/run_layout.h"

namespace ftrain::ckpt::proto {
namespace {

Status Bad(const std::string& what) { return Status::InvalidArgument("ckptd protocol: " + what); }

bool KnownType(uint16_t t) { return t >= 1 && t <= static_cast<uint16_t>(MsgType::kFetchOk); }

}  // namespace

bool IsSafeDatasetName(const std::string& s) {
  if (s.empty() || s.size() > kMaxNameBytes || s.front() == '/' || s.back() == '/') return false;
  if (s.find("..") != std::string::npos || s.find("//") != std::string::npos) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}

std::string SocketDir(const std::string& run_dir, const std::string& node) {
  return RunLayout(run_dir).daemon_dir(node);
}
std::string SocketPath(const std::string& run_dir, const std::string& node) {
  return JoinPath(SocketDir(run_dir, node), "sock");
}
std::string ShmPrefix(const std::string& run_dir, const std::string& node) {
  const std::string key = run_dir + "\n" + node;
  return "ftrain-ckptd-" + Hex64(Xxh3(key.data(), key.size())).substr(0, 12) + "-";
}
std::string ShmName(const std::string& run_dir, const std::string& node, int rank, int slot) {
  return "/" + ShmPrefix(run_dir, node) + "r" + std::to_string(rank) + "-s" + std::to_string(slot);
}
bool IsSafeNodeId(const std::string& node) {
  if (node.empty() || node.size() > 64 || node[0] == '.') return false;
  for (char c : node) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}
std::string EncodeHeader(MsgType type, uint32_t length) {
  return EncodeFrameHeader16(kMagic, kVersion, static_cast<uint16_t>(type), length);
}

StatusOr<Header> DecodeHeader(const uint8_t* bytes) {
  Header h;
  std::memcpy(&h.magic, bytes, 4);
  std::memcpy(&h.version, bytes + 4, 2);
  std::memcpy(&h.type, bytes + 6, 2);
  std::memcpy(&h.length, bytes + 8, 4);
  std::memcpy(&h.reserved, bytes + 12, 4);
  if (h.magic != kMagic) return Bad("bad magic");
  if (h.version != kVersion) {
    return Bad("version " + std::to_string(h.version) + " (this daemon speaks " +
               std::to_string(kVersion) + ")");
  }
  if (!KnownType(h.type)) return Bad("unknown message type " + std::to_string(h.type));
  if (h.length > kMaxPayload)
    return Bad("payload of " + std::to_string(h.length) + " bytes is too large");
  return h;
}

std::string Frame(MsgType type, const std::string& payload) {
  return EncodeHeader(type, static_cast<uint32_t>(payload.size())) + payload;
}

std::string EncodeHello(const Hello& m) {
  WireWriter w;
  w.Put(m.rank);
  w.Put(m.world);
  w.Put(m.pid);
  w.Put(m.slot_bytes);
  return w.Take();
}

StatusOr<Hello> DecodeHello(const std::string& payload) {
  WireReader r(payload);
  Hello m;
  if (!r.Get(&m.rank) || !r.Get(&m.world) || !r.Get(&m.pid) || !r.Get(&m.slot_bytes) || !r.Done()) {
    return Bad("malformed HELLO");
  }
  if (m.world < 1 || m.world > kMaxWorldSize)
    return Bad("world size " + std::to_string(m.world) + " out of range");
  if (m.rank < 0 || m.rank >= m.world) {
    return Bad("rank " + std::to_string(m.rank) + " out of range for world " +
               std::to_string(m.world));
  }
  if (m.slot_bytes == 0 || m.slot_bytes > (uint64_t{1} << 40)) return Bad("slot size out of range");
  return m;
}

std::string EncodeHelloOk(const HelloOk& m) {
  WireWriter w;
  w.Put(m.slot_bytes);
  w.Put<uint32_t>(static_cast<uint32_t>(m.shm_names.size()));
  for (const auto& n : m.shm_names) w.Str(n);
  return w.Take();
}

StatusOr<HelloOk> DecodeHelloOk(const std::string& payload) {
  WireReader r(payload);
  HelloOk m;
  uint32_t n = 0;
  if (!r.Get(&m.slot_bytes) || !r.Get(&n) || n > 64) return Bad("malformed HELLO_OK");
  for (uint32_t i = 0; i < n; ++i) {
    std::string s;
    if (!r.Str(&s, 255)) return Bad("malformed HELLO_OK");
    m.shm_names.push_back(s);
  }
  if (!r.Done()) return Bad("malformed HELLO_OK");
  return m;
}

std::string EncodeU32(uint32_t v) {
  WireWriter w;
  w.Put(v);
  return w.Take();
}

StatusOr<uint32_t> DecodeU32(const std::string& payload) {
  WireReader r(payload);
  uint32_t v = 0;
  if (!r.Get(&v) || !r.Done()) return Bad("malformed message (expected one u32)");
  return v;
}

std::string EncodeSubmit(const Submit& m) {
  WireWriter w;
  w.Put(m.step);
  w.Put(m.slot);
  w.Put(m.stall_ns);
  w.Put<int32_t>(m.meta.world_size);
  w.Str(m.meta.config_hash);
  w.Str(m.meta.code_version);
  w.Str(m.meta.data_version);
  w.Str(m.meta.layout_json);
  w.Put<uint32_t>(static_cast<uint32_t>(m.pieces.size()));
  for (const auto& p : m.pieces) {
    w.Put<uint8_t>(p.is_blob ? 1 : 0);
    w.Str(p.kind);
    w.Str(p.name);
    w.Str(p.policy);
    w.Put<uint8_t>(static_cast<uint8_t>(p.dtype));
    w.Put<uint32_t>(static_cast<uint32_t>(p.shape.size()));
    for (int64_t d : p.shape) w.Put(d);
    w.Put(p.offset);
    w.Put(p.length);
    w.Put(p.slot_offset);
  }
  // Trailer: the writer's generation (fencing of stale writers, see store.h).
  w.Str(m.meta.generation);
  if (m.memory_only) w.Put<uint8_t>(1);  // trailer 2: the memory tier
  return w.Take();
}

StatusOr<Submit> DecodeSubmit(const std::string& payload, uint64_t slot_bytes) {
  WireReader r(payload);
  Submit m;
  int32_t world = 0;
  uint32_t n = 0;
  if (!r.Get(&m.step) || !r.Get(&m.slot) || !r.Get(&m.stall_ns) || !r.Get(&world) ||
      !r.Str(&m.meta.config_hash, kMaxMetaBytes) || !r.Str(&m.meta.code_version, kMaxMetaBytes) ||
      !r.Str(&m.meta.data_version, kMaxMetaBytes) || !r.Str(&m.meta.layout_json, kMaxMetaBytes) ||
      !r.Get(&n)) {
    return Bad("malformed SUBMIT");
  }
  if (m.step < 0 || m.step > kMaxStep)
    return Bad("step " + std::to_string(m.step) + " out of range");
  if (world < 1 || world > kMaxWorldSize)
    return Bad("world size " + std::to_string(world) + " out of range");
  if (n > static_cast<uint32_t>(kMaxPieces)) return Bad("too many pieces");
  m.meta.step = m.step;
  m.meta.world_size = world;
  for (uint32_t i = 0; i < n; ++i) {
    PieceDesc p;
    uint8_t blob = 0, dtype = 0;
    uint32_t rank = 0;
    if (!r.Get(&blob) || !r.Str(&p.kind, kMaxNameBytes) || !r.Str(&p.name, kMaxNameBytes) ||
        !r.Str(&p.policy, 32) || !r.Get(&dtype) || !r.Get(&rank) || rank > 8) {
      return Bad("malformed piece " + std::to_string(i));
    }
    p.is_blob = blob != 0;
    p.shape.resize(rank);
    for (auto& d : p.shape) {
      if (!r.Get(&d)) return Bad("malformed piece " + std::to_string(i));
    }
    if (!r.Get(&p.offset) || !r.Get(&p.length) || !r.Get(&p.slot_offset)) {
      return Bad("malformed piece " + std::to_string(i));
    }
    if (blob > 1 || dtype > static_cast<uint8_t>(DType::kUInt8))
      return Bad("bad piece kind or dtype");
    p.dtype = static_cast<DType>(dtype);
    if (!IsSafeDatasetName(p.kind) || !IsSafeDatasetName(p.name)) {
      return Bad("piece " + std::to_string(i) + " has an unsafe name");
    }
    if (p.is_blob && p.policy != "replicated" && p.policy != "per_rank")
      return Bad("bad blob policy");
    if (p.offset < 0 || p.length < 0) return Bad("negative offset or length");
    uint64_t elem = p.is_blob ? 1 : DTypeSize(p.dtype);
    if (!p.is_blob) {
      int64_t numel = 1;
      for (int64_t d : p.shape) {
        if (d < 0 || (d > 0 && numel > (int64_t{1} << 50) / d)) return Bad("bad shape");
        numel *= d;
      }
      if (p.offset > numel || p.length > numel - p.offset) return Bad("slice outside the tensor");
    }
    const uint64_t bytes = static_cast<uint64_t>(p.length) * elem;
    if (static_cast<uint64_t>(p.length) > slot_bytes || p.slot_offset > slot_bytes ||
        bytes > slot_bytes - p.slot_offset) {
      return Bad("piece " + std::to_string(i) + " lies outside the slot");
    }
    m.pieces.push_back(std::move(p));
  }
  if (!r.Done() && !r.Str(&m.meta.generation, kMaxMetaBytes)) {
    return Bad("malformed generation in SUBMIT");
  }
  uint8_t memory_only = 0;
  if (!r.Done() && (!r.Get(&memory_only) || memory_only > 1)) {
    return Bad("trailing bytes in SUBMIT (or a memory-tier flag other than 0 or 1)");
  }
  m.memory_only = memory_only != 0;
  if (!r.Done()) return Bad("trailing bytes in SUBMIT");
  return m;
}

std::string EncodeRestore(int64_t step) {
  if (step < 0) return std::string();
  WireWriter w;
  w.Put(step);
  return w.Take();
}

StatusOr<int64_t> DecodeRestore(const std::string& payload) {
  if (payload.empty()) return int64_t{-1};
  WireReader r(payload);
  int64_t step = -1;
  if (!r.Get(&step) || !r.Done()) return Bad("malformed RESTORE (expected nothing or one i64)");
  if (step < 0) return Bad("RESTORE of a negative step");
  return step;
}

std::string EncodeRestoreOk(const Submit* m) {
  std::string out(1, m != nullptr ? '\1' : '\0');
  if (m != nullptr) out += EncodeSubmit(*m);
  return out;
}

StatusOr<std::optional<Submit>> DecodeRestoreOk(const std::string& payload, uint64_t slot_bytes) {
  if (payload.empty() || (payload[0] != '\0' && payload[0] != '\1')) {
    return Bad("RESTORE_OK without a valid 'found' byte");
  }
  if (payload[0] == '\0') {
    if (payload.size() != 1) return Bad("RESTORE_OK 'not found' with trailing bytes");
    return std::optional<Submit>();
  }
  FT_ASSIGN_OR_RETURN(Submit m, DecodeSubmit(payload.substr(1), slot_bytes));
  return std::optional<Submit>(std::move(m));
}

std::string EncodeFetchPeer(const FetchPeer& m) {
  WireWriter w;
  w.Put(m.step);
  w.Str(m.address);
  w.Put(m.timeout_s);
  return w.Take();
}

StatusOr<FetchPeer> DecodeFetchPeer(const std::string& payload) {
  WireReader r(payload);
  FetchPeer m;
  if (!r.Get(&m.step) || !r.Str(&m.address, 300) || !r.Get(&m.timeout_s) || !r.Done())
    return Bad("malformed FETCH_PEER");
  if (m.step < 0 || m.step > kMaxStep) return Bad("FETCH_PEER step out of range");
  if (!(m.timeout_s >= 0) || m.timeout_s > 1e6) return Bad("FETCH_PEER timeout out of range");
  return m;
}

std::string EncodeFetchPeerOk(const FetchPeerOk& m) {
  WireWriter w;
  w.Put<uint8_t>(m.found ? 1 : 0);
  w.Put(m.step);
  w.Put(m.bytes);
  w.Put(m.seconds);
  w.Str(m.source);
  w.Str(m.detail);
  return w.Take();
}

StatusOr<FetchPeerOk> DecodeFetchPeerOk(const std::string& payload) {
  WireReader r(payload);
  FetchPeerOk m;
  uint8_t found = 0;
  if (!r.Get(&found) || found > 1 || !r.Get(&m.step) || !r.Get(&m.bytes) || !r.Get(&m.seconds) ||
      !r.Str(&m.source, 512) || !r.Str(&m.detail, 64u << 10) || !r.Done()) {
    return Bad("malformed FETCH_PEER_OK");
  }
  m.found = found == 1;
  return m;
}

ShardContents ContentsOf(const Submit& m, const uint8_t* base) {
  ShardContents contents;
  for (const auto& p : m.pieces) {
    if (p.is_blob) {
      contents.blobs.push_back({p.kind, p.name, p.policy,
                                std::string(reinterpret_cast<const char*>(base + p.slot_offset),
                                            static_cast<size_t>(p.length))});
    } else {
      TensorShardRef t;
      t.kind = p.kind;
      t.name = p.name;
      t.dtype = p.dtype;
      t.shape = p.shape;
      t.offset = p.offset;
      t.length = p.length;
      t.data = base + p.slot_offset;
      contents.tensors.push_back(std::move(t));
    }
  }
  return contents;
}

std::vector<uint64_t> PieceHashes(const Submit& m, const uint8_t* base) {
  std::vector<uint64_t> out;
  out.reserve(m.pieces.size());
  for (const auto& p : m.pieces) {
    const uint64_t bytes = static_cast<uint64_t>(p.length) * (p.is_blob ? 1 : DTypeSize(p.dtype));
    out.push_back(XXH3_64bits(base + p.slot_offset, bytes));
  }
  return out;
}

uint64_t SnapshotDigest(const std::vector<uint64_t>& piece_hashes) {
  std::string bytes;
  for (uint64_t h : piece_hashes) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace ftrain::ckpt::proto
