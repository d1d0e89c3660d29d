// Manifest and receipt (de)serialisation and validation.
#include "ckpt/manifest.h"

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "ckpt/filename.h"

namespace ftrain::ckpt {

using nlohmann::json;

bool ManifestBlob::HashOf(int rank, uint64_t* out) const {
  if (xxh3.size() != ranks.size()) return false;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) {
      *out = xxh3[i];
      return true;
    }
  }
  return false;
}

int64_t ManifestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

json RecordToJson(const DatasetRecord& r) {
  json j = {{"kind", r.kind},     {"name", r.name},        {"dtype", DTypeName(r.dtype)},
            {"length", r.length}, {"xxh3", Hex64(r.xxh3)}, {"stored_bytes", r.stored_bytes}};
  if (r.is_blob) {
    j["blob"] = true;
    j["policy"] = r.policy;
  } else {
    j["shape"] = r.shape;
    j["offset"] = r.offset;
  }
  return j;
}

Status Bad(const std::string& origin, const std::string& what) {
  return Status::Corruption(origin + ": " + what);
}

// Field access that turns JSON type errors into Corruption naming the field. Integers must
// be JSON integers that fit the destination (a huge or fractional number is not silently
// truncated); vectors are checked element by element.
template <typename T>
Status Convert(const json& v, T* out, const std::string& origin, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return Bad(origin, "field '" + key + "' is not a boolean");
    *out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        return Bad(origin, "field '" + key + "' is out of range (" + std::to_string(u) + ")");
      }
      *out = static_cast<T>(u);
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if constexpr (std::is_unsigned_v<T>) {
        if (i < 0) return Bad(origin, "field '" + key + "' is negative");
      } else {
        if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            i > static_cast<int64_t>(std::numeric_limits<T>::max())) {
          return Bad(origin, "field '" + key + "' is out of range (" + std::to_string(i) + ")");
        }
      }
      *out = static_cast<T>(i);
    } else {
      return Bad(origin, "field '" + key + "' is not an integer");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return Bad(origin, "field '" + key + "' is not a number");
    *out = v.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return Bad(origin, "field '" + key + "' is not a string");
    *out = v.get<std::string>();
  } else {
    // std::vector<integer>
    if (!v.is_array()) return Bad(origin, "field '" + key + "' is not an array");
    if (v.size() > 64 * 1024) return Bad(origin, "field '" + key + "' has too many elements");
    out->clear();
    for (size_t i = 0; i < v.size(); ++i) {
      typename T::value_type e{};
      FT_RETURN_IF_ERROR(Convert(v[i], &e, origin, key + "[" + std::to_string(i) + "]"));
      out->push_back(e);
    }
  }
  return Status::Ok();
}

template <typename T>
Status Get(const json& j, const char* key, T* out, const std::string& origin) {
  if (!j.is_object())
    return Bad(origin, std::string("an entry holding '") + key + "' is not an object");
  auto it = j.find(key);
  if (it == j.end()) return Bad(origin, std::string("missing field '") + key + "'");
  return Convert(*it, out, origin, key);
}

// An optional field: absent -> `fallback`; present with the wrong type -> Corruption.
template <typename T>
Status GetOr(const json& j, const char* key, T fallback, T* out, const std::string& origin) {
  if (!j.is_object() || !j.contains(key)) {
    *out = fallback;
    return Status::Ok();
  }
  return Get(j, key, out, origin);
}

Status GetArray(const json& j, const char* key, const json** out, const std::string& origin) {
  if (!j.is_object())
    return Bad(origin, std::string("an entry holding '") + key + "' is not an object");
  auto it = j.find(key);
  if (it == j.end()) return Bad(origin, std::string("missing field '") + key + "'");
  if (!it->is_array()) return Bad(origin, std::string("field '") + key + "' is not an array");
  *out = &*it;
  return Status::Ok();
}

// The "format" field, which must be exactly `want`.
Status CheckFormat(const json& j, const char* want, const char* what, const std::string& origin) {
  if (!j.is_object()) return Bad(origin, std::string("not ") + what + " (not a JSON object)");
  auto it = j.find("format");
  if (it == j.end() || !it->is_string() || it->get<std::string>() != want) {
    return Bad(origin, std::string("not ") + what + " (field 'format' is not \"" + want + "\")");
  }
  return Status::Ok();
}

