// The deterministic sample order of one epoch, a pure function of (seed, epoch, shape):
//   1. the epoch's chunks (chunk_rows consecutive rows, ~1 MiB) are shuffled (Fisher-Yates);
//   2. consecutive runs of window_chunks shuffled chunks form windows;
//   3. inside a window, rows are shuffled again (Fisher-Yates over the window's rows).
// Position p of the epoch (0..N-1) maps to a global sample index. A reader touches one window
// at a time, so its reads are whole ~1 MiB chunks, and a batch mixes rows from window_chunks
// random places of the corpus. Nothing here knows about ranks or batches (reader.cc does).
#pragma once

#include <cstdint>
#include <vector>

namespace ftrain::data {

struct OrderShape {
  uint64_t num_rows = 0;       // N
  uint32_t chunk_rows = 0;     // every chunk has this many rows except the very last one
  uint32_t window_chunks = 0;  // W

  uint64_t num_chunks() const { return (num_rows + chunk_rows - 1) / chunk_rows; }
  uint32_t ChunkRows(uint64_t c) const {
    return c + 1 < num_chunks() ? chunk_rows
                                : static_cast<uint32_t>(num_rows - c * uint64_t{chunk_rows});
  }
};

// The rows of one window in the epoch's order.
struct WindowPlan {
  uint64_t begin = 0;               // epoch position of the window's first row
  std::vector<uint32_t> chunks;     // global chunk ids, in window order
  std::vector<uint64_t> row_start;  // prefix sums of chunk rows (size chunks+1)
  std::vector<uint32_t> perm;       // window position -> window row

  uint64_t size() const { return row_start.back(); }
  // Global sample index at window position q.
  uint64_t SampleAt(uint64_t q, uint32_t chunk_rows) const;
};

class EpochOrder {
 public:
  EpochOrder(const OrderShape& shape, uint64_t seed, uint64_t epoch);

  uint64_t epoch() const { return epoch_; }
  uint64_t num_windows() const { return window_begin_.size() - 1; }
  uint64_t window_begin(uint64_t w) const { return window_begin_[w]; }
  uint64_t window_end(uint64_t w) const { return window_begin_[w + 1]; }
  uint64_t WindowOf(uint64_t pos) const;  // pos < N
  WindowPlan Window(uint64_t w) const;
  // Convenience (builds the window): the sample at epoch position pos.
  uint64_t SampleAt(uint64_t pos) const;

 private:
  OrderShape shape_;
  uint64_t seed_;
  uint64_t epoch_;
  std::vector<uint32_t> chunk_perm_;    // shuffled chunk ids
  std::vector<uint64_t> window_begin_;  // size num_windows+1
};

}  // namespace ftrain::data
