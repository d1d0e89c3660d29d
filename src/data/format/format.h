// The token shard file format (version 1) and the names of the files in a packed directory.
// All names are built and parsed here, and names read from an index are validated here.
//
//   [0, 64)            header, little-endian (see ShardHeader; its last 8 bytes are its XXH3-64)
//   [64, 64 + 8*C)     chunk table: XXH3-64 of each chunk of chunk_rows rows (C chunks)
//   ... zero padding to payload_offset (a multiple of 4096)
//   [payload_offset, +num_rows*row_bytes)   rows of seq_len+1 tokens, uint16 or uint32
//
// Readers verify a chunk's checksum before using any row of it; the whole-file XXH3-64 lives
// in index.json. Not here: how rows are cut from documents (pack/pack.cc), reading
// (read/dataset.cc).
#pragma once

#include <cstdint>
#include <string>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::data {

inline constexpr char kShardMagic[8] = {'F', 'T', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 64;
inline constexpr uint64_t kPayloadAlign = 4096;

inline constexpr char kIndexFileName[] = "index.json";
inline constexpr char kTokenizerFileName[] = "tokenizer.model";   // SentencePiece
inline constexpr char kHfTokenizerFileName[] = "tokenizer.json";  // Hugging Face
inline constexpr char kHfTokenizerConfigFileName[] = "tokenizer_config.json";
// `ftrain pack --on-bad-record=skip`: one JSON line per skipped record (file, line, reason).
inline constexpr char kBadRecordsFileName[] = "bad-records.jsonl";

struct ShardHeader {
  uint32_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  uint32_t seq_len = 0;      // L; a row holds L+1 tokens
  uint32_t chunk_rows = 0;   // rows per checksummed chunk (the last chunk may be shorter)
  uint64_t num_rows = 0;
  uint64_t payload_offset = 0;
  uint64_t table_xxh3 = 0;  // XXH3-64 of the chunk table

  uint64_t row_bytes() const { return (uint64_t{seq_len} + 1) * token_bytes; }
  uint64_t num_chunks() const { return (num_rows + chunk_rows - 1) / chunk_rows; }
  uint64_t payload_bytes() const { return num_rows * row_bytes(); }
  uint64_t file_bytes() const { return payload_offset + payload_bytes(); }
};

// Where the payload starts for a shard with this many chunks.
uint64_t PayloadOffsetFor(uint64_t num_chunks);

// 64 bytes, including the header's own checksum.
std::string EncodeShardHeader(const ShardHeader& h);
// Checks magic, version, checksum and field sanity. `where` (a path or URL) prefixes errors.
Status DecodeShardHeader(const void* data, size_t size, const std::string& where, ShardHeader* out);

// "shard-000042.bin". Six digits and more when needed; parsing accepts exactly this form.
std::string ShardFileName(uint64_t index);
bool ParseShardFileName(const std::string& name, uint64_t* index);

// A file name read from an index: one path component, no "..", no '/', no leading '.'.
Status ValidateFileName(const std::string& name, const std::string& where);

// Facts about a shard file after it was written.
struct ShardFileInfo {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // of the whole file
};

// Writes a complete shard to `path` atomically through `env`: `path`.partial, fsync, rename,
// fsync of the directory. `payload` holds h.num_rows rows; h.payload_offset and h.table_xxh3
// are filled in.
Status WriteShardFile(Env* env, const std::string& path, ShardHeader h, const uint8_t* payload,
                      ShardFileInfo* info);

// Writes a small file atomically through `env` (index.json, tokenizer.model).
Status WriteFileAtomic(Env* env, const std::string& path, const std::string& contents);

}  // namespace ftrain::data