Status GetHash(const json& j, const char* key, uint64_t* out, const std::string& origin) {
  std::string hex;
  FT_RETURN_IF_ERROR(Get(j, key, &hex, origin));
  if (!ParseHex64(hex, out)) return Bad(origin, std::string("field '") + key + "' is not a hash");
  return Status::Ok();
}

Status CheckName(const std::string& s, const std::string& what, const std::string& origin) {
  // Tensor and blob names become HDF5 paths; keep them to a plain alphabet.
  if (s.empty() || s.size() > 512) return Bad(origin, what + " name has a bad length");
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
          c == '/')) {
      return Bad(origin, what + " name '" + s + "' has a character outside [A-Za-z0-9._/-]");
    }
  }
  if (s.find("..") != std::string::npos || s.front() == '/' || s.back() == '/') {
    return Bad(origin, what + " name '" + s + "' is not a plain relative name");
  }
  return Status::Ok();
}

StatusOr<DatasetRecord> RecordFromJson(const json& j, const std::string& origin) {
  DatasetRecord r;
  std::string dtype;
  FT_RETURN_IF_ERROR(Get(j, "kind", &r.kind, origin));
  FT_RETURN_IF_ERROR(Get(j, "name", &r.name, origin));
  FT_RETURN_IF_ERROR(Get(j, "dtype", &dtype, origin));
  FT_RETURN_IF_ERROR(Get(j, "length", &r.length, origin));
  FT_RETURN_IF_ERROR(GetHash(j, "xxh3", &r.xxh3, origin));
  FT_RETURN_IF_ERROR(Get(j, "stored_bytes", &r.stored_bytes, origin));
  auto r_dtype = DTypeFromName(dtype);
  if (!r_dtype.ok()) return Bad(origin, "field 'dtype': " + r_dtype.status().message());
  r.dtype = *r_dtype;
  FT_RETURN_IF_ERROR(CheckName(r.kind, "kind", origin));
  FT_RETURN_IF_ERROR(CheckName(r.name, "tensor", origin));
  FT_RETURN_IF_ERROR(GetOr(j, "blob", false, &r.is_blob, origin));
  if (r.is_blob) {
    FT_RETURN_IF_ERROR(Get(j, "policy", &r.policy, origin));
  } else {
    FT_RETURN_IF_ERROR(Get(j, "shape", &r.shape, origin));
    FT_RETURN_IF_ERROR(Get(j, "offset", &r.offset, origin));
  }
  if (r.length < 0 || r.offset < 0) return Bad(origin, "negative length or offset");
  return r;
}

}  // namespace

std::string Receipt::ToJson() const {
  json datasets = json::array();
  for (const auto& d : info.datasets) datasets.push_back(RecordToJson(d));
  json j = {{"format", "ftrain-receipt"},
            {"format_version", kFormatVersion},
            {"step", step},
            {"rank", rank},
            {"world_size", world_size},
            {"file", file},
            {"size", size},
            {"xxh3", Hex64(xxh3)},
            {"raw_bytes", info.raw_bytes},
            {"stored_bytes", info.stored_bytes},
            {"writer", writer},
            {"datasets", datasets},
            {"config_hash", meta.config_hash},
            {"code_version", meta.code_version},
            {"data_version", meta.data_version},
            {"layout_json", meta.layout_json},
            {"generation", generation}};
  return j.dump(1);
}

namespace {
StatusOr<Receipt> ReceiptFromJson(const json& j, const std::string& origin);
StatusOr<Manifest> ManifestFromJson(const json& j, const std::string& origin);

// Parses `text` and runs `from` with every exception caught: whatever a hostile or damaged
// file holds, the caller gets a Corruption naming it, never an exception.
template <typename T>
StatusOr<T> ParseGuarded(const std::string& text, const std::string& origin,
                         StatusOr<T> (*from)(const json&, const std::string&)) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(origin, "not valid JSON (truncated or damaged)");
  try {
    return from(j, origin);
  } catch (const std::exception& e) {
    return Bad(origin, std::string("malformed: ") + e.what());
  }
}
}  // namespace

