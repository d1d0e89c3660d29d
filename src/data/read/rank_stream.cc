// RankStream: which rows a rank needs, window by window, and reading them.
#include "data/read/rank_stream.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"

namespace ftrain::data {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token shards are little-endian; add byte swapping for big-endian machines");

RankStream::RankStream(Dataset* dataset, const StreamParams& params)
    : dataset_(dataset), p_(params) {
  step_size_ = uint64_t(p_.micro_batch) * uint64_t(p_.dp_size);
  rank_base_ = p_.start_position + uint64_t(p_.dp_rank) * uint64_t(p_.micro_batch);
}

RankStream::~RankStream() {
  if (ahead_.valid()) ahead_.wait();
}

uint64_t RankStream::FirstRankPosAtOrAfter(uint64_t x) const {
  if (x <= rank_base_) return rank_base_;
  uint64_t d = x - rank_base_;
  uint64_t s = d / step_size_, off = d % step_size_;
  if (off < uint64_t(p_.micro_batch)) return x;
  return rank_base_ + (s + 1) * step_size_;
}

std::shared_ptr<const EpochOrder> RankStream::Order(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(orders_mu_);
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  auto order = std::make_shared<const EpochOrder>(p_.shape, p_.seed, epoch);
  orders_[epoch] = order;
  while (orders_.size() > 3) orders_.erase(orders_.begin());  // only recent epochs are used
  return order;
}

RankStream::Key RankStream::KeyOf(uint64_t g) {
  const uint64_t n = p_.shape.num_rows;
  uint64_t epoch = g / n;
  return {epoch, Order(epoch)->WindowOf(g % n)};
}

RankStream::Arena RankStream::TakeArena(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(arenas_mu_);
    for (size_t i = 0; i < arenas_.size(); ++i) {
      if (arenas_[i].capacity >= bytes) {
        Arena a = std::move(arenas_[i]);
        arenas_.erase(arenas_.begin() + long(i));
        return a;
      }
    }
  }
  // Every window fits the largest size, so arenas stay interchangeable.
  const uint64_t max_bytes =
      uint64_t(p_.shape.window_chunks) * p_.shape.chunk_rows * dataset_->index().row_bytes();
  Arena a;
  a.capacity = std::max(bytes, max_bytes);
  a.data.reset(new uint8_t[a.capacity]);  // uninitialised on purpose: reads overwrite it
  return a;
}

void RankStream::Recycle(std::unique_ptr<Window> w) {
  if (!w || !w->arena.data) return;
  std::lock_guard<std::mutex> lock(arenas_mu_);
  if (arenas_.size() < 2) arenas_.push_back(std::move(w->arena));
}

void RankStream::Plan(Key key, uint64_t from, Window* win) {
  win->epoch = key.epoch;
  win->index = key.window;
  const uint64_t n = p_.shape.num_rows;
  auto order = Order(key.epoch);
  WindowPlan plan = order->Window(key.window);
  const uint64_t gbegin = key.epoch * n + plan.begin;
  const uint64_t gend = gbegin + plan.size();
  win->global_end = gend;
  for (uint64_t g = FirstRankPosAtOrAfter(std::max(gbegin, from)); g < gend;
       g = FirstRankPosAtOrAfter(g + 1)) {
    win->positions.push_back(g);
    win->samples.push_back(plan.SampleAt(g - gbegin, p_.shape.chunk_rows));
  }
}

void RankStream::HintNext(Key key) {
  const uint64_t n = p_.shape.num_rows;
  const uint64_t end = key.epoch * n + Order(key.epoch)->window_end(key.window);
  const uint64_t after = FirstRankPosAtOrAfter(end);
  Window next;
  Plan(KeyOf(after), after, &next);
  std::vector<uint64_t> chunks;
  for (uint64_t s : next.samples) chunks.push_back(s / p_.shape.chunk_rows);
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  for (uint64_t c : chunks) dataset_->HintChunk(c);
}

