// SentencePiece behind a small interface: load a model (keeping its bytes and hash for the
// index), encode/decode, and train a model from the packer's inputs. SentencePiece types and
// errors stop here; callers see Status.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/documents.h"
#include "data/input.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ftrain::data {

class Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  static StatusOr<std::unique_ptr<Tokenizer>> FromBytes(std::string model,
                                                        const std::string& where);
  ~Tokenizer();

  // Thread-safe (SentencePiece's Encode is const).
  Status Encode(std::string_view text, std::vector<int>* ids) const;
  StatusOr<std::string> Decode(const std::vector<int>& ids) const;
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  const std::string& model_bytes() const { return bytes_; }
  uint64_t xxh3() const { return xxh3_; }

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string bytes_;
  uint64_t xxh3_ = 0;
};

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