StatusOr<Receipt> Receipt::FromJson(const std::string& text, const std::string& origin) {
  return ParseGuarded<Receipt>(text, origin, &ReceiptFromJson);
}

StatusOr<Manifest> Manifest::FromJson(const std::string& text, const std::string& origin) {
  return ParseGuarded<Manifest>(text, origin, &ManifestFromJson);
}

namespace {

StatusOr<Receipt> ReceiptFromJson(const json& j, const std::string& origin) {
  FT_RETURN_IF_ERROR(CheckFormat(j, "ftrain-receipt", "an ftrain shard receipt", origin));
  Receipt r;
  FT_RETURN_IF_ERROR(Get(j, "step", &r.step, origin));
  FT_RETURN_IF_ERROR(Get(j, "rank", &r.rank, origin));
  FT_RETURN_IF_ERROR(Get(j, "world_size", &r.world_size, origin));
  FT_RETURN_IF_ERROR(Get(j, "file", &r.file, origin));
  FT_RETURN_IF_ERROR(Get(j, "size", &r.size, origin));
  FT_RETURN_IF_ERROR(GetHash(j, "xxh3", &r.xxh3, origin));
  FT_RETURN_IF_ERROR(Get(j, "raw_bytes", &r.info.raw_bytes, origin));
  FT_RETURN_IF_ERROR(Get(j, "stored_bytes", &r.info.stored_bytes, origin));
  FT_RETURN_IF_ERROR(GetOr(j, "writer", std::string(), &r.writer, origin));
  FT_RETURN_IF_ERROR(GetOr(j, "generation", std::string(), &r.generation, origin));
  FT_RETURN_IF_ERROR(Get(j, "config_hash", &r.meta.config_hash, origin));
  FT_RETURN_IF_ERROR(Get(j, "code_version", &r.meta.code_version, origin));
  FT_RETURN_IF_ERROR(Get(j, "data_version", &r.meta.data_version, origin));
  FT_RETURN_IF_ERROR(Get(j, "layout_json", &r.meta.layout_json, origin));
  r.meta.step = r.step;
  r.meta.world_size = r.world_size;
  r.meta.generation = r.generation;
  if (r.step < 0 || r.step > kMaxStep) return Bad(origin, "field 'step' is out of range");
  if (r.world_size < 1 || r.world_size > kMaxWorldSize || r.rank < 0 || r.rank >= r.world_size) {
    return Bad(origin, "fields 'rank'/'world_size' are out of range");
  }
  if (!IsSafeRelativeName(r.file) || ParseShardFileName(r.file) != r.rank) {
    return Bad(origin, "receipt names file '" + r.file + "', not this rank's shard");
  }
  r.info.step = r.step;
  r.info.rank = r.rank;
  r.info.world_size = r.world_size;
  const json* datasets = nullptr;
  FT_RETURN_IF_ERROR(GetArray(j, "datasets", &datasets, origin));
  for (const auto& d : *datasets) {
    FT_ASSIGN_OR_RETURN(DatasetRecord rec, RecordFromJson(d, origin));
    r.info.datasets.push_back(std::move(rec));
  }
  return r;
}

}  // namespace

