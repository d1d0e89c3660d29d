// Helpers shared by the data pipeline tests: reading and writing whole files and directories,
// running `ftrain`, reading a whole reader stream, and checking rows of synthetic datasets.
// Temp directories: test_util.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/read/reader.h"
#include "test_util.h"

namespace ftrain::data::testing {

std::string ReadFileOrDie(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& contents);
// Every file of `dir` (its names, not recursive) and its bytes.
std::map<std::string, std::string> DirContents(const std::string& dir);

// `s` in single quotes for a shell command line (s holds no single quote).
std::string Q(const std::string& s);
// `build/bin/ftrain ARGS` (the pack and data commands exec ftrain-data: ~1 s of LibTorch load).
::ftrain::testing::CommandResult Ft(const std::string& args, int timeout_s = 120);

// One reader's batches flattened: per row (epoch, sample), and a hash of all tokens.
struct Stream {
  std::vector<std::pair<uint64_t, uint64_t>> rows;
  std::vector<uint64_t> batch_sums;
};

// Runs `steps` batches; fails the test (ADD_FAILURE) on a reader error.
Stream Take(TokenReader* reader, int steps);
// Whether every row of every batch holds the synthetic tokens of the sample it claims.
bool RowsMatchSynthetic(const Batch& b, uint32_t vocab);

}  // namespace ftrain::data::testing
