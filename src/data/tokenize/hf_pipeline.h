// The normalizers, pre-tokenizers and decoders of a Hugging Face tokenizer.json, built from
// their JSON: NFC/NFD/NFKC/NFKD, Sequence, Replace, Prepend, Strip; Split (regex or string),
// ByteLevel, Metaspace, Digits, Sequence; and the decoders ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, Sequence. Each follows `tokenizers` (0.23) step for step, without
// the offset bookkeeping. Any other component is an InvalidArgument naming its JSON path.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::data::hf {

// A pre-token: text, and whether it starts at offset 0 of the original text (Metaspace's
// prepend_scheme "first" looks at that).
struct Piece {
  std::string text;
  bool at_origin = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual Status Apply(std::string* text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *pieces by their splits (empty pieces are dropped, as `tokenizers` does).
  virtual Status Apply(std::vector<Piece>* pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status Apply(std::vector<std::string>* tokens) const = 0;  // decode_chain
};

StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const nlohmann::json& j,
                                                     const std::string& where);
// *byte_level is set when the chain ends with ByteLevel: the model then maps each byte of a
// pre-token to its ByteLevel character (hf_bpe). ByteLevel anywhere but last is refused.
StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const nlohmann::json& j,
                                                         const std::string& where,
                                                         bool* byte_level);
StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const nlohmann::json& j, const std::string& where);

// GPT-2's byte -> character table (bytes_char in tokenizers' byte_level.rs), as UTF-8.
const std::string& ByteLevelChar(unsigned char b);
// The inverse; false when `cp` is not one of the 256 characters.
bool ByteLevelByte(uint32_t cp, unsigned char* b);

}  // namespace ftrain::data::hf