StatusOr<Manifest> BuildManifest(const CheckpointMeta& meta, const std::vector<Receipt>& receipts) {
  Manifest m;
  m.meta = meta;
  m.created_unix = static_cast<double>(time(nullptr));
  std::map<std::pair<std::string, std::string>, size_t> tensor_index, blob_index;
  for (const auto& r : receipts) {
    if (r.step != meta.step || r.world_size != meta.world_size) {
      return Status::Corruption("receipt of rank " + std::to_string(r.rank) + " is for step " +
                                std::to_string(r.step) + " world " + std::to_string(r.world_size) +
                                ", expected step " + std::to_string(meta.step) + " world " +
                                std::to_string(meta.world_size));
    }
    m.files.push_back({r.file, r.rank, r.size, r.xxh3});
    m.raw_bytes += r.info.raw_bytes;
    m.stored_bytes += r.info.stored_bytes;
    for (const auto& d : r.info.datasets) {
      auto key = std::make_pair(d.kind, d.name);
      if (d.is_blob) {
        auto it = blob_index.find(key);
        if (it == blob_index.end()) {
          blob_index[key] = m.blobs.size();
          m.blobs.push_back({d.kind, d.name, d.policy, {r.rank}, {d.xxh3}});
        } else {
          m.blobs[it->second].ranks.push_back(r.rank);
          m.blobs[it->second].xxh3.push_back(d.xxh3);
        }
        continue;
      }
      auto it = tensor_index.find(key);
      if (it == tensor_index.end()) {
        tensor_index[key] = m.tensors.size();
        m.tensors.push_back({d.kind, d.name, d.dtype, d.shape, {}});
        it = tensor_index.find(key);
      }
      ManifestTensor& t = m.tensors[it->second];
      if (t.dtype != d.dtype || t.shape != d.shape) {
        return Status::Corruption("ranks disagree on the dtype or shape of " + d.kind + "/" +
                                  d.name);
      }
      if (d.length > 0) t.pieces.push_back({r.rank, d.offset, d.length, d.xxh3});
    }
  }
  for (auto& t : m.tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const TensorPiece& a, const TensorPiece& b) { return a.offset < b.offset; });
  }
  // Round-trip through the validator so a bad receipt can never produce a manifest that a
  // reader would reject later.
  FT_ASSIGN_OR_RETURN(Manifest checked, Manifest::FromJson(m.ToJson(), "new manifest"));
  (void)checked;
  return m;
}

std::string Manifest::ToJson() const {
  json tensors_j = json::array();
  for (const auto& t : tensors) {
    json pieces = json::array();
    for (const auto& p : t.pieces) {
      pieces.push_back(
          {{"rank", p.rank}, {"offset", p.offset}, {"length", p.length}, {"xxh3", Hex64(p.xxh3)}});
    }
    tensors_j.push_back({{"kind", t.kind},
                         {"name", t.name},
                         {"dtype", DTypeName(t.dtype)},
                         {"shape", t.shape},
                         {"pieces", pieces}});
  }
  json blobs_j = json::array();
  for (const auto& b : blobs) {
    json bj = {{"group", b.group}, {"name", b.name}, {"policy", b.policy}, {"ranks", b.ranks}};
    if (b.xxh3.size() == b.ranks.size()) {
      json hashes = json::array();
      for (uint64_t h : b.xxh3) hashes.push_back(Hex64(h));
      bj["xxh3"] = hashes;
    }
    blobs_j.push_back(bj);
  }
  json files_j = json::array();
  for (const auto& f : files) {
    files_j.push_back(
        {{"path", f.path}, {"rank", f.rank}, {"size", f.size}, {"xxh3", Hex64(f.xxh3)}});
  }
  json layout = json::parse(meta.layout_json, nullptr, false);
  if (layout.is_discarded()) layout = json::object();
  json j = {{"format", "ftrain-checkpoint"},
            {"format_version", kFormatVersion},
            {"step", meta.step},
            {"world_size", meta.world_size},
            {"created_unix", created_unix},
            {"config_hash", meta.config_hash},
            {"code_version", meta.code_version},
            {"data_version", meta.data_version},
            {"generation", meta.generation},
            {"layout", layout},
            {"raw_bytes", raw_bytes},
            {"stored_bytes", stored_bytes},
            {"files", files_j},
            {"tensors", tensors_j},
            {"blobs", blobs_j}};
  return j.dump(1);
}

