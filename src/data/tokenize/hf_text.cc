// Patterns over PCRE2 (8-bit, UTF + UCP, JIT) and normalization over ICU's Normalizer2.
#include "data/tokenize/hf_text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <cstring>

namespace ftrain::data::hf {
namespace {

class LiteralPattern : public Pattern {
 public:
  explicit LiteralPattern(std::string s) : s_(std::move(s)) {}
  Status FindAll(std::string_view text,
                 std::vector<std::pair<size_t, size_t>>* out) const override {
    if (s_.empty()) return Status::Ok();
    for (size_t at = text.find(s_); at != std::string_view::npos; at = text.find(s_, at)) {
      out->push_back({at, at + s_.size()});
      at += s_.size();
    }
    return Status::Ok();
  }

 private:
  std::string s_;
};

// Per-thread PCRE2 match state: match data and a JIT stack large enough for long runs of
// whitespace under `\s+(?!\S)`. Shared by every pattern the thread runs (they are used one at
// a time).
struct MatchState {
  MatchState()
      : data(pcre2_match_data_create(16, nullptr)),
        stack(pcre2_jit_stack_create(64 << 10, 8 << 20, nullptr)),
        context(pcre2_match_context_create(nullptr)) {
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  pcre2_match_data* data;
  pcre2_jit_stack* stack;
  pcre2_match_context* context;
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

class RegexPattern : public Pattern {
 public:
  ~RegexPattern() override { pcre2_code_free(code_); }

  static StatusOr<std::unique_ptr<Pattern>> Compile(const std::string& pattern,
                                                    const std::string& where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    // Oniguruma's and PCRE2's UCP classes agree on what these patterns use (\s includes
    // U+0085 in both; \p{L}, \p{N} are Unicode properties), so the pattern goes in as is.
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::InvalidArgument(where + ": regex '" + pattern +
                                     "' does not compile (PCRE2: " + reinterpret_cast<char*>(msg) +
                                     " at offset " + std::to_string(off) + ")");
    }
    std::unique_ptr<RegexPattern> r(new RegexPattern);
    r->code_ = code;
    r->source_ = pattern;
    // Without JIT (a platform without it) pcre2_match interprets; slower, same result.
    r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return std::unique_ptr<Pattern>(std::move(r));
  }

  Status FindAll(std::string_view text,
                 std::vector<std::pair<size_t, size_t>>* out) const override {
    MatchState& st = ThreadMatchState();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t at = 0;
    while (at < text.size()) {
      // The text was validated as UTF-8 when it was read: skip PCRE2's own check.
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), at, PCRE2_NO_UTF_CHECK, st.data,
                                      st.context)
                    : pcre2_match(code_, subject, text.size(), at, PCRE2_NO_UTF_CHECK, st.data,
                                  st.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        return Status::Internal("regex '" + source_ + "' failed on a text of " +
                                std::to_string(text.size()) +
                                " bytes: " + reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
      size_t s = ov[0], e = ov[1];
      if (e == s) {  // an empty match: no piece; step over one character like Oniguruma
        size_t len = 1;
        DecodeUtf8(text, s, &len);
        at = s + len;
        continue;
      }
      out->push_back({s, e});
      at = e;
    }
    return Status::Ok();
  }

 private:
  RegexPattern() = default;
  pcre2_code* code_ = nullptr;
  std::string source_;
  bool jit_ = false;
};

bool IsAscii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<Pattern> Pattern::Literal(std::string s) {
  return std::make_unique<LiteralPattern>(std::move(s));
}

StatusOr<std::unique_ptr<Pattern>> Pattern::Regex(const std::string& pattern,
                                                  const std::string& where) {
  return RegexPattern::Compile(pattern, where);
}

Status Normalize(NormalForm form, std::string_view in, std::string* out) {
  if (IsAscii(in)) {  // ASCII is invariant under all four forms
    out->assign(in);
    return Status::Ok();
  }
  UErrorCode ec = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      n = icu::Normalizer2::getNFCInstance(ec);
      break;
    case NormalForm::kNfd:
      n = icu::Normalizer2::getNFDInstance(ec);
      break;
    case NormalForm::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(ec);
      break;
    case NormalForm::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(ec);
      break;
  }
  if (U_FAILURE(ec)) {
    return Status::Internal(std::string("ICU normalizer unavailable: ") + u_errorName(ec));
  }
  icu::StringPiece piece(in.data(), static_cast<int32_t>(in.size()));
  if (n->isNormalizedUTF8(piece, ec) && U_SUCCESS(ec)) {
    out->assign(in);
    return Status::Ok();
  }
  ec = U_ZERO_ERROR;
  out->clear();
  icu::StringByteSink<std::string> sink(out, static_cast<int32_t>(in.size()));
  n->normalizeUTF8(0, piece, sink, nullptr, ec);
  if (U_FAILURE(ec)) {
    return Status::Internal(std::string("ICU normalization failed: ") + u_errorName(ec));
  }
  return Status::Ok();
}

uint32_t DecodeUtf8(std::string_view s, size_t i, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  unsigned char c = p[i];
  size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (c >= 0x80 && c < 0xC0) n = 1;
  if (i + n > s.size()) n = 1;
  *len = n;
  if (n == 1) return c;
  uint32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsNumeric(uint32_t cp) {
  const int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

std::string Utf8Lossy(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    unsigned char c = s[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    // The longest valid prefix of a sequence is replaced by one U+FFFD (Unicode's practice,
    // which from_utf8_lossy follows).
    size_t k = 1;
    bool ok = need > 0;
    for (; ok && k <= need; ++k) {
      if (i + k >= bytes.size()) {
        ok = false;
        break;
      }
      unsigned char b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(bytes.data() + i, need + 1);
      i += need + 1;
    } else {
      out += "\xEF\xBF\xBD";
      i += need == 0 ? 1 : k;
    }
  }
  return out;
}

}  // namespace ftrain::data::hf
