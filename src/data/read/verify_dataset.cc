// VerifyDataset: sequential full read of each shard, every checksum compared.
#include "data/read/verify_dataset.h"

#include "core/env.h"
#include "data/format/hash.h"

namespace ftrain::data {
namespace {

constexpr uint64_t kReadBytes = 8 << 20;

// Checks one shard; returns the problem ("" = fine) or a Status when it could not be read
// for reasons that are not the shard's fault.
Status CheckShard(Dataset* ds, uint32_t s, std::string* problem, uint64_t* bytes) {
  const DatasetIndex& x = ds->index();
  const ShardEntry& e = x.shards[s];
  const std::string where = ds->source()->Where(e.name);
  ShardHeader h;
  std::vector<uint64_t> table;
  Status st = ds->LoadShard(s, &h, &table);
  if (!st.ok()) {
    if (st.IsCorruption() || st.IsNotFound()) {
      *problem = st.message();
      return Status::Ok();
    }
    return st;
  }
  Hash64Stream whole;
  std::vector<uint8_t> buf(h.payload_offset);
  st = ds->source()->ReadRange(e.name, 0, h.payload_offset, buf.data());
  if (!st.ok()) return st;
  whole.Update(buf.data(), buf.size());
  const uint64_t row_bytes = h.row_bytes();
  const uint64_t chunk_bytes = uint64_t{h.chunk_rows} * row_bytes;
  const uint64_t per_read = std::max<uint64_t>(1, kReadBytes / chunk_bytes);
  const uint64_t chunks = h.num_chunks();
  for (uint64_t c = 0; c < chunks; c += per_read) {
    const uint64_t first_row = c * h.chunk_rows;
    const uint64_t rows = std::min<uint64_t>(per_read * h.chunk_rows, h.num_rows - first_row);
    const uint64_t offset = h.payload_offset + first_row * row_bytes;
    buf.resize(rows * row_bytes);
    st = ds->source()->ReadRange(e.name, offset, buf.size(), buf.data());
    if (!st.ok()) {
      if (st.IsCorruption()) {
        *problem = st.message();
        return Status::Ok();
      }
      return st;
    }
    whole.Update(buf.data(), buf.size());
    for (uint64_t k = c; k < std::min(chunks, c + per_read); ++k) {
      const uint64_t at = (k - c) * chunk_bytes;
      const uint64_t len = std::min<uint64_t>(chunk_bytes, buf.size() - at);
      uint64_t got = Hash64(buf.data() + at, len);
      if (got != table[k]) {
        *problem = where + ": chunk " + std::to_string(k) + " (bytes " +
                   std::to_string(offset + at) + ".." + std::to_string(offset + at + len - 1) +
                   ", rows " + std::to_string(k * h.chunk_rows) +
                   "..) checksum mismatch: " + "computed " + Hex64(got) + ", expected " +
                   Hex64(table[k]);
        return Status::Ok();
      }
    }
    *bytes += buf.size();
  }
  // Nothing may follow the payload.
  uint8_t extra;
  st = ds->source()->ReadRange(e.name, h.file_bytes(), 1, &extra);
  if (st.ok()) {
    *problem = where + ": file is longer than the " + std::to_string(h.file_bytes()) +
               " bytes its header and index.json describe";
    return Status::Ok();
  }
  if (whole.Digest() != e.xxh3) {
    *problem = where + ": whole-file checksum " + Hex64(whole.Digest()) +
               " differs from index.json's " + Hex64(e.xxh3);
  }
  *bytes += h.payload_offset;
  return Status::Ok();
}

}  // namespace

Status VerifyDataset(Dataset* ds, const std::string& tokenizer_path, VerifyReport* report, Env* env,
                     const std::function<void(const std::string&, bool)>& on_shard) {
  const DatasetIndex& x = ds->index();
  // The tokenizer stored with the data.
  const std::string tok_where = ds->source()->Where(x.tokenizer_file);
  StatusOr<std::string> tok = ds->source()->ReadFile(x.tokenizer_file);
  if (!tok.ok()) {
    report->problems.push_back(tok.status().message());
  } else if (Hash64(tok->data(), tok->size()) != x.tokenizer_xxh3) {
    report->problems.push_back(
        tok_where + ": tokenizer hash " + Hex64(Hash64(tok->data(), tok->size())) +
        " does not match index.json's tokenizer hash " + Hex64(x.tokenizer_xxh3));
  }
  if (!tokenizer_path.empty()) {
    std::string bytes;
    Status read = env->ReadFile(tokenizer_path, &bytes);
    if (read.IsNotFound()) return Status::NotFound(tokenizer_path + ": no such file");
    FT_RETURN_IF_ERROR(read);
    const uint64_t h = Hash64(bytes.data(), bytes.size());
    if (h != x.tokenizer_xxh3) {
      report->problems.push_back(tokenizer_path + ": tokenizer hash " + Hex64(h) +
                                 " does not match index.json's tokenizer hash " +
                                 Hex64(x.tokenizer_xxh3) +
                                 " (the data was packed with another tokenizer)");
    }
  }
  for (uint32_t s = 0; s < x.shards.size(); ++s) {
    std::string problem;
    FT_RETURN_IF_ERROR(CheckShard(ds, s, &problem, &report->bytes_checked));
    ++report->shards_checked;
    if (!problem.empty()) report->problems.push_back(problem);
    if (on_shard) on_shard(x.shards[s].name, problem.empty());
  }
  return Status::Ok();
}

}  // namespace ftrain::data
