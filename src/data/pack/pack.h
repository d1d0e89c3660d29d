// `ftrain pack`: inputs -> documents -> tokens (SentencePiece or a Hugging Face tokenizer.json,
// data/tokenize/; on all cores) -> one stream with BOS/EOS between documents -> rows of
// seq_len+1 tokens (row k holds stream tokens [k*L, k*L+L], so every next-token pair is in
// exactly one row) -> shards of rows_per_shard rows -> bad-records.jsonl (when records were
// skipped), the tokenizer and index.json (written last: the commit). The output is a pure
// function of the inputs, the tokenizer and the options: thread count and timing do not matter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/format/index.h"
#include "data/pack/documents.h"
#include "data/pack/progress.h"
#include "data/pack/train_tokenizer.h"
#include "data/tokenize/tokenizer.h"

namespace ftrain::data {

struct PackOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  std::string tokenizer_path;  // a tokenizer (Tokenizer::Load), or empty with train_tokenizer
  bool train_tokenizer = false;
  TrainTokenizerOptions train;  // vocab_size, model_type, sample_bytes (threads/docs are set)
  uint32_t seq_len = 0;
  double shard_mb = 256;
  uint64_t shard_rows = 0;  // when > 0, overrides shard_mb (rounded up to whole chunks)
  double chunk_kb = 1024;
  uint64_t chunk_rows = 0;  // when > 0, overrides chunk_kb
  DocOptions docs;
  int threads = 0;     // tokenizer threads; 0 = every core
  bool force = false;  // replace a packed dataset already in out_dir
  ProgressMeter::Mode progress = ProgressMeter::Mode::kAuto;
  double progress_interval_s = 10;
  Env* env = nullptr;  // every read, write and directory change goes here; required

  // Names the bad flag (usage errors).
  Status Validate() const;
};

struct PackResult {
  DatasetIndex index;
  double seconds = 0;
  uint64_t input_bytes = 0;
  int threads = 0;
};

StatusOr<PackResult> Pack(const PackOptions& opts);

// bad-records.jsonl: one {"file", "line", "reason"[, "detail"]} object per line.
std::string BadRecordsJsonl(const std::vector<BadRecord>& bad);
// "3 bad records skipped (malformed_json 2, invalid_utf8 1)", or "" when none.
std::string BadRecordSummary(const PackStats& stats);

}  // namespace ftrain::data
