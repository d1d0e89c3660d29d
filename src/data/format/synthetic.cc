// WriteSyntheticDataset: rows from SyntheticToken, real shard and index writers.
#include "data/format/synthetic.h"

#include <vector>

#include "data/format/format.h"
#include "data/format/hash.h"

namespace ftrain::data {

uint32_t SyntheticToken(uint64_t row, uint64_t t, uint32_t vocab) {
  if (t == 0) return uint32_t(row & 0xffff);
  if (t == 1) return uint32_t((row >> 16) & 0xffff);
  return uint32_t((row * 31 + t) % vocab);
}

StatusOr<DatasetIndex> WriteSyntheticDataset(const std::string& dir, const SyntheticSpec& spec,
                                             Env* env) {
  FT_RETURN_IF_ERROR(env->CreateDir(dir));
  DatasetIndex x;
  x.seq_len = spec.seq_len;
  x.token_bytes = spec.token_bytes;
  x.chunk_rows = spec.chunk_rows;
  x.rows_per_shard =
      (spec.rows_per_shard + spec.chunk_rows - 1) / spec.chunk_rows * spec.chunk_rows;
  x.num_rows = spec.num_rows;
  const std::string tokenizer = "synthetic tokenizer, vocab " + std::to_string(spec.vocab);
  x.tokenizer_file = kTokenizerFileName;
  x.tokenizer_xxh3 = Hash64(tokenizer.data(), tokenizer.size());
  x.vocab_size = spec.vocab;
  x.stats.stream_tokens = spec.num_rows * spec.seq_len + 1;
  const uint64_t row_bytes = x.row_bytes();
  std::vector<uint8_t> buf;
  for (uint64_t first = 0, s = 0; first < spec.num_rows; first += x.rows_per_shard, ++s) {
    const uint64_t rows = std::min<uint64_t>(x.rows_per_shard, spec.num_rows - first);
    buf.assign(rows * row_bytes, 0);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t t = 0; t <= spec.seq_len; ++t) {
        uint32_t v = SyntheticToken(first + r, t, spec.vocab);
        for (uint32_t b = 0; b < spec.token_bytes; ++b) {
          buf[r * row_bytes + t * spec.token_bytes + b] = uint8_t(v >> (8 * b));
        }
      }
    }
    ShardHeader h;
    h.token_bytes = spec.token_bytes;
    h.seq_len = spec.seq_len;
    h.chunk_rows = spec.chunk_rows;
    h.num_rows = rows;
    ShardEntry e;
    e.name = ShardFileName(s);
    e.rows = rows;
    ShardFileInfo info;
    FT_RETURN_IF_ERROR(WriteShardFile(env, dir + "/" + e.name, h, buf.data(), &info));
    e.bytes = info.bytes;
    e.xxh3 = info.xxh3;
    x.shards.push_back(e);
  }
  x.data_version = x.ComputeDataVersion();
  FT_RETURN_IF_ERROR(WriteFileAtomic(env, dir + "/" + kTokenizerFileName, tokenizer));
  FT_RETURN_IF_ERROR(WriteFileAtomic(env, dir + "/" + kIndexFileName, x.ToJson()));
  return x;
}

}  // namespace ftrain::data