std::unique_ptr<RankStream::Window> RankStream::Load(Key key, uint64_t from) {
  auto win = std::make_unique<Window>();
  Plan(key, from, win.get());
  const uint32_t c_rows = p_.shape.chunk_rows;
  const uint64_t row_bytes = dataset_->index().row_bytes();
  // The chunks holding those rows, in file order, each at its offset in the arena.
  std::vector<uint64_t> chunks;
  for (uint64_t s : win->samples) chunks.push_back(s / c_rows);
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  std::vector<uint64_t> offset(chunks.size() + 1, 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    offset[i + 1] = offset[i] + dataset_->ChunkBytes(chunks[i]);
  }
  win->arena = TakeArena(offset.back());
  uint8_t* base = win->arena.data.get();
  win->rows.resize(win->samples.size());
  for (size_t i = 0; i < win->samples.size(); ++i) {
    size_t k = size_t(std::lower_bound(chunks.begin(), chunks.end(), win->samples[i] / c_rows) -
                      chunks.begin());
    win->rows[i] = base + offset[k] + (win->samples[i] % c_rows) * row_bytes;
  }

  win->status = ParallelFor(chunks.size(), p_.io_threads, [&](size_t i) {
    FT_RETURN_IF_ERROR(dataset_->ReadChunkInto(chunks[i], base + offset[i]));
    bytes_read_ += offset[i + 1] - offset[i];
    chunks_read_ += 1;
    return Status::Ok();
  });
  return win;
}

Status RankStream::Advance(uint64_t need) {
  Key key = KeyOf(need);
  Recycle(std::move(current_));
  if (ahead_.valid() && ahead_key_.epoch == key.epoch && ahead_key_.window == key.window) {
    current_ = ahead_.get();
  } else {
    if (ahead_.valid()) Recycle(ahead_.get());  // a stale prefetch (not expected in order)
    ahead_ = {};
    current_ = Load(key, need);
  }
  if (!current_->status.ok()) return current_->status;
  if (current_->positions.empty() || current_->positions[0] != need) {
    return Status::Internal("data reader: window (epoch " + std::to_string(key.epoch) +
                            ", window " + std::to_string(key.window) +
                            ") does not start at the expected position " + std::to_string(need));
  }
  if (p_.lookahead) {
    uint64_t after = FirstRankPosAtOrAfter(current_->global_end);
    ahead_key_ = KeyOf(after);
    Key k = ahead_key_;
    ahead_ = std::async(std::launch::async, [this, k, after] {
      auto w = Load(k, after);
      if (w->status.ok()) HintNext(k);  // the kernel reads the window after it meanwhile
      return w;
    });
  }
  return Status::Ok();
}

StatusOr<Batch> RankStream::NextBatch() {
  const uint64_t row_tokens = dataset_->index().row_tokens();
  const uint32_t token_bytes = dataset_->index().token_bytes;
  Batch b;
  b.position = p_.start_position + next_step_ * step_size_;
  b.rows = p_.micro_batch;
  b.row_tokens = static_cast<int>(row_tokens);
  b.tokens.resize(uint64_t(b.rows) * row_tokens);
  b.epochs.reserve(size_t(b.rows));
  b.samples.reserve(size_t(b.rows));
  for (int j = 0; j < p_.micro_batch; ++j) {
    const uint64_t g = rank_base_ + next_step_ * step_size_ + uint64_t(j);
    if (!current_ || current_->next >= current_->positions.size() ||
        current_->positions[current_->next] != g) {
      FT_RETURN_IF_ERROR(Advance(g));
    }
    const size_t i = current_->next++;
    const uint8_t* src = current_->rows[i];
    int32_t* dst = b.tokens.data() + uint64_t(j) * row_tokens;
    // Shards are little-endian, like every machine this runs on (static_assert above).
    if (token_bytes == 2) {
      for (uint64_t t = 0; t < row_tokens; ++t) {
        uint16_t v;
        std::memcpy(&v, src + 2 * t, 2);
        dst[t] = int32_t(v);
      }
    } else {
      for (uint64_t t = 0; t < row_tokens; ++t) {
        uint32_t v;
        std::memcpy(&v, src + 4 * t, 4);
        dst[t] = int32_t(v);
      }
    }
    b.epochs.push_back(g / p_.shape.num_rows);
    b.samples.push_back(current_->samples[i]);
  }
  ++next_step_;
  return b;
}

}  // namespace ftrain::data
