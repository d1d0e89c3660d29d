// Byte shuffle with the exact layout of HDF5's shuffle filter (byte 0 of every element, then
// byte 1, ...), so that HDF5 and h5py decode what ftrain writes. Internal to src/ckpt; the
// chunk codec (chunk_codec.h) is its only user.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ftrain::ckpt {

// `in` and `out` hold n_elems elements of `elem` bytes each and do not overlap.
void Shuffle(const uint8_t* in, uint8_t* out, size_t n_elems, size_t elem);
void Unshuffle(const uint8_t* in, uint8_t* out, size_t n_elems, size_t elem);

}  // namespace ftrain::ckpt
