// The BPE model of a Hugging Face tokenizer.json: vocab, ranked merges, byte_fallback, unk
// (fused or not), ignore_merges; merges applied lowest rank first, leftmost first among equal
// ranks (tokenizers' Word::merge_all). In byte-level mode a pre-token is raw bytes and each
// byte starts as the id of its ByteLevel character. Words under 256 bytes are cached per
// thread. continuing_subword_prefix, end_of_word_suffix and dropout are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ftrain::data::hf {

class Bpe {
 public:
  static StatusOr<std::unique_ptr<Bpe>> FromJson(const nlohmann::json& model,
                                                 const std::string& where, bool byte_level);
  // Appends the ids of one pre-token. Thread-safe.
  void Tokenize(std::string_view word, std::vector<int>* ids) const;
  // The largest id in the vocabulary, -1 when empty.
  int max_id() const { return static_cast<int>(vocab_r_.size()) - 1; }
  // The token string of an id (tokenizer.json's form), nullptr when absent.
  const std::string* IdToToken(int id) const;
  int TokenToId(const std::string& token) const;  // -1 when absent

 private:
  Bpe() = default;
  void Merge(std::string_view word, std::vector<int>* ids) const;
  void InitialSymbols(std::string_view word, std::vector<int>* syms) const;

  std::unordered_map<std::string, int> vocab_;
  std::vector<std::string> vocab_r_;
  std::vector<bool> present_;
  std::unordered_map<std::string, int> whole_words_;               // ignore_merges: raw-form vocab
  std::unordered_map<uint32_t, int> char_ids_;                     // single code point tokens
  int byte_ids_[256];                                              // byte-level: byte -> id, -1
  int fallback_ids_[256];                                          // "<0xXX>" -> id, -1
  std::unordered_map<uint64_t, std::pair<uint32_t, int>> merges_;  // (a, b) -> (rank, merged)
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int unk_id_ = -1;
  uint64_t cache_id_ = 0;  // distinguishes this model in the per-thread caches
};

}  // namespace ftrain::data::hf
