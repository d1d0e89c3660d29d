// Byte shuffle and unshuffle.
#include "ckpt/shuffle.h"

#include <cstring>

namespace ftrain::ckpt {
namespace {

// Blocked transposes: 64 elements at a time keep both sides in cache lines; the fixed-size
// inner loops let the compiler unroll them (the generic strided loop is several times slower).
template <size_t kElem>
void ShuffleFixed(const uint8_t* in, uint8_t* out, size_t n) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t b = 0; b < kElem; ++b) {
      uint8_t* dst = out + b * n + i;
      const uint8_t* src = in + i * kElem + b;
      for (size_t j = 0; j < kBlock; ++j) dst[j] = src[j * kElem];
    }
  }
  for (; i < n; ++i) {
    for (size_t b = 0; b < kElem; ++b) out[b * n + i] = in[i * kElem + b];
  }
}

template <size_t kElem>
void UnshuffleFixed(const uint8_t* in, uint8_t* out, size_t n) {
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t b = 0; b < kElem; ++b) {
      const uint8_t* src = in + b * n + i;
      uint8_t* dst = out + i * kElem + b;
      for (size_t j = 0; j < kBlock; ++j) dst[j * kElem] = src[j];
    }
  }
  for (; i < n; ++i) {
    for (size_t b = 0; b < kElem; ++b) out[i * kElem + b] = in[b * n + i];
  }
}

}  // namespace

// The exact layout of HDF5's shuffle filter: byte b of every element, then byte b+1...
void Shuffle(const uint8_t* in, uint8_t* out, size_t n_elems, size_t elem) {
  switch (elem) {
    case 1:
      std::memcpy(out, in, n_elems);
      return;
    case 2:
      ShuffleFixed<2>(in, out, n_elems);
      return;
    case 4:
      ShuffleFixed<4>(in, out, n_elems);
      return;
    case 8:
      ShuffleFixed<8>(in, out, n_elems);
      return;
  }
  for (size_t b = 0; b < elem; ++b) {
    for (size_t i = 0; i < n_elems; ++i) out[b * n_elems + i] = in[i * elem + b];
  }
}

void Unshuffle(const uint8_t* in, uint8_t* out, size_t n_elems, size_t elem) {
  switch (elem) {
    case 1:
      std::memcpy(out, in, n_elems);
      return;
    case 2:
      UnshuffleFixed<2>(in, out, n_elems);
      return;
    case 4:
      UnshuffleFixed<4>(in, out, n_elems);
      return;
    case 8:
      UnshuffleFixed<8>(in, out, n_elems);
      return;
  }
  for (size_t b = 0; b < elem; ++b) {
    for (size_t i = 0; i < n_elems; ++i) out[i * elem + b] = in[b * n_elems + i];
  }
}

}  // namespace ftrain::ckpt
