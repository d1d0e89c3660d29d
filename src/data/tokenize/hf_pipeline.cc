// Normalizers, pre-tokenizers and decoders of tokenizer.json (see hf_pipeline.h).
#include "data/tokenize/hf_pipeline.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <nlohmann/json.hpp>

#include "data/tokenize/hf_text.h"

namespace ftrain::data::hf {

using nlohmann::json;

namespace {

Status Unsupported(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what +
                                 " is not supported by ftrain's tokenizer.json reader");
}

std::string TypeOf(const json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

template <typename T>
Status Get(const json& j, const char* key, const std::string& where, T* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? Status::InvalidArgument(where + ": field '" + key + "' is missing")
                    : Status::Ok();
  }
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return Status::InvalidArgument(where + ": field '" + key + "' has the wrong type");
  }
  return Status::Ok();
}

// {"String": s} or {"Regex": r}.
StatusOr<std::unique_ptr<Pattern>> MakePattern(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return Pattern::Literal(j["String"].get<std::string>());
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    return Pattern::Regex(j["Regex"].get<std::string>(), where);
  }
  return Status::InvalidArgument(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

// ---- normalizers ----

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  Status Apply(std::string* text) const override {
    for (const auto& p : parts) FT_RETURN_IF_ERROR(p->Apply(text));
    return Status::Ok();
  }
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm f) : form_(f) {}
  Status Apply(std::string* text) const override {
    std::string out;
    FT_RETURN_IF_ERROR(Normalize(form_, *text, &out));
    text->swap(out);
    return Status::Ok();
  }

 private:
  NormalForm form_;
};

// Replaces every match of the pattern (non-overlapping, left to right) with `content`.
Status ReplaceAll(const Pattern& p, const std::string& content, std::string* text) {
  std::vector<std::pair<size_t, size_t>> m;
  FT_RETURN_IF_ERROR(p.FindAll(*text, &m));
  if (m.empty()) return Status::Ok();
  std::string out;
  out.reserve(text->size() + m.size() * content.size());
  size_t prev = 0;
  for (const auto& [s, e] : m) {
    out.append(*text, prev, s - prev);
    out += content;
    prev = e;
  }
  out.append(*text, prev, std::string::npos);
  text->swap(out);
  return Status::Ok();
}

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Pattern> p, std::string c)
      : pattern_(std::move(p)), content_(std::move(c)) {}
  Status Apply(std::string* text) const override { return ReplaceAll(*pattern_, content_, text); }

 private:
  std::unique_ptr<Pattern> pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  Status Apply(std::string* text) const override {
    if (!text->empty()) text->insert(0, prepend_);
    return Status::Ok();
  }

 private:
  std::string prepend_;
};

// Rust's char::is_whitespace (Unicode White_Space).
bool IsWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Apply(std::string* text) const override {
    size_t b = 0, e = text->size(), len = 0;
    while (left_ && b < e && IsWhitespace(DecodeUtf8(*text, b, &len))) b += len;
    while (right_ && e > b) {
      size_t s = e - 1;
      while (s > b && ((*text)[s] & 0xC0) == 0x80) --s;
      if (!IsWhitespace(DecodeUtf8(*text, s, &len))) break;
      e = s;
    }
    *text = text->substr(b, e - b);
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const json& j, const std::string& where) {
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) {
      return Status::InvalidArgument(where + ": Sequence without a 'normalizers' list");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      FT_ASSIGN_OR_RETURN(
          auto p, MakeNormalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]"));
      seq->parts.push_back(std::move(p));
    }
    return std::unique_ptr<Normalizer>(std::move(seq));
  }
  static const std::array<std::pair<const char*, NormalForm>, 4> kForms = {
      {{"NFC", NormalForm::kNfc},
       {"NFD", NormalForm::kNfd},
       {"NFKC", NormalForm::kNfkc},
       {"NFKD", NormalForm::kNfkd}}};
  for (const auto& [name, form] : kForms) {
    if (type == name) return std::unique_ptr<Normalizer>(new UnicodeNormalizer(form));
  }
  if (type == "Replace") {
    std::string content;
    FT_RETURN_IF_ERROR(Get(j, "content", where, &content, true));
    if (!j.contains("pattern")) return Status::InvalidArgument(where + ": Replace without pattern");
    FT_ASSIGN_OR_RETURN(auto p, MakePattern(j["pattern"], where + ".pattern"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(p), content));
  }
  if (type == "Prepend") {
    std::string prepend;
    FT_RETURN_IF_ERROR(Get(j, "prepend", where, &prepend, true));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(prepend));
  }
  if (type == "Strip") {
    bool left = true, right = true;
    FT_RETURN_IF_ERROR(Get(j, "strip_left", where, &left, false));
    FT_RETURN_IF_ERROR(Get(j, "strip_right", where, &right, false));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  return Unsupported(where, "normalizer '" + (type.empty() ? j.dump() : type) + "'");
}

