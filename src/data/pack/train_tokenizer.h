// Trains a SentencePiece model for `ftrain pack --train-tokenizer` on a deterministic sample of
// the packer's inputs (every line hashed with a fixed seed decides whether it is sampled), so
// the same inputs and options give the same model bytes.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "data/pack/documents.h"
#include "data/pack/input_files.h"

namespace ftrain::data {

struct TrainTokenizerOptions {
  int vocab_size = 8000;
  std::string model_type = "unigram";  // unigram | bpe
  int threads = 1;
  uint64_t sample_bytes = 4 << 20;  // text fed to the trainer, sampled evenly over the inputs
  DocOptions docs;
};

// Trains a SentencePiece model on a deterministic sample of the inputs' lines; returns the
// serialized model. Errors from the inputs are the packer's errors (file:line).
StatusOr<std::string> TrainTokenizer(const InputScan& inputs, const TrainTokenizerOptions& opts);

}  // namespace ftrain::data
