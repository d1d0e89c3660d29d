// index.json of a packed directory: what the shards hold, which tokenizer made them, which
// inputs they came from, and the data version (the hash a checkpoint pins). Parsing validates
// every field and every name, and recomputes the data version.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::data {

inline constexpr char kIndexFormat[] = "ftrain-tokens";
inline constexpr int kIndexVersion = 1;

struct ShardEntry {
  std::string name;  // "shard-000000.bin"
  uint64_t rows = 0;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // of the whole file
};

struct InputEntry {
  std::string path;  // as given on the command line (or found under a given directory)
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // of the file's bytes as stored (compressed when compressed)
};

struct PackStats {
  uint64_t documents = 0;
  uint64_t text_bytes = 0;           // UTF-8 bytes handed to the tokenizer
  uint64_t stream_tokens = 0;        // tokens in the document stream, BOS/EOS included
  uint64_t dropped_tail_tokens = 0;  // tokens after the last full row
  uint64_t skipped_empty_documents = 0;
  uint64_t skipped_invalid_lines = 0;
  // --on-bad-record=skip: records skipped, by reason (see pack/documents.h); absent reasons are 0.
  std::map<std::string, uint64_t> bad_records;
};

struct DatasetIndex {
  uint32_t seq_len = 0;      // L; rows hold L+1 tokens
  uint32_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  uint32_t chunk_rows = 0;
  uint64_t rows_per_shard = 0;  // every shard but the last; a multiple of chunk_rows
  uint64_t num_rows = 0;
  std::string tokenizer_type = "sentencepiece";  // or "huggingface"
  std::string tokenizer_file;                    // "tokenizer.model" or "tokenizer.json"
  uint64_t tokenizer_xxh3 = 0;                   // of tokenizer_file's bytes
  std::string tokenizer_config_file;  // "tokenizer_config.json" when packed with one, else ""
  uint32_t vocab_size = 0;
  int bos_id = -1;
  int eos_id = -1;
  std::vector<ShardEntry> shards;
  std::vector<InputEntry> inputs;
  PackStats stats;
  std::string data_version;  // 16 hex digits; see ComputeDataVersion

  uint64_t row_tokens() const { return uint64_t{seq_len} + 1; }
  uint64_t row_bytes() const { return row_tokens() * token_bytes; }
  const char* dtype_name() const { return token_bytes == 2 ? "uint16" : "uint32"; }

  // XXH3-64 over the content that defines the token rows: format version, seq_len, dtype,
  // chunk_rows, tokenizer hash, and every shard's name, rows and checksum, in order. Input
  // paths and statistics are not part of it (moving the inputs does not change the data).
  std::string ComputeDataVersion() const;

  // Pretty JSON with sorted keys: identical input gives identical bytes.
  std::string ToJson() const;
  // `where` (path or URL) prefixes every error. Checks structure, names, counts, and that
  // data_version matches the content.
  static StatusOr<DatasetIndex> Parse(const std::string& text, const std::string& where);
};

}  // namespace ftrain::data
