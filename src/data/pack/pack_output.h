// The packer's output side: preparing the output directory (refusing to replace a dataset
// without --force, clearing leftovers of an earlier pack) and cutting the token stream into
// rows and rows into shard files. Single-threaded: the packer's writer thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/format/index.h"

namespace ftrain::data {

// Creates dir, or clears an earlier pack from it (index.json first: without it the old shards
// are never read, so a crash half-way leaves nothing that looks complete).
Status PrepareOutDir(Env* env, const std::string& dir, bool force);

// Where the packer's writer thread puts the token stream, in order.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual Status Add(const std::vector<uint32_t>& tokens) = 0;
};

// Rows of shape.seq_len + 1 tokens from a token stream (row k = tokens [k*L, k*L+L]), written
// as shards of shape.rows_per_shard rows.
class ShardCutter : public TokenSink {
 public:
  ShardCutter(Env* env, const std::string& dir, const DatasetIndex& shape);
  Status Add(const std::vector<uint32_t>& tokens) override;
  Status Finish();  // writes the last, shorter shard
  std::vector<ShardEntry>& shards() { return shards_; }

 private:
  Status Flush();

  Env* env_;
  std::string dir_;
  DatasetIndex x_;
  std::vector<uint32_t> pending_;
  size_t head_ = 0;
  std::vector<uint8_t> buf_;
  uint64_t rows_in_shard_ = 0;
  std::vector<ShardEntry> shards_;
};

}  // namespace ftrain::data
