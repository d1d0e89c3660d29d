// TokenReader: option and cursor validation, the prefetch thread, the cursor.
#include "data/read/reader.h"

#include <chrono>

#include "core/log.h"
#include "data/read/cursor.h"

namespace ftrain::data {

Status ReaderOptions::Validate() const {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("data reader: " + m); };
  if (source.empty()) return bad("source is empty: give a packed directory or an http(s) URL");
  if (env == nullptr) return bad("env is not set");
  if (dp_size < 1) return bad("dp_size must be >= 1, got " + std::to_string(dp_size));
  if (dp_rank < 0 || dp_rank >= dp_size) {
    return bad("dp_rank must be in [0, " + std::to_string(dp_size) + "), got " +
               std::to_string(dp_rank));
  }
  if (micro_batch < 1) return bad("micro_batch must be >= 1, got " + std::to_string(micro_batch));
  if (prefetch_depth < 0 || prefetch_depth > 4096) {
    return bad("prefetch_depth must be in [0, 4096], got " + std::to_string(prefetch_depth));
  }
  if (io_threads < 1 || io_threads > 256) {
    return bad("io_threads must be in [1, 256], got " + std::to_string(io_threads));
  }
  if (window_chunks < 1) {
    return bad("window_chunks must be >= 1, got " + std::to_string(window_chunks));
  }
  return http.Validate();
}

StatusOr<std::unique_ptr<TokenReader>> TokenReader::Open(const ReaderOptions& opts,
                                                         const std::string* cursor) {
  FT_RETURN_IF_ERROR(opts.Validate());
  FT_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, Dataset::Open(opts.source, opts.env, opts.http));
  return Open(std::move(ds), opts, cursor);
}

StatusOr<std::unique_ptr<TokenReader>> TokenReader::Open(std::unique_ptr<Dataset> dataset,
                                                         const ReaderOptions& opts,
                                                         const std::string* cursor) {
  FT_RETURN_IF_ERROR(opts.Validate());
  const DatasetIndex& x = dataset->index();
  const std::string where = dataset->source()->Where(kIndexFileName);
  if (!opts.expected_data_version.empty() && opts.expected_data_version != x.data_version) {
    return Status::FailedPrecondition(where + ": data version " + x.data_version +
                                      " differs from the expected " + opts.expected_data_version +
                                      " (the data changed since the run started)");
  }
  if (uint64_t(opts.window_chunks) * x.chunk_rows >= (uint64_t{1} << 31)) {
    return Status::InvalidArgument("data reader: window_chunks * chunk_rows must be < 2^31");
  }
  std::unique_ptr<TokenReader> r(new TokenReader);
  r->opts_ = opts;
  r->step_size_ = uint64_t(opts.micro_batch) * uint64_t(opts.dp_size);
  const std::string who = "rank " + std::to_string(opts.dp_rank) + "/" +
                          std::to_string(opts.dp_size) + ", micro-batch " +
                          std::to_string(opts.micro_batch);
  if (cursor == nullptr) {
    r->start_position_ = opts.start_epoch * x.num_rows;
    FT_LOG(Info) << "data: " << dataset->source()->Where("") << ": " << x.num_rows << " rows of "
                 << x.row_tokens() << " " << x.dtype_name() << " tokens, data version "
                 << x.data_version << "; " << who << ", seed " << opts.seed
                 << ", starting at epoch " << opts.start_epoch;
  } else {
    FT_ASSIGN_OR_RETURN(Cursor c, Cursor::Decode(*cursor));
    if (c.data_version != x.data_version || c.num_rows != x.num_rows ||
        c.chunk_rows != x.chunk_rows) {
      return Status::FailedPrecondition(
          "data cursor was saved for data version " + c.data_version + " (" +
          std::to_string(c.num_rows) + " rows) but " + where + " has version " + x.data_version +
          " (" + std::to_string(x.num_rows) +
          " rows); resume with the dataset the checkpoint was trained on");
    }
    if (c.seed != opts.seed) {
      return Status::InvalidArgument("data cursor was saved with seed " + std::to_string(c.seed) +
                                     " but the reader's seed is " + std::to_string(opts.seed) +
                                     "; the sample order depends on it");
    }
    if (c.window_chunks != uint32_t(opts.window_chunks)) {
      return Status::InvalidArgument("data cursor was saved with window_chunks " +
                                     std::to_string(c.window_chunks) + " but the reader has " +
                                     std::to_string(opts.window_chunks) +
                                     "; the sample order depends on it");
    }
    r->start_position_ = c.position;
    const uint64_t epoch = c.position / x.num_rows, offset = c.position % x.num_rows;
    FT_LOG(Info) << "data: resuming " << dataset->source()->Where("") << " (data version "
                 << x.data_version << ") at global position " << c.position << " = epoch " << epoch
                 << ", position " << offset << " of " << x.num_rows << "; " << who;
    if (c.dp_size != opts.dp_size || c.micro_batch != opts.micro_batch) {
      FT_LOG(Warning) << "data: the data-parallel layout changed since the cursor was saved: "
                      << "dp_size " << c.dp_size << " -> " << opts.dp_size << ", micro-batch "
                      << c.micro_batch << " -> " << opts.micro_batch
                      << "; remapping by global position " << c.position << " (epoch " << epoch
                      << ", position " << offset << "): each step now takes " << r->step_size_
                      << " rows from there, rank " << opts.dp_rank << " rows ["
                      << opts.dp_rank * opts.micro_batch << ", "
                      << (opts.dp_rank + 1) * opts.micro_batch
                      << ") of each step, so no sample of the epoch is skipped or repeated";
    }
  }
  r->dataset_ = std::move(dataset);
  StreamParams p;
  p.shape = {x.num_rows, x.chunk_rows, uint32_t(opts.window_chunks)};
  p.seed = opts.seed;
  p.dp_rank = opts.dp_rank;
  p.dp_size = opts.dp_size;
  p.micro_batch = opts.micro_batch;
  p.start_position = r->start_position_;
  p.io_threads = opts.io_threads;
  p.lookahead = opts.prefetch_depth > 0;
  r->stream_ = std::make_unique<RankStream>(r->dataset_.get(), p);
  if (opts.prefetch_depth > 0) {
    TokenReader* self = r.get();
    r->producer_ = std::thread([self] { self->ProduceLoop(); });
  }
  return r;
}