namespace {

// The shard files: one per rank of `w`, each a plain name matching its rank.
Status FilesFromJson(const json& j, int w, const std::string& origin, Manifest* m) {
  const json* files = nullptr;
  FT_RETURN_IF_ERROR(GetArray(j, "files", &files, origin));
  std::vector<bool> seen(static_cast<size_t>(w), false);
  for (const auto& f : *files) {
    ManifestFile mf;
    FT_RETURN_IF_ERROR(Get(f, "path", &mf.path, origin));
    FT_RETURN_IF_ERROR(Get(f, "rank", &mf.rank, origin));
    FT_RETURN_IF_ERROR(Get(f, "size", &mf.size, origin));
    FT_RETURN_IF_ERROR(GetHash(f, "xxh3", &mf.xxh3, origin));
    if (!IsSafeRelativeName(mf.path)) {
      return Bad(origin, "file path '" + mf.path +
                             "' is not a plain name inside the checkpoint (refusing to follow it)");
    }
    if (mf.rank < 0 || mf.rank >= w || ParseShardFileName(mf.path) != mf.rank ||
        seen[static_cast<size_t>(mf.rank)]) {
      return Bad(origin, "file '" + mf.path + "' does not match rank " + std::to_string(mf.rank));
    }
    seen[static_cast<size_t>(mf.rank)] = true;
    m->files.push_back(mf);
  }
  for (int r = 0; r < w; ++r) {
    if (!seen[static_cast<size_t>(r)]) {
      return Bad(origin,
                 "no shard file listed for rank " + std::to_string(r) + " of " + std::to_string(w));
    }
  }
  return Status::Ok();
}

// One tensor: a known dtype, a possible shape, pieces of ranks < `w` that tile it in order.
StatusOr<ManifestTensor> TensorFromJson(const json& tj, int w, const std::string& origin) {
  ManifestTensor t;
  std::string dtype;
  FT_RETURN_IF_ERROR(Get(tj, "kind", &t.kind, origin));
  FT_RETURN_IF_ERROR(Get(tj, "name", &t.name, origin));
  FT_RETURN_IF_ERROR(Get(tj, "dtype", &dtype, origin));
  FT_RETURN_IF_ERROR(Get(tj, "shape", &t.shape, origin));
  auto t_dtype = DTypeFromName(dtype);
  if (!t_dtype.ok()) return Bad(origin, "field 'dtype': " + t_dtype.status().message());
  t.dtype = *t_dtype;
  FT_RETURN_IF_ERROR(CheckName(t.kind, "kind", origin));
  FT_RETURN_IF_ERROR(CheckName(t.name, "tensor", origin));
  int64_t numel = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || (d > 0 && numel > (int64_t{1} << 40) / d)) {
      return Bad(origin, "tensor " + t.name + " has an impossible shape");
    }
    numel *= d;
  }
  int64_t next = 0;
  const json* pieces = nullptr;
  FT_RETURN_IF_ERROR(GetArray(tj, "pieces", &pieces, origin));
  for (const auto& pj : *pieces) {
    TensorPiece p;
    FT_RETURN_IF_ERROR(Get(pj, "rank", &p.rank, origin));
    FT_RETURN_IF_ERROR(Get(pj, "offset", &p.offset, origin));
    FT_RETURN_IF_ERROR(Get(pj, "length", &p.length, origin));
    FT_RETURN_IF_ERROR(GetHash(pj, "xxh3", &p.xxh3, origin));
    if (p.rank < 0 || p.rank >= w || p.offset != next || p.length <= 0 || p.length > numel - next) {
      return Bad(origin, "tensor " + t.kind + "/" + t.name +
                             ": pieces do not tile it (gap, overlap or bad rank at offset " +
                             std::to_string(p.offset) + ")");
    }
    next = p.offset + p.length;
    t.pieces.push_back(p);
  }
  if (next != numel) {
    return Bad(origin, "tensor " + t.kind + "/" + t.name + ": pieces cover " +
                           std::to_string(next) + " of " + std::to_string(numel) + " elements");
  }
  return t;
}

