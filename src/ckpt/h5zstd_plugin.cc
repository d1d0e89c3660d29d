// The loadable HDF5 plugin entry points for the zstd filter (id 32015): put the directory of
// libh5zstd.so in HDF5_PLUGIN_PATH and h5dump / h5py read ftrain checkpoints with no ftrain code.
#include <H5PLextern.h>

#include "ckpt/h5zstd.h"

extern "C" {
H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }
const void* H5PLget_plugin_info(void) { return ftrain_h5z_zstd_class(); }
}
