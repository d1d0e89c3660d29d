// An opened packed directory (local or HTTP): its parsed index, the shard headers and chunk
// checksum tables (loaded lazily, once per shard), and checksum-verified chunk reads. Shared
// by the reader, `ftrain data verify` and `ftrain data inspect`. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/format/format.h"
#include "data/format/index.h"
#include "data/source/source.h"

namespace ftrain::data {

// One checksummed chunk: rows [first_row, first_row + rows) of shard `shard`.
struct ChunkRef {
  uint32_t shard = 0;
  uint64_t chunk_in_shard = 0;
  uint64_t first_row = 0;  // within the shard
  uint32_t rows = 0;
  uint64_t first_sample = 0;  // global sample index of its first row
};

class Dataset {
 public:
  static StatusOr<std::unique_ptr<Dataset>> Open(const std::string& spec, Env* env,
                                                 const HttpOptions& http = HttpOptions());
  static StatusOr<std::unique_ptr<Dataset>> OpenWithSource(std::unique_ptr<Source> source);

  const DatasetIndex& index() const { return index_; }
  Source* source() const { return source_.get(); }
  uint64_t num_chunks() const { return num_chunks_; }
  uint64_t chunks_per_shard() const { return chunks_per_shard_; }
  ChunkRef Chunk(uint64_t global_chunk) const;
  // The chunk holding global sample i, and the row within it.
  uint64_t ChunkOfSample(uint64_t sample) const;

  // Reads chunk `c` into *out (resized) and verifies its checksum. A mismatch from a network
  // source is re-read up to `corrupt_retries` times; then Corruption naming the shard, chunk
  // and byte range.
  Status ReadChunk(uint64_t c, std::vector<uint8_t>* out);
  // The same into caller memory of ChunkBytes(c) bytes.
  Status ReadChunkInto(uint64_t c, uint8_t* out);
  // Tells the source that chunk c will be read soon (file sources start readahead).
  void HintChunk(uint64_t c);
  uint64_t ChunkBytes(uint64_t c) const { return uint64_t{Chunk(c).rows} * index_.row_bytes(); }
  // Header and chunk table of shard s, checked against the index.
  Status LoadShard(uint32_t s, ShardHeader* header, std::vector<uint64_t>* table);

  int corrupt_retries = 2;

 private:
  Dataset() = default;
  struct ShardMeta {
    bool loaded = false;
    ShardHeader header;
    std::vector<uint64_t> table;
  };
  Status EnsureShard(uint32_t s);

  std::unique_ptr<Source> source_;
  DatasetIndex index_;
  uint64_t num_chunks_ = 0;
  uint64_t chunks_per_shard_ = 0;
  std::mutex mu_;
  std::vector<ShardMeta> shards_;  // guarded by mu_ (entries are immutable once loaded)
};

}  // namespace ftrain::data
