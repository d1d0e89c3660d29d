// Shard header encoding, names, and atomic file writes for the packed directory.
#include "data/format/format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "data/format/hash.h"

namespace ftrain::data {
namespace {

void Put32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void Put64(std::string* s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Writes pieces to path.partial, fsyncs, renames over path, fsyncs the directory.
Status WritePiecesAtomic(Env* env, const std::string& path,
                         const std::vector<std::pair<const void*, size_t>>& pieces) {
  const std::string tmp = path + ".partial";
  auto file = env->NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  Status s;
  for (const auto& [data, size] : pieces) {
    if (s.ok()) s = (*file)->Append(data, size);
  }
  if (s.ok()) s = (*file)->Sync();
  Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = env->Rename(tmp, path);
  if (s.ok()) s = env->SyncDir(Dirname(path));
  if (!s.ok()) (void)env->RemoveFile(tmp);  // best effort: a leftover .partial is never read
  return s;
}

}  // namespace

uint64_t PayloadOffsetFor(uint64_t num_chunks) {
  uint64_t end = kShardHeaderBytes + 8 * num_chunks;
  return (end + kPayloadAlign - 1) / kPayloadAlign * kPayloadAlign;
}

std::string EncodeShardHeader(const ShardHeader& h) {
  std::string s(kShardHeaderBytes, '\0');
  std::memcpy(&s[0], kShardMagic, 8);
  Put32(&s, 8, kShardVersion);
  Put32(&s, 12, h.token_bytes);
  Put32(&s, 16, h.seq_len);
  Put32(&s, 20, h.chunk_rows);
  Put64(&s, 24, h.num_rows);
  Put64(&s, 32, h.payload_offset);
  Put64(&s, 40, h.table_xxh3);
  // bytes 48..55 reserved (zero)
  Put64(&s, 56, Hash64(s.data(), 56));
  return s;
}

Status DecodeShardHeader(const void* data, size_t size, const std::string& where,
                         ShardHeader* out) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (size < kShardHeaderBytes) {
    return Status::Corruption(where + ": shard header truncated: " + std::to_string(size) + " of " +
                              std::to_string(kShardHeaderBytes) + " bytes");
  }
  if (std::memcmp(p, kShardMagic, 8) != 0) {
    return Status::Corruption(where + ": not an ftrain token shard (bad magic at offset 0)");
  }
  uint32_t version = Get32(p + 8);
  if (version != kShardVersion) {
    return Status::Corruption(where + ": shard format version " + std::to_string(version) +
                              " is not supported (this build reads version " +
                              std::to_string(kShardVersion) + ")");
  }
  uint64_t want = Get64(p + 56), got = Hash64(p, 56);
  if (want != got) {
    return Status::Corruption(where + ": shard header checksum mismatch (offset 0..63): stored " +
                              Hex64(want) + ", computed " + Hex64(got));
  }
  ShardHeader h;
  h.token_bytes = Get32(p + 12);
  h.seq_len = Get32(p + 16);
  h.chunk_rows = Get32(p + 20);
  h.num_rows = Get64(p + 24);
  h.payload_offset = Get64(p + 32);
  h.table_xxh3 = Get64(p + 40);
  if ((h.token_bytes != 2 && h.token_bytes != 4) || h.seq_len == 0 || h.chunk_rows == 0 ||
      h.num_rows == 0 || h.payload_offset != PayloadOffsetFor(h.num_chunks())) {
    return Status::Corruption(
        where + ": shard header fields are inconsistent (token_bytes " +
        std::to_string(h.token_bytes) + ", seq_len " + std::to_string(h.seq_len) + ", chunk_rows " +
        std::to_string(h.chunk_rows) + ", rows " + std::to_string(h.num_rows) + ")");
  }
  *out = h;
  return Status::Ok();
}

std::string ShardFileName(uint64_t index) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "shard-%06llu.bin", static_cast<unsigned long long>(index));
  return buf;
}

bool ParseShardFileName(const std::string& name, uint64_t* index) {
  const std::string prefix = "shard-", suffix = ".bin";
  if (name.size() < prefix.size() + 6 + suffix.size()) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (ShardFileName(v) != name) return false;  // one spelling per index
  *index = v;
  return true;
}

Status ValidateFileName(const std::string& name, const std::string& where) {
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) {
    return Status::Corruption(where + ": file name '" + name +
                              "' is not a plain file name (no '/', no leading '.')");
  }
  return Status::Ok();
}

Status WriteShardFile(Env* env, const std::string& path, ShardHeader h, const uint8_t* payload,
                      ShardFileInfo* info) {
  const uint64_t row_bytes = h.row_bytes();
  const uint64_t chunks = h.num_chunks();
  std::string table(8 * chunks, '\0');
  for (uint64_t c = 0; c < chunks; ++c) {
    uint64_t first = c * h.chunk_rows;
    uint64_t rows = std::min<uint64_t>(h.chunk_rows, h.num_rows - first);
    Put64(&table, 8 * c, Hash64(payload + first * row_bytes, rows * row_bytes));
  }
  h.table_xxh3 = Hash64(table.data(), table.size());
  h.payload_offset = PayloadOffsetFor(chunks);
  std::string head = EncodeShardHeader(h) + table;
  head.resize(h.payload_offset, '\0');
  Hash64Stream whole;
  whole.Update(head.data(), head.size());
  whole.Update(payload, h.payload_bytes());
  info->bytes = h.file_bytes();
  info->xxh3 = whole.Digest();
  return WritePiecesAtomic(
      env, path, {{head.data(), head.size()}, {payload, static_cast<size_t>(h.payload_bytes())}});
}

Status WriteFileAtomic(Env* env, const std::string& path, const std::string& contents) {
  return WritePiecesAtomic(env, path, {{contents.data(), contents.size()}});
}

}  // namespace ftrain::data
