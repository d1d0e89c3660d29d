// Hugging Face tokenizer.json (BPE models: byte-level like GPT-2/Llama 3/Qwen2.5, and
// SentencePiece-style with byte_fallback like Llama 2/Mistral) behind the Tokenizer
// interface. Encode equals tokenizers' encode(text, add_special_tokens=False): added tokens
// (special ones included) are cut out of the text first, the rest is normalized, pre-tokenized
// and run through BPE. BOS/EOS come from tokenizer_config.json's bos_token/eos_token.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "data/tokenize/tokenizer.h"

namespace ftrain::data {

// `where` names the file in errors; a component ftrain does not implement (WordPiece,
// Unigram, an unknown normalizer...) is an InvalidArgument naming it.
StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(std::string json, const std::string& where,
                                                     std::string config);

}  // namespace ftrain::data
