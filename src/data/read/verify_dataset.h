// Full verification of a packed dataset: every shard's header, chunk table, chunk checksums,
// size and whole-file checksum against index.json, and the tokenizer's hash. Reads every byte
// once, sequentially, in large ranges. Used by `ftrain data verify`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/read/dataset.h"

namespace ftrain::data {

struct VerifyReport {
  uint64_t shards_checked = 0;
  uint64_t bytes_checked = 0;
  std::vector<std::string> problems;  // one line per bad shard / tokenizer
  bool ok() const { return problems.empty(); }
};

// `tokenizer_path`: when non-empty, a local tokenizer model that must match the index too.
// `on_shard` (optional) is told about each shard as it is checked (progress output).
// Returns a non-OK Status only when verification could not run (e.g. the source is gone);
// bad data is reported in report->problems.
Status VerifyDataset(Dataset* dataset, const std::string& tokenizer_path, VerifyReport* report,
                     Env* env,
                     const std::function<void(const std::string& shard, bool ok)>& on_shard = {});

}  // namespace ftrain::data
