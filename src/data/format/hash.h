// Checksums and seeded mixing for the data pipeline: XXH3-64 (one-shot and streaming; ~3x the
// speed of XXH64, which matters when every byte a reader delivers is checked), 16-digit hex,
// and the SplitMix64 generator the deterministic shuffle draws from. Nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/hex.h"

namespace ftrain::data {

uint64_t Hash64(const void* data, size_t size, uint64_t seed = 0);

// Incremental XXH3-64 over a byte stream (an input file, a shard while it is written).
class Hash64Stream {
 public:
  explicit Hash64Stream(uint64_t seed = 0);
  ~Hash64Stream();
  Hash64Stream(const Hash64Stream&) = delete;
  Hash64Stream& operator=(const Hash64Stream&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// "0123456789abcdef": exactly 16 lower-case hex digits (core/hex.h).
using ftrain::Hex64;
using ftrain::ParseHex64;

// SplitMix64 (Steele et al.): tiny, fast, and its output is fixed by the seed on every
// platform, which is all the shuffle needs. Below(n) is unbiased (rejection sampling).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  uint64_t Below(uint64_t n);  // uniform in [0, n); n > 0

 private:
  uint64_t state_;
};

// A well-mixed 64-bit seed from several values (order matters).
uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0);

}  // namespace ftrain::data
