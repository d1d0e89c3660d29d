// The manifest (manifest.json) of a complete checkpoint, and the per-rank receipts
// (shard-NNNNN.json) that writers leave in the partial directory for the committer. Parsing
// validates everything a reader will trust: format, step, world size, safe file names, and
// that every tensor's pieces cover it exactly once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/shard_file.h"
#include "core/status.h"

namespace ftrain::ckpt {

// What the caller knows about the checkpoint as a whole.
struct CheckpointMeta {
  int64_t step = 0;
  int world_size = 1;
  std::string config_hash;
  std::string code_version;
  std::string data_version;
  std::string layout_json = "{}";  // free-form JSON object: sharding, dp/tp sizes, nodes
  std::string generation;          // the job start that wrote it (diagnostics; may be empty)
};

struct TensorPiece {
  int rank = 0;
  int64_t offset = 0;
  int64_t length = 0;
  uint64_t xxh3 = 0;
};

struct ManifestTensor {
  std::string kind;
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<TensorPiece> pieces;  // sorted by offset, covering [0, numel) exactly
  int64_t numel() const;
};

struct ManifestBlob {
  std::string group;
  std::string name;
  std::string policy;
  std::vector<int> ranks;      // ranks holding a copy
  std::vector<uint64_t> xxh3;  // XXH3 of each copy, parallel to `ranks` (empty: not recorded)
  // The recorded hash of `rank`'s copy, or false when the manifest has none.
  bool HashOf(int rank, uint64_t* out) const;
};

struct ManifestFile {
  std::string path;  // relative to the checkpoint directory
  int rank = 0;
  uint64_t size = 0;
  uint64_t xxh3 = 0;
};

struct Manifest {
  CheckpointMeta meta;
  double created_unix = 0;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  std::vector<ManifestTensor> tensors;
  std::vector<ManifestBlob> blobs;
  std::vector<ManifestFile> files;

  std::string ToJson() const;
  // `origin` names the file in error messages.
  static StatusOr<Manifest> FromJson(const std::string& text, const std::string& origin);
  const ManifestTensor* FindTensor(const std::string& kind, const std::string& name) const;
};

// Left by each writer next to its shard once the shard is durable.
struct Receipt {
  CheckpointMeta meta;  // so any committer (or recovery) can build the manifest
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
  std::string file;
  uint64_t size = 0;
  uint64_t xxh3 = 0;  // of the whole file
  ShardFileInfo info;
  std::string writer;      // host:pid of the writer (diagnostics)
  std::string generation;  // the job start of the writer (see CheckpointMeta::generation)

  std::string ToJson() const;
  static StatusOr<Receipt> FromJson(const std::string& text, const std::string& origin);
};

// Merges the receipts of ranks 0..W-1 into a manifest; errors if they disagree.
StatusOr<Manifest> BuildManifest(const CheckpointMeta& meta, const std::vector<Receipt>& receipts);

}  // namespace ftrain::ckpt
