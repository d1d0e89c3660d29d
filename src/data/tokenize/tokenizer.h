// The tokenizer interface of `ftrain pack` and `ftrain data inspect`, with two implementations:
// SentencePiece .model files (here) and Hugging Face tokenizer.json BPE (hf_tokenizer.h).
// Load() picks one from a path; the model's bytes and hash go into the dataset. Library types
// and errors stop here. Training a SentencePiece model is the packer's (pack/train_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::data {

class Tokenizer {
 public:
  // A SentencePiece .model, a tokenizer.json (BOS/EOS from a tokenizer_config.json next to
  // it), or a model directory holding tokenizer.json (what transformers loads) or else
  // tokenizer.model.
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path, Env* env);
  // A model's bytes as stored with a dataset; JSON is a tokenizer.json, anything else a
  // SentencePiece model. `config` is tokenizer_config.json's bytes or "".
  static StatusOr<std::unique_ptr<Tokenizer>> FromBytes(std::string model, const std::string& where,
                                                        std::string config = "");
  virtual ~Tokenizer() = default;

  // Thread-safe. Ids never include BOS/EOS (the packer adds those).
  virtual Status Encode(std::string_view text, std::vector<int>* ids) const = 0;
  // Special tokens are left out, as tokenizers' decode does by default.
  virtual StatusOr<std::string> Decode(const std::vector<int>& ids) const = 0;
  virtual int vocab_size() const = 0;  // largest id + 1
  virtual int bos_id() const = 0;      // -1 when none
  virtual int eos_id() const = 0;
  // index.json's tokenizer.type: "sentencepiece" or "huggingface".
  virtual const char* type() const = 0;
  // The name model_bytes() is stored under in a dataset: "tokenizer.model" or "tokenizer.json".
  virtual const char* file_name() const = 0;

  const std::string& model_bytes() const { return bytes_; }
  uint64_t xxh3() const { return xxh3_; }
  // tokenizer_config.json's bytes ("" when none): stored with the dataset next to the model.
  const std::string& config_bytes() const { return config_; }

 protected:
  std::string bytes_;
  uint64_t xxh3_ = 0;
  std::string config_;
};

// The tokenizer file a --tokenizer path means: the path itself, or for a model directory its
// tokenizer.json (preferred) or tokenizer.model. NotFound when a directory holds neither.
StatusOr<std::string> ResolveTokenizerFile(const std::string& path, Env* env);

}  // namespace ftrain::data
