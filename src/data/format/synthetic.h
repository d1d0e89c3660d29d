// Synthetic packed datasets for tests and benchmarks: shards and index.json written through
// the real format code, with rows whose tokens identify them (row i: token 0 = i & 0xffff,
// token 1 = i >> 16 & 0xffff, token t >= 2 = (i * 31 + t) % vocab), so a reader's output can
// be checked row by row without a tokenizer. Not used by `ftrain` itself.
#pragma once

#include <cstdint>
#include <string>

#include "core/env.h"
#include "core/status.h"
#include "data/format/index.h"

namespace ftrain::data {

struct SyntheticSpec {
  uint64_t num_rows = 1000;
  uint32_t seq_len = 15;
  uint64_t rows_per_shard = 256;  // rounded up to whole chunks
  uint32_t chunk_rows = 16;
  uint32_t token_bytes = 2;
  uint32_t vocab = 65000;
};

// Creates dir (must not hold a dataset) and writes the dataset; returns its index.
StatusOr<DatasetIndex> WriteSyntheticDataset(const std::string& dir, const SyntheticSpec& spec,
                                             Env* env);

// The token the synthetic row `row` holds at position t.
uint32_t SyntheticToken(uint64_t row, uint64_t t, uint32_t vocab);

}  // namespace ftrain::data
