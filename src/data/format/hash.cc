// XXH3-64 via libxxhash; SplitMix64 as published.
#include "data/format/hash.h"

#include <xxhash.h>

#include <cstdio>

namespace ftrain::data {

uint64_t Hash64(const void* data, size_t size, uint64_t seed) {
  return XXH3_64bits_withSeed(data, size, seed);
}

struct Hash64Stream::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Hash64Stream::Hash64Stream(uint64_t seed) : state_(new State) {
  XXH3_64bits_reset_withSeed(state_->s, seed);
}
Hash64Stream::~Hash64Stream() = default;
void Hash64Stream::Update(const void* data, size_t size) {
  XXH3_64bits_update(state_->s, data, size);
}
uint64_t Hash64Stream::Digest() const { return XXH3_64bits_digest(state_->s); }

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Below(uint64_t n) {
  // Reject the top partial bucket so every value is equally likely.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
  for (;;) {
    uint64_t x = Next();
    if (x <= limit) return x % n;
  }
}

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  SplitMix64 g(a);
  uint64_t h = g.Next();
  for (uint64_t v : {b, c, d}) {
    SplitMix64 m(h ^ v);
    h = m.Next();
  }
  return h;
}

}  // namespace ftrain::data
