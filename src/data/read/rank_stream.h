// One data-parallel rank's batches, in order, produced synchronously. Global stream positions
// are split into steps of micro_batch * dp_size rows; rank r takes rows [r*mb, (r+1)*mb) of
// each step. The rank loads one window (order.h) at a time: the chunks that hold its rows are
// read whole, straight into a recycled buffer (an arena), checksum-verified, in parallel on
// io_threads; batches are assembled from rows in place. Optionally the next window loads in
// the background while the current one is consumed.
// Not thread-safe: one consumer (TokenReader's producer thread or Next() itself).
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "data/read/dataset.h"
#include "data/read/order.h"

namespace ftrain::data {

struct Batch {
  uint64_t position = 0;  // global stream position of this step's first row (same on all ranks)
  int rows = 0;           // micro_batch
  int row_tokens = 0;     // seq_len + 1
  std::vector<int32_t> tokens;    // rows x row_tokens, row-major
  std::vector<uint64_t> epochs;   // per row
  std::vector<uint64_t> samples;  // per row: global sample index (row of the packed corpus)
};

struct StreamParams {
  OrderShape shape;
  uint64_t seed = 0;
  int dp_rank = 0;
  int dp_size = 1;
  int micro_batch = 1;
  uint64_t start_position = 0;  // global position of the first step
  int io_threads = 2;
  bool lookahead = true;  // load the next window in the background
};

class RankStream {
 public:
  RankStream(Dataset* dataset, const StreamParams& params);
  ~RankStream();
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;

  StatusOr<Batch> NextBatch();

  uint64_t bytes_read() const { return bytes_read_.load(); }
  uint64_t chunks_read() const { return chunks_read_.load(); }

 private:
  // Memory for a window's chunks; reused from window to window (no page faults, no zeroing).
  struct Arena {
    std::unique_ptr<uint8_t[]> data;
    uint64_t capacity = 0;
  };
  struct Window {
    Status status;
    uint64_t epoch = 0, index = 0;
    uint64_t global_end = 0;           // one past the window's last global position
    std::vector<uint64_t> positions;   // this rank's global positions in the window, ascending
    std::vector<uint64_t> samples;     // sample index per position
    std::vector<const uint8_t*> rows;  // row bytes per position, inside `arena`
    Arena arena;
    size_t next = 0;
  };
  struct Key {
    uint64_t epoch, window;
  };

  uint64_t FirstRankPosAtOrAfter(uint64_t x) const;
  Key KeyOf(uint64_t global_pos);
  std::shared_ptr<const EpochOrder> Order(uint64_t epoch);
  // This rank's positions and samples in window `key`, from global position `from` on.
  void Plan(Key key, uint64_t from, Window* win);
  std::unique_ptr<Window> Load(Key key, uint64_t from);
  // Hints the chunks of the window after `key` (its rows from `from` on).
  void HintNext(Key key);
  Arena TakeArena(uint64_t bytes);
  void Recycle(std::unique_ptr<Window> w);
  Status Advance(uint64_t need);  // makes current_ the window holding global position `need`

  Dataset* dataset_;
  StreamParams p_;
  uint64_t step_size_;
  uint64_t rank_base_;
  uint64_t next_step_ = 0;

  std::mutex orders_mu_;
  std::map<uint64_t, std::shared_ptr<const EpochOrder>> orders_;  // guarded by orders_mu_

  std::mutex arenas_mu_;
  std::vector<Arena> arenas_;  // guarded by arenas_mu_: free arenas

  std::unique_ptr<Window> current_;
  std::future<std::unique_ptr<Window>> ahead_;  // the next window, loading in the background
  Key ahead_key_{0, 0};
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> chunks_read_{0};
};

}  // namespace ftrain::data
