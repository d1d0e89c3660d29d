// BPE encoding as tokenizers' models/bpe (model.rs merge_word, word.rs merge_all).
#include "data/tokenize/hf_bpe.h"

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "data/tokenize/hf_pipeline.h"
#include "data/tokenize/hf_text.h"

namespace ftrain::data::hf {

using nlohmann::json;

namespace {

constexpr size_t kCacheMaxWordBytes = 256;  // tokenizers' MAX_LENGTH
constexpr size_t kCacheCapacity = 1 << 16;

struct ThreadCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int>> words;
};

ThreadCache& Cache(uint64_t id) {
  thread_local ThreadCache cache;
  if (cache.owner != id) {
    cache.words.clear();
    cache.owner = id;
  }
  return cache;
}

uint64_t PairKey(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

// Raw bytes of a ByteLevel-form token; false if a character is not one of the 256.
bool ByteLevelRaw(const std::string& token, std::string* raw) {
  raw->clear();
  size_t len = 0;
  for (size_t i = 0; i < token.size(); i += len) {
    unsigned char b;
    if (!ByteLevelByte(DecodeUtf8(token, i, &len), &b)) return false;
    raw->push_back(static_cast<char>(b));
  }
  return true;
}

Status ParseMerges(const json& merges, const std::string& where,
                   std::vector<std::pair<std::string, std::string>>* out) {
  if (!merges.is_array()) return Status::InvalidArgument(where + ".merges: not a list");
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string s = m.get<std::string>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return Status::InvalidArgument(where + ".merges[" + std::to_string(i) + "]: '" + s +
                                       "' is not two tokens separated by one space");
      }
      out->push_back({s.substr(0, sp), s.substr(sp + 1)});
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out->push_back({m[0].get<std::string>(), m[1].get<std::string>()});
    } else {
      return Status::InvalidArgument(where + ".merges[" + std::to_string(i) +
                                     "]: expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return Status::Ok();
}

Status CheckUnsupported(const json& m, const std::string& where) {
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return Status::InvalidArgument(where + ": BPE with " + key +
                                     " is not supported by ftrain's tokenizer.json reader");
    }
  }
  auto d = m.find("dropout");
  if (d != m.end() && d->is_number() && d->get<double>() > 0) {
    return Status::InvalidArgument(where +
                                   ": BPE dropout makes tokenization random; set it to "
                                   "null for packing");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Bpe>> Bpe::FromJson(const json& m, const std::string& where,
                                             bool byte_level) {
  FT_RETURN_IF_ERROR(CheckUnsupported(m, where));
  std::unique_ptr<Bpe> b(new Bpe);
  static std::atomic<uint64_t> next_id{1};
  b->cache_id_ = next_id++;
  b->byte_level_ = byte_level;
  auto flag = [&](const char* key) {
    auto it = m.find(key);
    return it != m.end() && it->is_boolean() && it->get<bool>();
  };
  b->byte_fallback_ = flag("byte_fallback");
  b->fuse_unk_ = flag("fuse_unk");
  b->ignore_merges_ = flag("ignore_merges");
  auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object()) {
    return Status::InvalidArgument(where + ".vocab: missing or not an object");
  }
  int max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= (int64_t{1} << 31) - 1) {
      return Status::InvalidArgument(where + ".vocab['" + it.key() + "']: not a token id");
    }
    const int id = it.value().get<int>();
    b->vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  b->vocab_r_.assign(size_t(max_id + 1), std::string());
  b->present_.assign(size_t(max_id + 1), false);
  std::string raw;
  for (const auto& [tok, id] : b->vocab_) {
    b->vocab_r_[id] = tok;
    b->present_[id] = true;
    size_t len = 0;
    const uint32_t cp = DecodeUtf8(tok, 0, &len);
    if (!tok.empty() && len == tok.size()) b->char_ids_[cp] = id;
    if (b->ignore_merges_) {
      if (!byte_level) {
        b->whole_words_[tok] = id;
      } else if (ByteLevelRaw(tok, &raw)) {
        b->whole_words_[raw] = id;
      }
    }
  }
  for (int v = 0; v < 256; ++v) {
    b->byte_ids_[v] = b->TokenToId(ByteLevelChar(static_cast<unsigned char>(v)));
    char code[8];
    std::snprintf(code, sizeof(code), "<0x%02X>", v);
    b->fallback_ids_[v] = b->TokenToId(code);
  }
  auto unk = m.find("unk_token");
  if (unk != m.end() && unk->is_string()) {
    b->unk_id_ = b->TokenToId(unk->get<std::string>());
    if (b->unk_id_ < 0) {
      return Status::InvalidArgument(where + ".unk_token '" + unk->get<std::string>() +
                                     "' is not in the vocabulary");
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  auto mj = m.find("merges");
  if (mj != m.end()) FT_RETURN_IF_ERROR(ParseMerges(*mj, where, &merges));
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [l, rt] = merges[r];
    const int a = b->TokenToId(l), c = b->TokenToId(rt), n = b->TokenToId(l + rt);
    if (a < 0 || c < 0 || n < 0) {
      return Status::InvalidArgument(where + ".merges[" + std::to_string(r) + "]: '" + l + "' + '" +
                                     rt + "' uses a token not in the vocabulary");
    }
    b->merges_.emplace(PairKey(a, c), std::make_pair(uint32_t(r), n));  // first rank wins
  }
  return b;
}

const std::string* Bpe::IdToToken(int id) const {
  if (id < 0 || size_t(id) >= vocab_r_.size() || !present_[id]) return nullptr;
  return &vocab_r_[id];
}

int Bpe::TokenToId(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

// merge_word's first half: one symbol per byte (byte-level) or per character, with byte
// fallback and unk exactly as model.rs orders them.
void Bpe::InitialSymbols(std::string_view w, std::vector<int>* syms) const {
  syms->clear();
  if (byte_level_) {
    for (unsigned char c : w) {
      if (byte_ids_[c] >= 0) {
        syms->push_back(byte_ids_[c]);
      } else if (unk_id_ >= 0) {
        if (!(fuse_unk_ && !syms->empty() && syms->back() == unk_id_)) syms->push_back(unk_id_);
      }
    }
    return;
  }
  int pending_unk = -1;  // an unk not yet added (fused with following unknown characters)
  size_t len = 0;
  for (size_t i = 0; i < w.size(); i += len) {
    const uint32_t cp = DecodeUtf8(w, i, &len);
    auto it = char_ids_.find(cp);
    if (it != char_ids_.end()) {
      if (pending_unk >= 0) syms->push_back(pending_unk);
      pending_unk = -1;
      syms->push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = 0; k < len; ++k) all = all && fallback_ids_[uint8_t(w[i + k])] >= 0;
      if (all) {
        for (size_t k = 0; k < len; ++k) syms->push_back(fallback_ids_[uint8_t(w[i + k])]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) syms->push_back(pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk >= 0) syms->push_back(pending_unk);
}

void Bpe::Merge(std::string_view w, std::vector<int>* ids) const {
  struct Symbol {
    int id;
    int prev, next;
    bool live;
  };
  struct Cand {
    uint32_t rank;
    int pos;
    int new_id;
    bool operator<(const Cand& o) const {  // priority_queue pops the largest: invert
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<int> init;
  InitialSymbols(w, &init);
  std::vector<Symbol> s(init.size());
  for (size_t i = 0; i < init.size(); ++i) {
    s[i] = {init[i], int(i) - 1, i + 1 < init.size() ? int(i + 1) : -1, true};
  }
  std::priority_queue<Cand> q;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    auto it = merges_.find(PairKey(s[i].id, s[i + 1].id));
    if (it != merges_.end()) q.push({it->second.first, int(i), it->second.second});
  }
  while (!q.empty()) {
    const Cand top = q.top();
    q.pop();
    Symbol& cur = s[top.pos];
    if (!cur.live || cur.next < 0) continue;
    const int nx = cur.next;
    auto it = merges_.find(PairKey(cur.id, s[nx].id));
    if (it == merges_.end() || it->second.second != top.new_id) continue;  // expired entry
    cur.id = top.new_id;
    s[nx].live = false;
    cur.next = s[nx].next;
    if (cur.next >= 0) s[cur.next].prev = top.pos;
    if (cur.prev >= 0) {
      auto p = merges_.find(PairKey(s[cur.prev].id, cur.id));
      if (p != merges_.end()) q.push({p->second.first, cur.prev, p->second.second});
    }
    if (cur.next >= 0) {
      auto n = merges_.find(PairKey(cur.id, s[cur.next].id));
      if (n != merges_.end()) q.push({n->second.first, top.pos, n->second.second});
    }
  }
  for (const Symbol& x : s) {
    if (x.live) ids->push_back(x.id);
  }
}

void Bpe::Tokenize(std::string_view word, std::vector<int>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = whole_words_.find(std::string(word));
    if (it != whole_words_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (word.size() >= kCacheMaxWordBytes) return Merge(word, ids);
  ThreadCache& cache = Cache(cache_id_);
  auto hit = cache.words.find(std::string(word));
  if (hit != cache.words.end()) {
    ids->insert(ids->end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t before = ids->size();
  Merge(word, ids);
  if (cache.words.size() < kCacheCapacity) {
    cache.words.emplace(std::string(word), std::vector<int>(ids->begin() + before, ids->end()));
  }
}

}  // namespace ftrain::data::hf
