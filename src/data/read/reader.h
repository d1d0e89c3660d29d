// TokenReader: the trainer's view of a packed dataset. Given (seed, data-parallel rank r of R,
// micro_batch) it yields batches of micro_batch rows of seq_len+1 tokens; the sample order is a
// pure function of (seed, epoch, global position) (order.h), independent of timing, prefetch
// depth and thread counts. A background thread keeps up to prefetch_depth batches ready.
// SaveCursor() describes the position before the next batch Next() returns; Open() with that
// blob resumes exactly there, also with another R (the global position is kept; logged).
// Torch-free on purpose: batches are plain int32 buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/read/dataset.h"
#include "data/read/rank_stream.h"
#include "data/source/source.h"

namespace ftrain::data {

struct ReaderOptions {
  std::string source;  // packed directory, or http(s):// base URL
  Env* env = nullptr;  // reads a directory source (the main's Env); required
  uint64_t seed = 0;
  int dp_rank = 0;
  int dp_size = 1;
  int micro_batch = 1;
  int prefetch_depth = 4;    // batches assembled ahead; 0 = none (Next() reads synchronously)
  int io_threads = 4;        // parallel chunk reads while loading a window
  int window_chunks = 32;    // shuffle window, in chunks (part of the order; kept in the cursor)
  uint64_t start_epoch = 0;  // where to start without a cursor
  std::string expected_data_version;  // non-empty: refuse a dataset with another version
  HttpOptions http;

  // Names the bad field.
  Status Validate() const;
};

struct ReaderStats {
  uint64_t batches = 0;
  uint64_t bytes_read = 0;  // shard bytes read (whole chunks)
  uint64_t chunks_read = 0;
  double wait_s = 0;  // total time Next() waited for a batch
};

class TokenReader {
 public:
  // cursor == nullptr: start of opts.start_epoch. Otherwise resume from a SaveCursor() blob.
  static StatusOr<std::unique_ptr<TokenReader>> Open(const ReaderOptions& opts,
                                                     const std::string* cursor);
  // Same, over an already opened dataset (tests inject faulty sources this way).
  static StatusOr<std::unique_ptr<TokenReader>> Open(std::unique_ptr<Dataset> dataset,
                                                     const ReaderOptions& opts,
                                                     const std::string* cursor);
  ~TokenReader();
  TokenReader(const TokenReader&) = delete;
  TokenReader& operator=(const TokenReader&) = delete;

  // The next batch of this rank. After an error every later call returns the same error.
  StatusOr<Batch> Next();
  // Position before the batch the next Next() returns; the same on every rank of a step.
  std::string SaveCursor() const;
  uint64_t position() const;  // global stream position of the next step
  const std::string& data_version() const { return dataset_->index().data_version; }
  const DatasetIndex& index() const { return dataset_->index(); }
  ReaderStats stats() const;
  // Seconds each range request took since the last call (http/s3 sources; empty for files).
  std::vector<float> TakeReadLatencies() { return dataset_->source()->TakeReadLatencies(); }

 private:
  TokenReader() = default;
  void ProduceLoop();

  ReaderOptions opts_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<RankStream> stream_;
  uint64_t start_position_ = 0;
  uint64_t step_size_ = 0;

  // Hand-off between the producer thread and Next(), with as few wake-ups as possible: the
  // producer refills only when the queue drained to half (hysteresis), and each side signals
  // the other only when it is known to be waiting.
  mutable std::mutex mu_;
  std::condition_variable producer_cv_;
  std::condition_variable consumer_cv_;
  std::deque<StatusOr<Batch>> queue_;  // guarded by mu_; at most prefetch_depth entries
  bool producer_waiting_ = false;      // guarded by mu_
  bool consumer_waiting_ = false;      // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  uint64_t consumed_ = 0;              // guarded by mu_: batches returned by Next()
  Status failed_;                      // guarded by mu_: sticky error
  double wait_s_ = 0;                  // guarded by mu_
  std::thread producer_;
};

}  // namespace ftrain::data
