// EpochOrder: chunk shuffle, windows, row shuffle within a window.
#include "data/read/order.h"

#include <algorithm>

#include "data/format/hash.h"

namespace ftrain::data {
namespace {

constexpr uint64_t kTagChunks = 0x43484e4b;  // "CHNK"
constexpr uint64_t kTagRows = 0x524f5753;    // "ROWS"

template <typename T>
void Shuffle(std::vector<T>* v, uint64_t seed) {
  SplitMix64 rng(seed);
  for (uint64_t i = v->size(); i > 1; --i) {
    uint64_t j = rng.Below(i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

}  // namespace

uint64_t WindowPlan::SampleAt(uint64_t q, uint32_t chunk_rows) const {
  uint64_t row = perm[q];
  size_t k = static_cast<size_t>(std::upper_bound(row_start.begin(), row_start.end(), row) -
                                 row_start.begin()) -
             1;
  return uint64_t{chunks[k]} * chunk_rows + (row - row_start[k]);
}

EpochOrder::EpochOrder(const OrderShape& shape, uint64_t seed, uint64_t epoch)
    : shape_(shape), seed_(seed), epoch_(epoch) {
  const uint64_t nc = shape.num_chunks();
  chunk_perm_.resize(nc);
  for (uint64_t c = 0; c < nc; ++c) chunk_perm_[c] = static_cast<uint32_t>(c);
  Shuffle(&chunk_perm_, MixSeed(seed, epoch, kTagChunks));
  const uint64_t w = shape.window_chunks;
  const uint64_t nw = (nc + w - 1) / w;
  window_begin_.assign(nw + 1, 0);
  for (uint64_t i = 0; i < nw; ++i) {
    uint64_t rows = 0;
    for (uint64_t k = i * w; k < std::min(nc, (i + 1) * w); ++k) {
      rows += shape.ChunkRows(chunk_perm_[k]);
    }
    window_begin_[i + 1] = window_begin_[i] + rows;
  }
}

uint64_t EpochOrder::WindowOf(uint64_t pos) const {
  return static_cast<uint64_t>(std::upper_bound(window_begin_.begin(), window_begin_.end(), pos) -
                               window_begin_.begin()) -
         1;
}

WindowPlan EpochOrder::Window(uint64_t w) const {
  WindowPlan plan;
  plan.begin = window_begin_[w];
  const uint64_t nc = chunk_perm_.size();
  const uint64_t first = w * shape_.window_chunks;
  const uint64_t last = std::min<uint64_t>(nc, first + shape_.window_chunks);
  plan.row_start.push_back(0);
  for (uint64_t k = first; k < last; ++k) {
    plan.chunks.push_back(chunk_perm_[k]);
    plan.row_start.push_back(plan.row_start.back() + shape_.ChunkRows(chunk_perm_[k]));
  }
  plan.perm.resize(plan.size());
  for (uint64_t i = 0; i < plan.perm.size(); ++i) plan.perm[i] = static_cast<uint32_t>(i);
  Shuffle(&plan.perm, MixSeed(seed_, epoch_, kTagRows, w));
  return plan;
}

uint64_t EpochOrder::SampleAt(uint64_t pos) const {
  uint64_t w = WindowOf(pos);
  WindowPlan plan = Window(w);
  return plan.SampleAt(pos - plan.begin, shape_.chunk_rows);
}

}  // namespace ftrain::data
