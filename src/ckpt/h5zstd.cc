// zstd HDF5 filter: compress on write, decompress on read; one zstd frame per chunk.
#include "ckpt/h5zstd.h"

#include <hdf5.h>
#include <zstd.h>

#include <memory>
#include <mutex>

extern "C" {

size_t ftrain_h5z_zstd(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[],
                       size_t nbytes, size_t* buf_size, void** buf) {
  if (flags & H5Z_FLAG_REVERSE) {
    const unsigned long long size = ZSTD_getFrameContentSize(*buf, nbytes);
    if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return 0;
    void* out = H5allocate_memory(static_cast<size_t>(size), false);
    if (out == nullptr) return 0;
    size_t got = ZSTD_decompress(out, static_cast<size_t>(size), *buf, nbytes);
    if (ZSTD_isError(got) || got != size) {
      H5free_memory(out);
      return 0;  // HDF5 reports "filter returned failure" with the dataset name
    }
    H5free_memory(*buf);
    *buf = out;
    *buf_size = static_cast<size_t>(size);
    return got;
  }
  const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : ZSTD_CLEVEL_DEFAULT;
  const size_t bound = ZSTD_compressBound(nbytes);
  void* out = H5allocate_memory(bound, false);
  if (out == nullptr) return 0;
  // With zstd's content checksum, like ftrain's own chunk compressor.
  thread_local std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ctx(ZSTD_createCCtx(),
                                                                      &ZSTD_freeCCtx);
  ZSTD_CCtx* cctx = ctx.get();
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  size_t got = ZSTD_compress2(cctx, out, bound, *buf, nbytes);
  if (ZSTD_isError(got)) {
    H5free_memory(out);
    return 0;
  }
  H5free_memory(*buf);
  *buf = out;
  *buf_size = bound;
  return got;
}

const void* ftrain_h5z_zstd_class() {
  static const H5Z_class2_t kClass = {
      H5Z_CLASS_T_VERS,
      static_cast<H5Z_filter_t>(ftrain::ckpt::kZstdFilterId),
      1,  // encoder present
      1,  // decoder present
      "zstd (ftrain; hdf5plugin-compatible chunks)",
      nullptr,  // can_apply
      nullptr,  // set_local
      ftrain_h5z_zstd,
  };
  return &kClass;
}

}  // extern "C"

namespace ftrain::ckpt {

Status RegisterZstdFilter() {
  static std::once_flag once;
  static herr_t rc = 0;
  std::call_once(once, [] {
    if (H5Zfilter_avail(static_cast<H5Z_filter_t>(kZstdFilterId)) > 0) return;
    rc = H5Zregister(ftrain_h5z_zstd_class());
  });
  if (rc < 0) return Status::Internal("H5Zregister of the zstd filter (id 32015) failed");
  return Status::Ok();
}

}  // namespace ftrain::ckpt
