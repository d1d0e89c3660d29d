// index.json (de)serialisation with nlohmann::json, and the data version.
#include "data/format/index.h"

#include <nlohmann/json.hpp>

#include "data/format/format.h"
#include "data/format/hash.h"

namespace ftrain::data {

using nlohmann::json;

std::string DatasetIndex::ComputeDataVersion() const {
  std::string canon = std::string(kIndexFormat) + " v" + std::to_string(kIndexVersion) +
                      "\nseq_len " + std::to_string(seq_len) + "\ntoken_bytes " +
                      std::to_string(token_bytes) + "\nchunk_rows " + std::to_string(chunk_rows) +
                      "\ntokenizer " + Hex64(tokenizer_xxh3) + "\n";
  for (const auto& s : shards) {
    canon += "shard " + s.name + " " + std::to_string(s.rows) + " " + Hex64(s.xxh3) + "\n";
  }
  return Hex64(Hash64(canon.data(), canon.size()));
}

std::string DatasetIndex::ToJson() const {
  json j;
  j["format"] = kIndexFormat;
  j["version"] = kIndexVersion;
  j["data_version"] = data_version;
  j["seq_len"] = seq_len;
  j["row_tokens"] = row_tokens();
  j["dtype"] = dtype_name();
  j["chunk_rows"] = chunk_rows;
  j["rows_per_shard"] = rows_per_shard;
  j["num_rows"] = num_rows;
  j["tokenizer"] = {
      {"type", tokenizer_type},   {"file", tokenizer_file}, {"xxh3", Hex64(tokenizer_xxh3)},
      {"vocab_size", vocab_size}, {"bos_id", bos_id},       {"eos_id", eos_id}};
  if (!tokenizer_config_file.empty()) j["tokenizer"]["config_file"] = tokenizer_config_file;
  j["shards"] = json::array();
  for (const auto& s : shards) {
    j["shards"].push_back(
        {{"name", s.name}, {"rows", s.rows}, {"bytes", s.bytes}, {"xxh3", Hex64(s.xxh3)}});
  }
  j["inputs"] = json::array();
  for (const auto& in : inputs) {
    j["inputs"].push_back({{"path", in.path}, {"bytes", in.bytes}, {"xxh3", Hex64(in.xxh3)}});
  }
  j["stats"] = {{"documents", stats.documents},
                {"text_bytes", stats.text_bytes},
                {"stream_tokens", stats.stream_tokens},
                {"dropped_tail_tokens", stats.dropped_tail_tokens},
                {"skipped_empty_documents", stats.skipped_empty_documents},
                {"skipped_invalid_lines", stats.skipped_invalid_lines},
                {"bad_records", stats.bad_records}};
  return j.dump(2) + "\n";
}

namespace {

// Typed field access that names the field on error.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  template <typename T>
  Status Get(const char* key, T* out) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Missing(key);
    try {
      *out = it->template get<T>();
    } catch (const json::exception& e) {
      return Status::Corruption(where_ + ": field '" + key + "' has the wrong type: " + e.what());
    }
    return Status::Ok();
  }
  Status GetHex(const char* key, uint64_t* out) const {
    std::string s;
    FT_RETURN_IF_ERROR(Get(key, &s));
    if (!ParseHex64(s, out)) {
      return Status::Corruption(where_ + ": field '" + key + "' = '" + s +
                                "' is not 16 hex digits");
    }
    return Status::Ok();
  }
  Status Missing(const char* key) const {
    return Status::Corruption(where_ + ": field '" + key + "' is missing");
  }

 private:
  const json& j_;
  std::string where_;
};

// format, version, data_version and the row geometry (seq_len, dtype, chunk and shard rows).
Status ParseGeometry(const json& j, const std::string& where, DatasetIndex* x) {
  Fields f(j, where);
  std::string format, dtype;
  int version = 0;
  FT_RETURN_IF_ERROR(f.Get("format", &format));
  FT_RETURN_IF_ERROR(f.Get("version", &version));
  if (format != kIndexFormat || version != kIndexVersion) {
    return Status::Corruption(where + ": format '" + format + "' version " +
                              std::to_string(version) + " is not supported (expected '" +
                              kIndexFormat + "' version " + std::to_string(kIndexVersion) + ")");
  }
  FT_RETURN_IF_ERROR(f.Get("data_version", &x->data_version));
  FT_RETURN_IF_ERROR(f.Get("seq_len", &x->seq_len));
  FT_RETURN_IF_ERROR(f.Get("dtype", &dtype));
  FT_RETURN_IF_ERROR(f.Get("chunk_rows", &x->chunk_rows));
  FT_RETURN_IF_ERROR(f.Get("rows_per_shard", &x->rows_per_shard));
  FT_RETURN_IF_ERROR(f.Get("num_rows", &x->num_rows));
  if (dtype == "uint16")
    x->token_bytes = 2;
  else if (dtype == "uint32")
    x->token_bytes = 4;
  else
    return Status::Corruption(where + ": dtype '" + dtype + "' is not uint16 or uint32");
  if (x->seq_len == 0 || x->chunk_rows == 0 || x->rows_per_shard == 0 ||
      x->rows_per_shard % x->chunk_rows != 0) {
    return Status::Corruption(where +
                              ": seq_len, chunk_rows and rows_per_shard must be > 0 and "
                              "rows_per_shard a multiple of chunk_rows");
  }
  return Status::Ok();
}

