// HfTokenizer: tokenizer.json's added tokens, normalizer, pre-tokenizer, BPE model and decoder
// wired as tokenizers' Tokenizer::encode_single_sequence / decode do it.
#include "data/tokenize/hf_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/format/format.h"
#include "data/format/hash.h"
#include "data/tokenize/hf_bpe.h"
#include "data/tokenize/hf_pipeline.h"

namespace ftrain::data {
namespace {

using nlohmann::json;

struct AddedToken {
  std::string content;  // matched as is (normalized: false) or in normalized form
  int id = -1;
  bool special = false;
};

// Leftmost-longest matching of a set of strings (tokenizers uses Aho-Corasick with
// MatchKind::LeftmostLongest; the same result).
class AddedMatcher {
 public:
  void Add(const std::string& s, int id) {
    if (s.empty()) return;
    by_first_[uint8_t(s[0])].push_back({s, id});
    any_ = true;
  }
  void Finish() {
    for (auto& v : by_first_) {
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
        return a.first.size() > b.first.size();
      });
    }
  }
  bool empty() const { return !any_; }
  // Calls piece(start, end, id) over text: id >= 0 for a match, -1 for text between matches.
  template <typename F>
  Status Split(std::string_view text, F&& piece) const {
    size_t prev = 0;
    for (size_t i = 0; i < text.size();) {
      const auto& cands = by_first_[uint8_t(text[i])];
      int hit = -1;
      size_t len = 0;
      for (const auto& [s, id] : cands) {
        if (text.compare(i, s.size(), s) == 0) {
          hit = id;
          len = s.size();
          break;
        }
      }
      if (hit < 0) {
        ++i;
        continue;
      }
      if (prev < i) FT_RETURN_IF_ERROR(piece(prev, i, -1));
      FT_RETURN_IF_ERROR(piece(i, i + len, hit));
      i += len;
      prev = i;
    }
    if (prev < text.size()) FT_RETURN_IF_ERROR(piece(prev, text.size(), -1));
    return Status::Ok();
  }

 private:
  std::vector<std::pair<std::string, int>> by_first_[256];
  bool any_ = false;
};

class HfTokenizer : public Tokenizer {
 public:
  Status Init(const json& j, const std::string& where, const std::string& config);
  void Keep(std::string bytes, std::string config) {
    xxh3_ = Hash64(bytes.data(), bytes.size());
    bytes_ = std::move(bytes);
    config_ = std::move(config);
  }

  Status Encode(std::string_view text, std::vector<int>* ids) const override {
    ids->clear();
    return raw_added_.Split(text, [&](size_t s, size_t e, int id) -> Status {
      if (id >= 0) {
        ids->push_back(id);
        return Status::Ok();
      }
      return EncodeSegment(text.substr(s, e - s), s == 0, ids);
    });
  }

  StatusOr<std::string> Decode(const std::vector<int>& ids) const override;
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_; }
  int eos_id() const override { return eos_; }
  const char* type() const override { return "huggingface"; }
  const char* file_name() const override { return kHfTokenizerFileName; }

 private:
  Status EncodeSegment(std::string_view seg, bool at_origin, std::vector<int>* ids) const;
  Status ParseAdded(const json& j, const std::string& where);
  StatusOr<int> SpecialFromConfig(const json& c, const char* key, const std::string& where) const;

  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_;
  std::unique_ptr<hf::Bpe> bpe_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<int, size_t> added_by_id_;  // id -> index in added_
  AddedMatcher raw_added_, normalized_added_;
  int vocab_size_ = 0, bos_ = -1, eos_ = -1;
};

Status HfTokenizer::EncodeSegment(std::string_view seg, bool at_origin,
                                  std::vector<int>* ids) const {
  std::string norm(seg);
  if (normalizer_) FT_RETURN_IF_ERROR(normalizer_->Apply(&norm));
  std::vector<hf::Piece> pieces;
  auto run = [&]() -> Status {
    if (pre_) FT_RETURN_IF_ERROR(pre_->Apply(&pieces));
    for (const hf::Piece& p : pieces) bpe_->Tokenize(p.text, ids);
    pieces.clear();
    return Status::Ok();
  };
  if (normalized_added_.empty()) {
    if (norm.empty()) return Status::Ok();
    pieces.push_back({std::move(norm), at_origin});
    return run();
  }
  return normalized_added_.Split(norm, [&](size_t s, size_t e, int id) -> Status {
    if (id >= 0) {
      ids->push_back(id);
      return Status::Ok();
    }
    pieces.push_back({norm.substr(s, e - s), at_origin && s == 0});
    return run();
  });
}

