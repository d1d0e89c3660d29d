// The zstd HDF5 filter, id 32015, with the chunk wire format of the widely used hdf5plugin
// Zstd filter: each chunk is one zstd frame (with its content size), cd_values[0] is the
// compression level. Registered in-process by RegisterZstdFilter(); the same code is built as
// the loadable plugin build/lib/hdf5-plugins/libh5zstd.so (h5zstd_plugin.cc) for h5dump/h5py.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace ftrain::ckpt {

constexpr int kZstdFilterId = 32015;

// Idempotent and thread-safe.
Status RegisterZstdFilter();

}  // namespace ftrain::ckpt

extern "C" {
// The H5Z_func_t of the filter (exported for the plugin).
size_t ftrain_h5z_zstd(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[],
                       size_t nbytes, size_t* buf_size, void** buf);
// H5Z_class2_t describing the filter, for H5Zregister and H5PLget_plugin_info.
const void* ftrain_h5z_zstd_class();
}