// ---- pre-tokenizers ----

namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start, end;
  bool match;
};

// The (range, is_match) list covering text, from sorted non-overlapping matches.
void Cover(size_t size, const std::vector<std::pair<size_t, size_t>>& m, bool invert,
           std::vector<Span>* out) {
  out->clear();
  size_t prev = 0;
  for (const auto& [s, e] : m) {
    if (prev != s) out->push_back({prev, s, invert});
    out->push_back({s, e, !invert});
    prev = e;
  }
  if (prev != size) out->push_back({prev, size, invert});
}

// NormalizedString::split: pieces of `in` per behavior, empty ones dropped.
void SplitBy(const Piece& in, const std::vector<Span>& spans, Behavior b, std::vector<Piece>* out) {
  std::vector<std::pair<Span, bool>> cuts;  // (range, remove)
  bool prev_match = false;
  if (b == Behavior::kMergedWithNext) {
    for (size_t k = spans.size(); k-- > 0;) {
      const Span& s = spans[k];
      if (s.match && !prev_match && !cuts.empty()) {
        cuts.back().first.start = s.start;
      } else {
        cuts.push_back({s, false});
      }
      prev_match = s.match;
    }
    std::reverse(cuts.begin(), cuts.end());
  } else {
    for (const Span& s : spans) {
      bool merge = false;
      if (b == Behavior::kContiguous) merge = s.match == prev_match;
      if (b == Behavior::kMergedWithPrevious) merge = s.match && !prev_match;
      if (merge && !cuts.empty()) {
        cuts.back().first.end = s.end;
      } else {
        cuts.push_back({s, b == Behavior::kRemoved && s.match});
      }
      prev_match = s.match;
    }
  }
  for (const auto& [s, remove] : cuts) {
    if (remove || s.end == s.start) continue;
    out->push_back({in.text.substr(s.start, s.end - s.start), in.at_origin && s.start == 0});
  }
}

