// Data test helpers.
#include "data_test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "data/format/hash.h"
#include "data/format/synthetic.h"

namespace ftrain::data::testing {

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFileOrDie(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  EXPECT_TRUE(out.flush().good()) << "cannot write " << path;
}

std::map<std::string, std::string> DirContents(const std::string& dir) {
  std::map<std::string, std::string> out;
  auto r = ::ftrain::testing::RunCommand("ls -1 " + Q(dir), 10);
  std::istringstream names(r.output);
  std::string name;
  while (std::getline(names, name)) out[name] = ReadFileOrDie(dir + "/" + name);
  return out;
}

std::string Q(const std::string& s) { return "'" + s + "'"; }

::ftrain::testing::CommandResult Ft(const std::string& args, int timeout_s) {
  return ::ftrain::testing::RunCommand(::ftrain::testing::Ftrain() + " " + args, timeout_s);
}

Stream Take(TokenReader* reader, int steps) {
  Stream s;
  for (int i = 0; i < steps; ++i) {
    auto b = reader->Next();
    if (!b.ok()) {
      ADD_FAILURE() << "Next() failed at step " << i << ": " << b.status().ToString();
      return s;
    }
    for (int j = 0; j < b->rows; ++j) s.rows.push_back({b->epochs[j], b->samples[j]});
    s.batch_sums.push_back(Hash64(b->tokens.data(), b->tokens.size() * sizeof(int32_t)));
  }
  return s;
}

bool RowsMatchSynthetic(const Batch& b, uint32_t vocab) {
  for (int j = 0; j < b.rows; ++j) {
    for (int t = 0; t < b.row_tokens; ++t) {
      uint32_t want = SyntheticToken(b.samples[j], uint64_t(t), vocab);
      if (uint32_t(b.tokens[size_t(j) * b.row_tokens + t]) != want) return false;
    }
  }
  return true;
}

}  // namespace ftrain::data::testing
