// One rank's checkpoint shard as an HDF5 file: root attributes (magic, format version, step,
// rank, world size), 1-D datasets holding this rank's flat slice of each tensor (grouped by
// kind: model, master, optim/exp_avg, optim/exp_avg_sq) and byte blobs (scheduler, rng,
// data, train). Every dataset carries the XXH3-64 of its uncompressed bytes. Writing
// compresses chunks in parallel threads (byte shuffle + zstd) and stores them with HDF5
// direct chunk writes; HDF5 calls themselves stay on the calling thread (not thread-safe).
// No commit logic here: see store.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "core/hex.h"
#include "core/status.h"

namespace ftrain::ckpt {

constexpr char kMagic[] = "ftrain-checkpoint";
constexpr int kFormatVersion = 1;

// A rank's slice [offset, offset + length) of a flattened tensor; `data` holds `length`
// elements of `dtype` and must stay valid during the write.
struct TensorShardRef {
  std::string kind;  // "model", "master", "optim/exp_avg", "optim/exp_avg_sq"
  std::string name;  // Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight"
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // global shape
  int64_t offset = 0;
  int64_t length = 0;
  const void* data = nullptr;
  // `data` is device (GPU) memory: only a DeviceMemory (ckptd_client.h) copies it to host;
  // the file writer accepts host memory only.
  bool on_device = false;
};

// "replicated": every rank holds the same bytes (any copy serves any world size).
// "per_rank": rank-local state (RNG streams, data cursors): readable across world sizes only
// by callers that know how to remap it; never silently dropped.
struct BlobRef {
  std::string group;  // "scheduler", "rng", "data", "train", "optim"
  std::string name;
  std::string policy = "replicated";
  std::string bytes;
};

struct ShardContents {
  std::vector<TensorShardRef> tensors;
  std::vector<BlobRef> blobs;
};

struct WriteOptions {
  int zstd_level = 1;   // 0: no compression (contiguous datasets)
  bool shuffle = true;  // HDF5 byte shuffle before zstd
  int threads = 0;      // compression threads; 0 = hardware concurrency
  size_t chunk_bytes = 4u << 20;
  // Pace the write to at most this many MB/s of state (0 = as fast as possible). ckptd uses
  // it to spread a persist over the checkpoint interval and so disturb training less.
  double max_mb_per_s = 0;
};

// What one dataset in a shard file holds (recorded in receipts and the manifest).
struct DatasetRecord {
  bool is_blob = false;
  std::string kind;  // tensor kind or blob group
  std::string name;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;  // tensors: global shape
  int64_t offset = 0;
  int64_t length = 0;  // elements (bytes for blobs)
  std::string policy;  // blobs
  uint64_t xxh3 = 0;
  uint64_t stored_bytes = 0;  // on disk after compression
  std::string H5Path() const { return "/" + kind + "/" + name; }
};

struct ShardFileInfo {
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
  std::vector<DatasetRecord> datasets;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
};

// Writes `path` (which must not be a committed name: callers pass *.tmp). Not fsynced here.
StatusOr<ShardFileInfo> WriteShardFile(const std::string& path, int64_t step, int rank,
                                       int world_size, const ShardContents& contents,
                                       const WriteOptions& options);

class ShardFileReader {
 public:
  // Opens and checks magic and format version; errors name the file.
  static StatusOr<std::unique_ptr<ShardFileReader>> Open(const std::string& path);
  ~ShardFileReader();

  int64_t step() const { return step_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& path() const { return path_; }
  // Every dataset in the file with its attributes (hash, dtype, slice).
  StatusOr<std::vector<DatasetRecord>> ListDatasets();

  // Reads the whole dataset with parallel decompression; checks its XXH3 against the file's
  // own attribute when verify is set.
  Status ReadAll(const std::string& h5path, std::vector<uint8_t>* out, bool verify, int threads);
  // Reads the whole dataset into dst, which holds exactly `elems` elements of `dtype`: the
  // stored element type and count are checked before anything is copied (another type or
  // size is Corruption, never an overflow). *xxh3 (when not null) receives the hash of the
  // bytes read, for the caller to compare with the manifest (resume verifies as it loads).
  Status ReadAllInto(const std::string& h5path, DType dtype, int64_t elems, void* dst, int threads,
                     uint64_t* xxh3);

 private:
  ShardFileReader() = default;
  std::string path_;
  int64_t file_id_ = -1;
  uint64_t file_size_ = 0;
  int64_t step_ = 0;
  int rank_ = 0;
  int world_size_ = 0;
};

uint64_t Xxh3(const void* data, size_t n);
// Size and XXH3-64 of a whole file, streamed in 256 KiB reads (a shard can be many GB).
// Errors name the path and the OS error.
Status HashFile(const std::string& path, uint64_t* size, uint64_t* hash);

}  // namespace ftrain::ckpt