// Appends `p` cut at the matches of `re` (the matches kept as `b` says), or whole when `re` is
// null; an empty piece is dropped. The scratch vectors are reused across calls.
Status SplitAtMatches(Piece* p, const Pattern* re, Behavior b, std::vector<Piece>* out) {
  if (re == nullptr) {
    if (!p->text.empty()) out->push_back(std::move(*p));
    return Status::Ok();
  }
  thread_local std::vector<std::pair<size_t, size_t>> m;
  thread_local std::vector<Span> spans;
  m.clear();
  FT_RETURN_IF_ERROR(re->FindAll(p->text, &m));
  Cover(p->text.size(), m, false, &spans);
  SplitBy(*p, spans, b, out);
  return Status::Ok();
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  Status Apply(std::vector<Piece>* pieces) const override {
    for (const auto& p : parts) FT_RETURN_IF_ERROR(p->Apply(pieces));
    return Status::Ok();
  }
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Pattern> p, Behavior b, bool invert)
      : pattern_(std::move(p)), behavior_(b), invert_(invert) {}
  Status Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    std::vector<std::pair<size_t, size_t>> m;
    std::vector<Span> spans;
    for (const Piece& p : *pieces) {
      m.clear();
      FT_RETURN_IF_ERROR(pattern_->FindAll(p.text, &m));
      Cover(p.text.size(), m, invert_, &spans);
      SplitBy(p, spans, behavior_, &out);
    }
    pieces->swap(out);
    return Status::Ok();
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  Behavior behavior_;
  bool invert_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  Status Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    std::vector<std::pair<size_t, size_t>> m;
    std::vector<Span> spans;
    for (const Piece& p : *pieces) {
      m.clear();
      size_t len = 0;
      for (size_t i = 0; i < p.text.size(); i += len) {
        if (IsNumeric(DecodeUtf8(p.text, i, &len))) m.push_back({i, i + len});
      }
      Cover(p.text.size(), m, false, &spans);
      SplitBy(p, spans, individual_ ? Behavior::kIsolated : Behavior::kContiguous, &out);
    }
    pieces->swap(out);
    return Status::Ok();
  }

 private:
  bool individual_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string rep, Prepend scheme, bool split)
      : rep_(std::move(rep)), space_(Pattern::Literal(" ")), scheme_(scheme), split_(split) {}
  Status Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    auto rep = Pattern::Literal(rep_);
    for (Piece& p : *pieces) {
      FT_RETURN_IF_ERROR(ReplaceAll(*space_, rep_, &p.text));
      const bool starts = p.text.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == Prepend::kAlways || (scheme_ == Prepend::kFirst && p.at_origin))) {
        p.text.insert(0, rep_);
      }
      FT_RETURN_IF_ERROR(
          SplitAtMatches(&p, split_ ? rep.get() : nullptr, Behavior::kMergedWithNext, &out));
    }
    pieces->swap(out);
    return Status::Ok();
  }

 private:
  std::string rep_;
  std::unique_ptr<Pattern> space_;
  Prepend scheme_;
  bool split_;
};

// The GPT-2 regex ByteLevel splits with when use_regex is true.
constexpr char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Prefix space and the GPT-2 split; the byte -> character mapping happens in the model.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool prefix, std::unique_ptr<Pattern> re)
      : prefix_(prefix), re_(std::move(re)) {}
  Status Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (Piece& p : *pieces) {
      if (prefix_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      FT_RETURN_IF_ERROR(SplitAtMatches(&p, re_.get(), Behavior::kIsolated, &out));
    }
    pieces->swap(out);
    return Status::Ok();
  }

 private:
  bool prefix_;
  std::unique_ptr<Pattern> re_;
};

StatusOr<Behavior> ParseBehavior(const json& j, const std::string& where) {
  std::string s;
  FT_RETURN_IF_ERROR(Get(j, "behavior", where, &s, true));
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  return Unsupported(where, "split behavior '" + s + "'");
}

