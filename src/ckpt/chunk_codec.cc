// Chunk compression and decompression (shuffle + zstd).
#include "ckpt/chunk_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "ckpt/shuffle.h"

namespace ftrain::ckpt {

Status CompressChunk(const uint8_t* data, size_t total_bytes, size_t chunk_bytes, size_t elem,
                     size_t index, bool shuffle, int level, CompressedChunk* out) {
  thread_local std::vector<uint8_t> staging, shuffled;
  // Freed when the thread ends (compression threads live for one shard write; a raw pointer
  // here leaked one context per thread per checkpoint in a long-running ckptd).
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(),
                                                                      &ZSTD_freeCCtx);
  ZSTD_CCtx* cctx = ctx.get();
  const size_t begin = index * chunk_bytes;
  const size_t n = std::min(chunk_bytes, total_bytes - begin);
  const uint8_t* src = data + begin;
  if (n < chunk_bytes) {
    staging.assign(chunk_bytes, 0);
    std::memcpy(staging.data(), src, n);
    src = staging.data();
  }
  if (shuffle && elem > 1) {
    shuffled.resize(chunk_bytes);
    Shuffle(src, shuffled.data(), chunk_bytes / elem, elem);
    src = shuffled.data();
  }
  out->bytes.resize(ZSTD_compressBound(chunk_bytes));
  // Every frame carries zstd's own content checksum (4 bytes), checked by every decoder, ours
  // and hdf5plugin's alike: a damaged chunk fails to decode even before the XXH3 comparison.
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  size_t got = ZSTD_compress2(cctx, out->bytes.data(), out->bytes.size(), src, chunk_bytes);
  if (ZSTD_isError(got)) {
    return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(got));
  }
  out->bytes.resize(got);
  return Status::Ok();
}

Status DecompressChunk(const std::vector<uint8_t>& raw, bool shuffle, bool zstd, size_t elem,
                       size_t chunk_bytes, uint8_t* dst, size_t dst_bytes) {
  thread_local std::vector<uint8_t> plain, unshuffled;
  const uint8_t* src = raw.data();
  size_t size = raw.size();
  if (zstd) {
    plain.resize(chunk_bytes);
    size_t got = ZSTD_decompress(plain.data(), chunk_bytes, raw.data(), raw.size());
    if (ZSTD_isError(got) || got != chunk_bytes) {
      return Status::Corruption(std::string("zstd frame does not decode to a full chunk: ") +
                                (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size"));
    }
    src = plain.data();
    size = got;
  }
  if (size != chunk_bytes) return Status::Corruption("chunk has the wrong size");
  if (shuffle && elem > 1) {
    unshuffled.resize(chunk_bytes);
    Unshuffle(src, unshuffled.data(), chunk_bytes / elem, elem);
    src = unshuffled.data();
  }
  std::memcpy(dst, src, dst_bytes);
  return Status::Ok();
}

}  // namespace ftrain::ckpt