// The tokenizer object: its file, hash, ids and type.
Status ParseTokenizer(const json& j, const std::string& where, DatasetIndex* x) {
  auto tok = j.find("tokenizer");
  if (tok == j.end() || !tok->is_object()) return Fields(j, where).Missing("tokenizer");
  Fields t(*tok, where + ": tokenizer");
  FT_RETURN_IF_ERROR(t.Get("file", &x->tokenizer_file));
  FT_RETURN_IF_ERROR(t.GetHex("xxh3", &x->tokenizer_xxh3));
  FT_RETURN_IF_ERROR(t.Get("vocab_size", &x->vocab_size));
  FT_RETURN_IF_ERROR(t.Get("bos_id", &x->bos_id));
  FT_RETURN_IF_ERROR(t.Get("eos_id", &x->eos_id));
  FT_RETURN_IF_ERROR(ValidateFileName(x->tokenizer_file, where + ": tokenizer.file"));
  if (tok->contains("type")) FT_RETURN_IF_ERROR(t.Get("type", &x->tokenizer_type));
  if (x->tokenizer_type != "sentencepiece" && x->tokenizer_type != "huggingface") {
    return Status::Corruption(where + ": tokenizer.type '" + x->tokenizer_type +
                              "' is not sentencepiece or huggingface");
  }
  if (tok->contains("config_file")) {
    FT_RETURN_IF_ERROR(t.Get("config_file", &x->tokenizer_config_file));
    FT_RETURN_IF_ERROR(
        ValidateFileName(x->tokenizer_config_file, where + ": tokenizer.config_file"));
  }
  return Status::Ok();
}

// The shard list: names in order, every shard but the last full, the rows adding up.
Status ParseShards(const json& j, const std::string& where, DatasetIndex* x) {
  auto shards = j.find("shards");
  if (shards == j.end() || !shards->is_array() || shards->empty()) {
    return Status::Corruption(where + ": 'shards' is missing or empty");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    const std::string w = where + ": shards[" + std::to_string(i) + "]";
    Fields s((*shards)[i], w);
    ShardEntry e;
    FT_RETURN_IF_ERROR(s.Get("name", &e.name));
    FT_RETURN_IF_ERROR(s.Get("rows", &e.rows));
    FT_RETURN_IF_ERROR(s.Get("bytes", &e.bytes));
    FT_RETURN_IF_ERROR(s.GetHex("xxh3", &e.xxh3));
    FT_RETURN_IF_ERROR(ValidateFileName(e.name, w));
    uint64_t idx = 0;
    if (!ParseShardFileName(e.name, &idx) || idx != i) {
      return Status::Corruption(w + ": name '" + e.name + "' should be '" + ShardFileName(i) + "'");
    }
    bool last = i + 1 == shards->size();
    if (e.rows == 0 || e.rows > x->rows_per_shard || (!last && e.rows != x->rows_per_shard)) {
      return Status::Corruption(w + ": " + std::to_string(e.rows) +
                                " rows; every shard but the last must hold rows_per_shard = " +
                                std::to_string(x->rows_per_shard));
    }
    total += e.rows;
    x->shards.push_back(std::move(e));
  }
  if (total != x->num_rows) {
    return Status::Corruption(where + ": num_rows " + std::to_string(x->num_rows) +
                              " differs from the sum over shards " + std::to_string(total));
  }
  return Status::Ok();
}

// The optional inputs list and pack statistics.
Status ParseInputsAndStats(const json& j, const std::string& where, DatasetIndex* x) {
  auto inputs = j.find("inputs");
  if (inputs != j.end() && inputs->is_array()) {
    for (size_t i = 0; i < inputs->size(); ++i) {
      Fields in((*inputs)[i], where + ": inputs[" + std::to_string(i) + "]");
      InputEntry e;
      FT_RETURN_IF_ERROR(in.Get("path", &e.path));
      FT_RETURN_IF_ERROR(in.Get("bytes", &e.bytes));
      FT_RETURN_IF_ERROR(in.GetHex("xxh3", &e.xxh3));
      x->inputs.push_back(std::move(e));
    }
  }
  auto stats = j.find("stats");
  if (stats != j.end() && stats->is_object()) {
    Fields st(*stats, where + ": stats");
    FT_RETURN_IF_ERROR(st.Get("documents", &x->stats.documents));
    FT_RETURN_IF_ERROR(st.Get("text_bytes", &x->stats.text_bytes));
    FT_RETURN_IF_ERROR(st.Get("stream_tokens", &x->stats.stream_tokens));
    FT_RETURN_IF_ERROR(st.Get("dropped_tail_tokens", &x->stats.dropped_tail_tokens));
    FT_RETURN_IF_ERROR(st.Get("skipped_empty_documents", &x->stats.skipped_empty_documents));
    FT_RETURN_IF_ERROR(st.Get("skipped_invalid_lines", &x->stats.skipped_invalid_lines));
    if (stats->contains("bad_records")) {
      FT_RETURN_IF_ERROR(st.Get("bad_records", &x->stats.bad_records));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DatasetIndex> DatasetIndex::Parse(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(where + ": not a JSON object (index.json is unreadable)");
  }
  DatasetIndex x;
  FT_RETURN_IF_ERROR(ParseGeometry(j, where, &x));
  FT_RETURN_IF_ERROR(ParseTokenizer(j, where, &x));
  FT_RETURN_IF_ERROR(ParseShards(j, where, &x));
  FT_RETURN_IF_ERROR(ParseInputsAndStats(j, where, &x));
  std::string computed = x.ComputeDataVersion();
  if (computed != x.data_version) {
    return Status::Corruption(where + ": data_version " + x.data_version +
                              " does not match the content (computed " + computed +
                              "); the index was edited or damaged");
  }
  return x;
}

}  // namespace ftrain::data
