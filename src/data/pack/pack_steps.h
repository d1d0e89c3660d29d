// The steps of Pack() that `ftrain pack --part` and `ftrain pack merge` (pack_parts.h) share
// with it: a merged dataset is tokenized, cut into rows and shards and committed by the same
// code as a single pack, so the two are byte-identical by construction.
#pragma once

#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/format/index.h"
#include "data/pack/documents.h"
#include "data/pack/file_slice.h"
#include "data/pack/pack.h"
#include "data/pack/pack_output.h"
#include "data/pack/progress.h"
#include "data/tokenize/tokenizer.h"

namespace ftrain::data {

// "pack: N input files, M MB; skipped ..." on the log.
void LogInputs(const InputScan& scan);

// The dataset's shape for these options and this tokenizer: seq_len, dtype, chunk and shard
// rows, the tokenizer fields. Logs it (with the thread count).
DatasetIndex PackShape(const PackOptions& o, const Tokenizer& tok, int threads);

// Documents of `files` (slices[i] of files[i] when given), tokenized on `threads` threads, into
// `sink` in input order; the reader's stats, finished inputs and listed bad records after.
Status TokenizeInputs(const std::vector<InputFile>& files, const std::vector<FileSlice>& slices,
                      const PackOptions& o, const Tokenizer& tok, int threads, TokenSink* sink,
                      ProgressMeter* progress, PackStats* stats, std::vector<InputEntry>* inputs,
                      std::vector<BadRecord>* bad);

// What a dataset directory holds besides shards and index.json.
struct DatasetOutputs {
  std::string bad_records_jsonl;  // "" when nothing was skipped
  std::string model_bytes;
  std::string config_bytes;
  uint64_t input_files = 0;  // for the "no text in the inputs" message
  uint64_t input_bytes = 0;
};

// After the stream's last token (x->stats filled in): the last shard, x's rows, tail and data
// version, then bad-records.jsonl, the tokenizer and index.json, last (the commit).
Status FinishDataset(Env* env, const std::string& dir, const DatasetOutputs& out,
                     ShardCutter* cutter, DatasetIndex* x);

// "pack: wrote ..." and the bad-record warning.
void LogPacked(const DatasetIndex& x, const std::string& dir, double seconds);

}  // namespace ftrain::data