StatusOr<std::unique_ptr<PreTokenizer>> MakeMetaspace(const json& j, const std::string& where) {
  std::string rep = "\xE2\x96\x81", scheme = "always";
  bool split = true, prefix = true;
  FT_RETURN_IF_ERROR(Get(j, "replacement", where, &rep, false));
  FT_RETURN_IF_ERROR(Get(j, "prepend_scheme", where, &scheme, false));
  FT_RETURN_IF_ERROR(Get(j, "split", where, &split, false));
  FT_RETURN_IF_ERROR(Get(j, "add_prefix_space", where, &prefix, false));
  if (!prefix) scheme = "never";  // the legacy field
  MetaspacePreTokenizer::Prepend p;
  if (scheme == "always") {
    p = MetaspacePreTokenizer::Prepend::kAlways;
  } else if (scheme == "first") {
    p = MetaspacePreTokenizer::Prepend::kFirst;
  } else if (scheme == "never") {
    p = MetaspacePreTokenizer::Prepend::kNever;
  } else {
    return Unsupported(where, "Metaspace prepend_scheme '" + scheme + "'");
  }
  return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(rep, p, split));
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const json& j, const std::string& where,
                                                         bool* byte_level) {
  *byte_level = false;
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return Status::InvalidArgument(where + ": Sequence without a 'pretokenizers' list");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string w = where + ".pretokenizers[" + std::to_string(i) + "]";
      if (*byte_level) return Unsupported(w, "a pre-tokenizer after ByteLevel");
      FT_ASSIGN_OR_RETURN(auto p, MakePreTokenizer((*it)[i], w, byte_level));
      seq->parts.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(std::move(seq));
  }
  if (type == "Split") {
    bool invert = false;
    FT_RETURN_IF_ERROR(Get(j, "invert", where, &invert, false));
    FT_ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j, where));
    if (!j.contains("pattern")) return Status::InvalidArgument(where + ": Split without pattern");
    FT_ASSIGN_OR_RETURN(auto p, MakePattern(j["pattern"], where + ".pattern"));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(p), b, invert));
  }
  if (type == "Digits") {
    bool individual = false;
    FT_RETURN_IF_ERROR(Get(j, "individual_digits", where, &individual, false));
    return std::unique_ptr<PreTokenizer>(new DigitsPreTokenizer(individual));
  }
  if (type == "Metaspace") return MakeMetaspace(j, where);
  if (type == "ByteLevel") {
    bool prefix = true, use_regex = true;
    FT_RETURN_IF_ERROR(Get(j, "add_prefix_space", where, &prefix, false));
    FT_RETURN_IF_ERROR(Get(j, "use_regex", where, &use_regex, false));
    std::unique_ptr<Pattern> re;
    if (use_regex) {
      FT_ASSIGN_OR_RETURN(re, Pattern::Regex(kGpt2Regex, where));
    }
    *byte_level = true;
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(prefix, std::move(re)));
  }
  return Unsupported(where, "pre-tokenizer '" + (type.empty() ? j.dump() : type) + "'");
}

// ---- decoders ----

namespace {

std::array<std::string, 256> BuildByteChars() {
  std::array<std::string, 256> out;
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = direct[b] ? uint32_t(b) : 256 + n++;
    AppendUtf8(cp, &out[b]);
  }
  return out;
}

const std::array<std::string, 256>& ByteChars() {
  static const std::array<std::string, 256> kTable = BuildByteChars();
  return kTable;
}

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> parts;
  Status Apply(std::vector<std::string>* t) const override {
    for (const auto& p : parts) FT_RETURN_IF_ERROR(p->Apply(t));
    return Status::Ok();
  }
};

class ByteLevelDecoder : public Decoder {
 public:
  Status Apply(std::vector<std::string>* t) const override {
    std::string bytes;
    for (const std::string& tok : *t) {
      std::string mapped;
      bool all = true;
      size_t len = 0;
      for (size_t i = 0; i < tok.size() && all; i += len) {
        unsigned char b;
        all = ByteLevelByte(DecodeUtf8(tok, i, &len), &b);
        mapped.push_back(static_cast<char>(b));
      }
      bytes += all ? mapped : tok;
    }
    *t = {Utf8Lossy(bytes)};
    return Status::Ok();
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_(strip_first) {}
  Status Apply(std::vector<std::string>* t) const override {
    auto p = Pattern::Literal(rep_);
    for (size_t i = 0; i < t->size(); ++i) {
      FT_RETURN_IF_ERROR(ReplaceAll(*p, i == 0 && strip_ ? "" : " ", &(*t)[i]));
    }
    return Status::Ok();
  }

 private:
  std::string rep_;
  bool strip_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Pattern> p, std::string c)
      : pattern_(std::move(p)), content_(std::move(c)) {}
  Status Apply(std::vector<std::string>* t) const override {
    for (auto& tok : *t) FT_RETURN_IF_ERROR(ReplaceAll(*pattern_, content_, &tok));
    return Status::Ok();
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  Status Apply(std::vector<std::string>* t) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (Utf8Lossy(bytes) == bytes) {  // valid UTF-8
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < count; ++i) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (auto& tok : *t) {
      unsigned v = 0;
      if (tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(tok[3])) &&
          std::isxdigit(static_cast<unsigned char>(tok[4]))) {
        v = std::stoul(tok.substr(3, 2), nullptr, 16);
        bytes.push_back(static_cast<char>(v));
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(tok));
    }
    flush();
    t->swap(out);
    return Status::Ok();
  }
};