TokenReader::~TokenReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  producer_cv_.notify_all();
  consumer_cv_.notify_all();
  if (dataset_) dataset_->source()->Cancel();  // in-flight HTTP retries end promptly
  if (producer_.joinable()) producer_.join();
  stream_.reset();  // waits for a background window load before the dataset goes away
}

void TokenReader::ProduceLoop() {
  const size_t depth = size_t(opts_.prefetch_depth);
  const size_t low_water = depth / 2;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.size() >= depth) {
        producer_waiting_ = true;
        producer_cv_.wait(lock, [&] { return stop_ || queue_.size() <= low_water; });
        producer_waiting_ = false;
      }
      if (stop_) return;
    }
    StatusOr<Batch> b = stream_->NextBatch();
    const bool failed = !b.ok();
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(b));
      wake = consumer_waiting_;
    }
    if (wake) consumer_cv_.notify_one();
    if (failed) return;  // the consumer will see the error; nothing after it is valid
  }
}

StatusOr<Batch> TokenReader::Next() {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  StatusOr<Batch> b = Status::Internal("unset");
  bool wake = false;
  if (opts_.prefetch_depth == 0) {
    lock.unlock();
    b = stream_->NextBatch();
    lock.lock();
  } else {
    if (queue_.empty()) {
      consumer_waiting_ = true;
      consumer_cv_.wait(lock, [&] { return !queue_.empty(); });
      consumer_waiting_ = false;
    }
    b = std::move(queue_.front());
    queue_.pop_front();
    wake = producer_waiting_ && queue_.size() <= size_t(opts_.prefetch_depth) / 2;
  }
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!b.ok())
    failed_ = b.status();
  else
    ++consumed_;
  lock.unlock();
  if (wake) producer_cv_.notify_one();
  if (!b.ok()) return b.status();
  return b;
}

uint64_t TokenReader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return start_position_ + consumed_ * step_size_;
}

std::string TokenReader::SaveCursor() const {
  const DatasetIndex& x = dataset_->index();
  Cursor c;
  c.data_version = x.data_version;
  c.seed = opts_.seed;
  c.num_rows = x.num_rows;
  c.chunk_rows = x.chunk_rows;
  c.window_chunks = uint32_t(opts_.window_chunks);
  c.position = position();
  c.dp_rank = opts_.dp_rank;
  c.dp_size = opts_.dp_size;
  c.micro_batch = opts_.micro_batch;
  return c.Encode();
}

ReaderStats TokenReader::stats() const {
  ReaderStats s;
  std::lock_guard<std::mutex> lock(mu_);
  s.batches = consumed_;
  s.wait_s = wait_s_;
  s.bytes_read = stream_->bytes_read();
  s.chunks_read = stream_->chunks_read();
  return s;
}

}  // namespace ftrain::data
