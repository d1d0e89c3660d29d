// One HDF5 chunk through ftrain's filter pipeline: byte shuffle (optional) then zstd with a
// content checksum, and back. Runs on compression threads: no HDF5 calls here (HDF5 is not
// thread-safe; the writer and reader call it on their own thread). Internal to src/ckpt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace ftrain::ckpt {

struct CompressedChunk {
  std::vector<uint8_t> bytes;
};

// Compresses chunk `index` of `data` (total_bytes long, chunks of chunk_bytes, elements of
// `elem` bytes), padding the last one with zeros to a full chunk, as HDF5 stores edge chunks
// full-size. The zstd context is per thread and freed when the thread ends.
Status CompressChunk(const uint8_t* data, size_t total_bytes, size_t chunk_bytes, size_t elem,
                     size_t index, bool shuffle, int level, CompressedChunk* out);

// Decodes one stored chunk (`zstd` / `shuffle`: which filters it went through) and copies its
// first dst_bytes to dst. A frame that does not decode to exactly chunk_bytes is Corruption.
Status DecompressChunk(const std::vector<uint8_t>& raw, bool shuffle, bool zstd, size_t elem,
                       size_t chunk_bytes, uint8_t* dst, size_t dst_bytes);

}  // namespace ftrain::ckpt