class FuseDecoder : public Decoder {
 public:
  Status Apply(std::vector<std::string>* t) const override {
    std::string all;
    for (const auto& s : *t) all += s;
    *t = {all};
    return Status::Ok();
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string c, size_t start, size_t stop)
      : content_(std::move(c)), start_(start), stop_(stop) {}
  Status Apply(std::vector<std::string>* t) const override {
    for (auto& tok : *t) {
      size_t b = 0, e = tok.size();
      for (size_t i = 0; i < start_ && tok.compare(b, content_.size(), content_) == 0; ++i) {
        b += content_.size();
      }
      for (size_t i = 0; i < stop_ && e >= b + content_.size() &&
                         tok.compare(e - content_.size(), content_.size(), content_) == 0;
           ++i) {
        e -= content_.size();
      }
      tok = tok.substr(b, e - b);
    }
    return Status::Ok();
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

}  // namespace

const std::string& ByteLevelChar(unsigned char b) { return ByteChars()[b]; }

bool ByteLevelByte(uint32_t cp, unsigned char* b) {
  if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
    *b = static_cast<unsigned char>(cp);
    return true;
  }
  if (cp < 256 || cp >= 256 + 68) return false;
  // The 68 bytes outside the direct ranges, in order, took 256, 257, ...
  uint32_t n = cp - 256;
  for (int v = 0; v < 256; ++v) {
    bool direct = (v >= '!' && v <= '~') || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE);
    if (direct) continue;
    if (n-- == 0) {
      *b = static_cast<unsigned char>(v);
      return true;
    }
  }
  return false;
}

StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const json& j, const std::string& where) {
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) {
      return Status::InvalidArgument(where + ": Sequence without a 'decoders' list");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      FT_ASSIGN_OR_RETURN(auto p,
                          MakeDecoder((*it)[i], where + ".decoders[" + std::to_string(i) + "]"));
      seq->parts.push_back(std::move(p));
    }
    return std::unique_ptr<Decoder>(std::move(seq));
  }
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder);
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder);
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder);
  if (type == "Metaspace") {
    std::string rep = "\xE2\x96\x81", scheme = "always";
    bool prefix = true;
    FT_RETURN_IF_ERROR(Get(j, "replacement", where, &rep, false));
    FT_RETURN_IF_ERROR(Get(j, "prepend_scheme", where, &scheme, false));
    FT_RETURN_IF_ERROR(Get(j, "add_prefix_space", where, &prefix, false));
    if (!prefix) scheme = "never";
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(rep, scheme != "never"));
  }
  if (type == "Replace") {
    std::string content;
    FT_RETURN_IF_ERROR(Get(j, "content", where, &content, true));
    if (!j.contains("pattern")) return Status::InvalidArgument(where + ": Replace without pattern");
    FT_ASSIGN_OR_RETURN(auto p, MakePattern(j["pattern"], where + ".pattern"));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(p), content));
  }
  if (type == "Strip") {
    std::string content = " ";
    size_t start = 0, stop = 0;
    FT_RETURN_IF_ERROR(Get(j, "content", where, &content, false));
    FT_RETURN_IF_ERROR(Get(j, "start", where, &start, false));
    FT_RETURN_IF_ERROR(Get(j, "stop", where, &stop, false));
    return std::unique_ptr<Decoder>(new StripDecoder(content, start, stop));
  }
  return Unsupported(where, "decoder '" + (type.empty() ? j.dump() : type) + "'");
}

}  // namespace ftrain::data::hf
