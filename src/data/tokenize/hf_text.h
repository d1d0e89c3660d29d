// Text primitives of the Hugging Face tokenizer pipeline: patterns (a literal string, or a
// regex compiled by PCRE2 in UTF + UCP mode with JIT, the engine standing in for the Oniguruma
// that `tokenizers` uses), Unicode normalization forms (ICU), and UTF-8 helpers. No tokenizer
// logic here; hf_pipeline.cc builds the normalizers and pre-tokenizers on these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ftrain::data::hf {

// Non-overlapping, leftmost matches of a literal string or a regex, as byte ranges.
class Pattern {
 public:
  // A literal string; an empty one matches nothing.
  static std::unique_ptr<Pattern> Literal(std::string s);
  // A regex in Oniguruma's Ruby syntax as `tokenizers` writes it (\p{L}, (?i:...), lookahead);
  // `where` names the JSON path for the error of a pattern PCRE2 rejects.
  static StatusOr<std::unique_ptr<Pattern>> Regex(const std::string& pattern,
                                                  const std::string& where);
  virtual ~Pattern() = default;
  // Appends [start, end) of each match to *out. Thread-safe.
  virtual Status FindAll(std::string_view text,
                         std::vector<std::pair<size_t, size_t>>* out) const = 0;
};

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Unicode normalization of valid UTF-8 text (ASCII passes through untouched).
Status Normalize(NormalForm form, std::string_view in, std::string* out);

// The code point at s[i] and its length in bytes (valid UTF-8 assumed; a bad byte is 1 byte).
uint32_t DecodeUtf8(std::string_view s, size_t i, size_t* len);
void AppendUtf8(uint32_t cp, std::string* out);
// Rust's char::is_numeric: general category Nd, Nl or No.
bool IsNumeric(uint32_t cp);
// Invalid sequences replaced by U+FFFD, like Rust's String::from_utf8_lossy.
std::string Utf8Lossy(std::string_view bytes);

}  // namespace ftrain::data::hf