StatusOr<std::string> HfTokenizer::Decode(const std::vector<int>& ids) const {
  std::vector<std::string> tokens;
  for (int id : ids) {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) {
      if (!added_[it->second].special) tokens.push_back(added_[it->second].content);
      continue;
    }
    if (const std::string* t = bpe_->IdToToken(id)) tokens.push_back(*t);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  FT_RETURN_IF_ERROR(decoder_->Apply(&tokens));
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

Status HfTokenizer::ParseAdded(const json& j, const std::string& where) {
  auto list = j.find("added_tokens");
  if (list == j.end() || list->is_null()) return Status::Ok();
  if (!list->is_array()) return Status::InvalidArgument(where + ": added_tokens is not a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string w = where + ": added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return Status::InvalidArgument(w + ": needs an integer 'id' and a string 'content'");
    }
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (t.value(flag, false)) {
        return Status::InvalidArgument(w + " ('" + t["content"].get<std::string>() + "'): " + flag +
                                       "=true is not supported by ftrain's tokenizer.json "
                                       "reader");
      }
    }
    AddedToken a;
    a.content = t["content"].get<std::string>();
    a.id = t["id"].get<int>();
    a.special = t.value("special", false);
    if (a.id < 0) return Status::InvalidArgument(w + ": negative id");
    // tokenizers' default: special tokens match the raw text, others the normalized text.
    const bool normalized = t.value("normalized", !a.special);
    if (normalized) {
      std::string n = a.content;
      if (normalizer_) FT_RETURN_IF_ERROR(normalizer_->Apply(&n));
      normalized_added_.Add(n, a.id);
    } else {
      raw_added_.Add(a.content, a.id);
    }
    vocab_size_ = std::max(vocab_size_, a.id + 1);
    added_by_id_[a.id] = added_.size();
    added_.push_back(std::move(a));
  }
  raw_added_.Finish();
  normalized_added_.Finish();
  return Status::Ok();
}

// bos_token / eos_token: a string, {"content": ...}, or null.
StatusOr<int> HfTokenizer::SpecialFromConfig(const json& c, const char* key,
                                             const std::string& where) const {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return -1;
  std::string s;
  if (it->is_string()) {
    s = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    s = (*it)["content"].get<std::string>();
  } else {
    return Status::InvalidArgument(where + ": " + key + " is neither a string nor {content}");
  }
  for (const auto& a : added_) {
    if (a.content == s) return a.id;
  }
  int id = bpe_->TokenToId(s);
  if (id < 0) {
    return Status::InvalidArgument(where + ": " + key + " '" + s +
                                   "' is neither an added token nor in the vocabulary");
  }
  return id;
}

Status HfTokenizer::Init(const json& j, const std::string& where, const std::string& config) {
  const json null_json;
  auto field = [&](const char* k) -> const json& {
    auto it = j.find(k);
    return it == j.end() ? null_json : *it;
  };
  const json& model = field("model");
  if (!model.is_object()) return Status::InvalidArgument(where + ": no 'model' object");
  const std::string mtype = model.value("type", model.contains("merges") ? "BPE" : "");
  if (mtype != "BPE") {
    return Status::InvalidArgument(where + ": model type '" + mtype +
                                   "' is not supported by ftrain's tokenizer.json reader (BPE "
                                   "only; use the model's SentencePiece tokenizer.model)");
  }
  if (!field("normalizer").is_null()) {
    FT_ASSIGN_OR_RETURN(normalizer_,
                        hf::MakeNormalizer(field("normalizer"), where + ": normalizer"));
  }
  bool byte_level = false;
  if (!field("pre_tokenizer").is_null()) {
    FT_ASSIGN_OR_RETURN(
        pre_, hf::MakePreTokenizer(field("pre_tokenizer"), where + ": pre_tokenizer", &byte_level));
  }
  if (!field("decoder").is_null()) {
    FT_ASSIGN_OR_RETURN(decoder_, hf::MakeDecoder(field("decoder"), where + ": decoder"));
  }
  FT_ASSIGN_OR_RETURN(bpe_, hf::Bpe::FromJson(model, where + ": model", byte_level));
  vocab_size_ = bpe_->max_id() + 1;
  FT_RETURN_IF_ERROR(ParseAdded(j, where));
  if (!config.empty()) {
    const std::string cw = where + " (its " + kHfTokenizerConfigFileName + ")";
    json c = json::parse(config, nullptr, /*allow_exceptions=*/false);
    if (c.is_discarded() || !c.is_object()) {
      return Status::InvalidArgument(cw + ": not a JSON object");
    }
    FT_ASSIGN_OR_RETURN(bos_, SpecialFromConfig(c, "bos_token", cw));
    FT_ASSIGN_OR_RETURN(eos_, SpecialFromConfig(c, "eos_token", cw));
  }
  if (vocab_size_ <= 0) return Status::InvalidArgument(where + ": the vocabulary is empty");
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(std::string bytes, const std::string& where,
                                                     std::string config) {
  json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(where + ": not a JSON object (expected a tokenizer.json)");
  }
  std::unique_ptr<HfTokenizer> t(new HfTokenizer);
  FT_RETURN_IF_ERROR(t->Init(j, where, config));
  t->Keep(std::move(bytes), std::move(config));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace ftrain::data