// One blob: a known policy, ranks < `w`, and (when present) one hash per rank.
StatusOr<ManifestBlob> BlobFromJson(const json& bj, int w, const std::string& origin) {
  ManifestBlob b;
  FT_RETURN_IF_ERROR(Get(bj, "group", &b.group, origin));
  FT_RETURN_IF_ERROR(Get(bj, "name", &b.name, origin));
  FT_RETURN_IF_ERROR(Get(bj, "policy", &b.policy, origin));
  FT_RETURN_IF_ERROR(Get(bj, "ranks", &b.ranks, origin));
  FT_RETURN_IF_ERROR(CheckName(b.group, "blob group", origin));
  FT_RETURN_IF_ERROR(CheckName(b.name, "blob", origin));
  if (b.policy != "replicated" && b.policy != "per_rank") {
    return Bad(origin, "blob " + b.name + ": field 'policy' is '" + b.policy +
                           "', not replicated or per_rank");
  }
  if (b.ranks.empty()) return Bad(origin, "blob " + b.name + ": field 'ranks' is empty");
  for (int r : b.ranks) {
    if (r < 0 || r >= w) return Bad(origin, "blob " + b.name + " names rank " + std::to_string(r));
  }
  // Per-copy hashes (format 1 manifests written since resume verification; older ones
  // have none and their blobs are checked against the shard's own attribute only).
  if (bj.contains("xxh3")) {
    const json* hashes = nullptr;
    FT_RETURN_IF_ERROR(GetArray(bj, "xxh3", &hashes, origin));
    if (hashes->size() != b.ranks.size()) {
      return Bad(origin, "blob " + b.name + ": field 'xxh3' has " + std::to_string(hashes->size()) +
                             " hashes for " + std::to_string(b.ranks.size()) + " ranks");
    }
    for (const auto& h : *hashes) {
      uint64_t v = 0;
      if (!h.is_string() || !ParseHex64(h.get<std::string>(), &v)) {
        return Bad(origin, "blob " + b.name + ": field 'xxh3' holds a non-hash");
      }
      b.xxh3.push_back(v);
    }
  }
  return b;
}

StatusOr<Manifest> ManifestFromJson(const json& j, const std::string& origin) {
  FT_RETURN_IF_ERROR(CheckFormat(j, "ftrain-checkpoint", "an ftrain checkpoint manifest", origin));
  int version = 0;
  FT_RETURN_IF_ERROR(Get(j, "format_version", &version, origin));
  if (version != kFormatVersion) {
    return Bad(origin, "format version " + std::to_string(version) + "; this ftrain reads " +
                           std::to_string(kFormatVersion));
  }
  Manifest m;
  FT_RETURN_IF_ERROR(Get(j, "step", &m.meta.step, origin));
  FT_RETURN_IF_ERROR(Get(j, "world_size", &m.meta.world_size, origin));
  FT_RETURN_IF_ERROR(Get(j, "created_unix", &m.created_unix, origin));
  FT_RETURN_IF_ERROR(Get(j, "config_hash", &m.meta.config_hash, origin));
  FT_RETURN_IF_ERROR(Get(j, "code_version", &m.meta.code_version, origin));
  FT_RETURN_IF_ERROR(Get(j, "data_version", &m.meta.data_version, origin));
  FT_RETURN_IF_ERROR(Get(j, "raw_bytes", &m.raw_bytes, origin));
  FT_RETURN_IF_ERROR(Get(j, "stored_bytes", &m.stored_bytes, origin));
  FT_RETURN_IF_ERROR(GetOr(j, "generation", std::string(), &m.meta.generation, origin));
  m.meta.layout_json = j.contains("layout") && j["layout"].is_object() ? j["layout"].dump() : "{}";
  if (m.meta.step < 0 || m.meta.step > kMaxStep) return Bad(origin, "step out of range");
  const int w = m.meta.world_size;
  if (w < 1 || w > kMaxWorldSize) return Bad(origin, "world_size out of range");

  FT_RETURN_IF_ERROR(FilesFromJson(j, w, origin, &m));
  const json* tensors = nullptr;
  FT_RETURN_IF_ERROR(GetArray(j, "tensors", &tensors, origin));
  for (const auto& tj : *tensors) {
    FT_ASSIGN_OR_RETURN(ManifestTensor t, TensorFromJson(tj, w, origin));
    m.tensors.push_back(std::move(t));
  }
  if (j.contains("blobs")) {
    const json* blobs = nullptr;
    FT_RETURN_IF_ERROR(GetArray(j, "blobs", &blobs, origin));
    for (const auto& bj : *blobs) {
      FT_ASSIGN_OR_RETURN(ManifestBlob b, BlobFromJson(bj, w, origin));
      m.blobs.push_back(std::move(b));
    }
  }
  return m;
}

}  // namespace

const ManifestTensor* Manifest::FindTensor(const std::string& kind, const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.kind == kind && t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace ftrain::ckpt
