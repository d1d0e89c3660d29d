// The reader's resumable state: a small, versioned, checksummed text blob that a checkpoint
// stores per data-parallel rank, e.g.
//   ftrain-data-cursor 1 data=3f... seed=1234 rows=81920 chunk=255 window=32 pos=409600
//   epoch=5 rank=1 world=4 mb=8 sum=9a...            (one line; `sum` is XXH3-64 of the rest)
// `pos` counts rows of the endless stream epoch 0, epoch 1, ... up to the next step: every rank
// of a step saves the same pos, which is why a new world size can resume from any of them.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ftrain::data {

inline constexpr int kCursorVersion = 1;

struct Cursor {
  std::string data_version;  // 16 hex digits
  uint64_t seed = 0;
  uint64_t num_rows = 0;
  uint32_t chunk_rows = 0;
  uint32_t window_chunks = 0;
  uint64_t position = 0;  // global stream position of the next step's first row
  int dp_rank = 0;        // who saved it (information: any rank's cursor resumes every rank)
  int dp_size = 1;
  int micro_batch = 1;

  uint64_t epoch() const { return num_rows == 0 ? 0 : position / num_rows; }
  std::string Encode() const;
  // Checks the magic, version, checksum and every field; errors say what is wrong.
  static StatusOr<Cursor> Decode(const std::string& blob);
};

}  // namespace ftrain::data
