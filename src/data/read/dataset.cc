// Dataset: index parsing through a Source, lazy shard metadata, verified chunk reads.
#include "data/read/dataset.h"

#include "core/log.h"
#include "data/format/hash.h"

namespace ftrain::data {

StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const std::string& spec, Env* env,
                                                 const HttpOptions& http) {
  FT_ASSIGN_OR_RETURN(std::unique_ptr<Source> source, OpenSource(spec, http, env));
  return OpenWithSource(std::move(source));
}

StatusOr<std::unique_ptr<Dataset>> Dataset::OpenWithSource(std::unique_ptr<Source> source) {
  std::unique_ptr<Dataset> d(new Dataset);
  const std::string where = source->Where(kIndexFileName);
  FT_ASSIGN_OR_RETURN(std::string text, source->ReadFile(kIndexFileName));
  FT_ASSIGN_OR_RETURN(d->index_, DatasetIndex::Parse(text, where));
  d->source_ = std::move(source);
  const DatasetIndex& x = d->index_;
  d->chunks_per_shard_ = x.rows_per_shard / x.chunk_rows;
  const uint64_t last_rows = x.shards.back().rows;
  d->num_chunks_ =
      (x.shards.size() - 1) * d->chunks_per_shard_ + (last_rows + x.chunk_rows - 1) / x.chunk_rows;
  if (d->num_chunks_ >= (uint64_t{1} << 32)) {
    return Status::InvalidArgument(where + ": " + std::to_string(d->num_chunks_) +
                                   " chunks; repack with larger --chunk-kb (at most 2^32 chunks)");
  }
  d->shards_.resize(x.shards.size());
  return d;
}

ChunkRef Dataset::Chunk(uint64_t c) const {
  ChunkRef r;
  r.shard = static_cast<uint32_t>(c / chunks_per_shard_);
  r.chunk_in_shard = c % chunks_per_shard_;
  r.first_row = r.chunk_in_shard * index_.chunk_rows;
  uint64_t shard_rows = index_.shards[r.shard].rows;
  r.rows = static_cast<uint32_t>(std::min<uint64_t>(index_.chunk_rows, shard_rows - r.first_row));
  r.first_sample = uint64_t{r.shard} * index_.rows_per_shard + r.first_row;
  return r;
}

uint64_t Dataset::ChunkOfSample(uint64_t sample) const { return sample / index_.chunk_rows; }

Status Dataset::EnsureShard(uint32_t s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shards_[s].loaded) return Status::Ok();
  }
  ShardMeta meta;
  meta.loaded = true;
  FT_RETURN_IF_ERROR(LoadShard(s, &meta.header, &meta.table));
  std::lock_guard<std::mutex> lock(mu_);
  if (!shards_[s].loaded) shards_[s] = std::move(meta);
  return Status::Ok();
}

Status Dataset::LoadShard(uint32_t s, ShardHeader* header, std::vector<uint64_t>* table) {
  const ShardEntry& e = index_.shards[s];
  const std::string where = source_->Where(e.name);
  const uint64_t chunks = (e.rows + index_.chunk_rows - 1) / index_.chunk_rows;
  const uint64_t head_bytes = PayloadOffsetFor(chunks);
  std::vector<uint8_t> head(head_bytes);
  FT_RETURN_IF_ERROR(source_->ReadRange(e.name, 0, head_bytes, head.data()));
  FT_RETURN_IF_ERROR(DecodeShardHeader(head.data(), head.size(), where, header));
  if (header->num_rows != e.rows || header->seq_len != index_.seq_len ||
      header->token_bytes != index_.token_bytes || header->chunk_rows != index_.chunk_rows ||
      header->file_bytes() != e.bytes) {
    return Status::Corruption(
        where + ": shard header (rows " + std::to_string(header->num_rows) + ", seq_len " +
        std::to_string(header->seq_len) + ", " + std::to_string(header->file_bytes()) +
        " bytes) disagrees with index.json (rows " + std::to_string(e.rows) + ", seq_len " +
        std::to_string(index_.seq_len) + ", " + std::to_string(e.bytes) + " bytes)");
  }
  const uint8_t* t = head.data() + kShardHeaderBytes;
  uint64_t got = Hash64(t, 8 * chunks);
  if (got != header->table_xxh3) {
    return Status::Corruption(
        where + ": chunk checksum table (offset " + std::to_string(kShardHeaderBytes) + ".." +
        std::to_string(kShardHeaderBytes + 8 * chunks - 1) + ") is damaged: checksum " +
        Hex64(got) + ", header says " + Hex64(header->table_xxh3));
  }
  table->resize(chunks);
  for (uint64_t c = 0; c < chunks; ++c) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | t[8 * c + static_cast<uint64_t>(i)];
    (*table)[c] = v;
  }
  return Status::Ok();
}

void Dataset::HintChunk(uint64_t c) {
  ChunkRef ref = Chunk(c);
  const ShardEntry& e = index_.shards[ref.shard];
  // The payload offset follows from the index (and is checked against the header on reading).
  const uint64_t chunks = (e.rows + index_.chunk_rows - 1) / index_.chunk_rows;
  source_->Hint(e.name, PayloadOffsetFor(chunks) + ref.first_row * index_.row_bytes(),
                uint64_t{ref.rows} * index_.row_bytes());
}

Status Dataset::ReadChunk(uint64_t c, std::vector<uint8_t>* out) {
  out->resize(ChunkBytes(c));
  return ReadChunkInto(c, out->data());
}

Status Dataset::ReadChunkInto(uint64_t c, uint8_t* out) {
  ChunkRef ref = Chunk(c);
  FT_RETURN_IF_ERROR(EnsureShard(ref.shard));
  const ShardMeta* meta;
  {
    std::lock_guard<std::mutex> lock(mu_);
    meta = &shards_[ref.shard];  // loaded entries never change or move (vector is sized once)
  }
  const ShardEntry& e = index_.shards[ref.shard];
  const uint64_t row_bytes = index_.row_bytes();
  const uint64_t offset = meta->header.payload_offset + ref.first_row * row_bytes;
  const uint64_t len = uint64_t{ref.rows} * row_bytes;
  const int tries = source_->RetryCorruptReads() ? corrupt_retries + 1 : 1;
  for (int attempt = 1;; ++attempt) {
    FT_RETURN_IF_ERROR(source_->ReadRange(e.name, offset, len, out));
    uint64_t got = Hash64(out, len);
    uint64_t want = meta->table[ref.chunk_in_shard];
    if (got == want) return Status::Ok();
    std::string msg = source_->Where(e.name) + ": chunk " + std::to_string(ref.chunk_in_shard) +
                      " (bytes " + std::to_string(offset) + ".." +
                      std::to_string(offset + len - 1) + ") checksum mismatch: computed " +
                      Hex64(got) + ", expected " + Hex64(want);
    if (attempt >= tries) {
      return Status::Corruption(msg + "; run 'ftrain data verify' on the source");
    }
    FT_LOG(Warning) << msg << "; re-reading (attempt " << attempt << " of " << tries << ")";
  }
}

}  // namespace ftrain::data
