// Unit tests of the token reader on synthetic datasets (no tokenizer, no processes): the
// order is a permutation and a pure function of (seed, epoch); R ranks see every sample of an
// epoch exactly once; batches do not depend on prefetch depth or I/O threads; a cursor resumes
// exactly; a changed world size loses and repeats nothing; damaged data is named precisely.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "data/format/format.h"
#include "data/format/synthetic.h"
#include "data/read/cursor.h"
#include "data/read/order.h"
#include "data/read/reader.h"
#include "data/read/verify_dataset.h"
#include "data_test_util.h"
#include "test_util.h"

namespace ftrain::data {
namespace {

using ::ftrain::testing::Contains;
using ::ftrain::testing::TempDir;
using testing::Stream;
using testing::Take;

// 1000 rows in 4 shards (256, 256, 256, 232), chunks of 16 rows (the last one 8 rows).
SyntheticSpec Spec() { return SyntheticSpec(); }

class ReaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir;
    auto x = WriteSyntheticDataset(tmp_->path() + "/ds", Spec(), Env::Default());
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    index_ = new DatasetIndex(*x);
  }
  static void TearDownTestSuite() {
    delete index_;
    delete tmp_;
  }

  static ReaderOptions Opts(int rank, int size, int mb) {
    ReaderOptions o;
    o.env = Env::Default();
    o.source = tmp_->path() + "/ds";
    o.seed = 7;
    o.dp_rank = rank;
    o.dp_size = size;
    o.micro_batch = mb;
    o.window_chunks = 4;
    o.prefetch_depth = 3;
    o.io_threads = 2;
    return o;
  }
  static std::unique_ptr<TokenReader> Open(const ReaderOptions& o,
                                           const std::string* cursor = nullptr) {
    auto r = TokenReader::Open(o, cursor);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }

  static TempDir* tmp_;
  static DatasetIndex* index_;
};
TempDir* ReaderTest::tmp_ = nullptr;
DatasetIndex* ReaderTest::index_ = nullptr;

TEST(EpochOrder, IsAPermutationForManyShapes) {
  for (uint64_t n : {1, 7, 16, 17, 1000}) {
    for (uint32_t c : {1u, 3u, 16u}) {
      for (uint32_t w : {1u, 4u, 1000u}) {
        OrderShape shape{n, c, w};
        EpochOrder order(shape, 42, 3);
        std::vector<int> seen(n, 0);
        for (uint64_t p = 0; p < n; ++p) {
          uint64_t s = order.SampleAt(p);
          ASSERT_LT(s, n);
          ++seen[s];
        }
        for (uint64_t s = 0; s < n; ++s) ASSERT_EQ(seen[s], 1) << n << " " << c << " " << w;
      }
    }
  }
}

TEST(EpochOrder, IsAPureFunctionOfSeedAndEpoch) {
  OrderShape shape{1000, 16, 4};
  auto all = [&](uint64_t seed, uint64_t epoch) {
    EpochOrder o(shape, seed, epoch);
    std::vector<uint64_t> v;
    for (uint64_t p = 0; p < shape.num_rows; ++p) v.push_back(o.SampleAt(p));
    return v;
  };
  EXPECT_EQ(all(1, 0), all(1, 0));
  EXPECT_NE(all(1, 0), all(2, 0));
  EXPECT_NE(all(1, 0), all(1, 1));
  // Consecutive positions come from several chunks: rows are shuffled inside a window.
  EpochOrder o(shape, 1, 0);
  std::set<uint64_t> chunks;
  for (uint64_t p = 0; p < 16; ++p) chunks.insert(o.SampleAt(p) / 16);
  EXPECT_GE(chunks.size(), 3u);
}

class CoverageTest : public ReaderTest, public ::testing::WithParamInterface<int> {};

TEST_P(CoverageTest, EverySampleOfAnEpochExactlyOnceAcrossRanks) {
  const int world = GetParam(), mb = 3;
  const uint64_t n = index_->num_rows, step = uint64_t(mb) * world;
  const int steps = int((n + step - 1) / step) + 1;  // into the next epoch
  std::vector<int> seen(n, 0);
  for (int r = 0; r < world; ++r) {
    auto reader = Open(Opts(r, world, mb));
    ASSERT_TRUE(reader);
    for (int s = 0; s < steps; ++s) {
      auto b = reader->Next();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ASSERT_TRUE(testing::RowsMatchSynthetic(*b, Spec().vocab));
      EXPECT_EQ(b->position, uint64_t(s) * step);
      for (int j = 0; j < mb; ++j) {
        uint64_t pos = uint64_t(s) * step + uint64_t(r) * mb + uint64_t(j);
        EXPECT_EQ(b->epochs[j], pos / n);
        if (b->epochs[j] == 0) ++seen[b->samples[j]];
      }
    }
  }
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i << " R=" << world;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CoverageTest, ::testing::Values(1, 2, 3, 4));

TEST_F(ReaderTest, BatchesDoNotDependOnPrefetchDepthOrThreads) {
  Stream want;
  bool first = true;
  for (int depth : {0, 1, 8}) {
    for (int threads : {1, 4}) {
      ReaderOptions o = Opts(1, 2, 5);
      o.prefetch_depth = depth;
      o.io_threads = threads;
      auto r = Open(o);
      ASSERT_TRUE(r);
      Stream got = Take(r.get(), 250);  // 2.5 epochs
      if (first) want = got;
      first = false;
      EXPECT_EQ(got.rows, want.rows) << "depth " << depth << " threads " << threads;
      EXPECT_EQ(got.batch_sums, want.batch_sums);
    }
  }
}

TEST_F(ReaderTest, CursorResumesExactlyAfterManyK) {
  const ReaderOptions o = Opts(1, 2, 5);
  auto ref_reader = Open(o);
  Stream ref = Take(ref_reader.get(), 230);
  for (int k : {0, 1, 2, 3, 5, 8, 13, 21, 34, 50, 99, 100, 101, 150, 199, 200, 201}) {
    auto a = Open(o);
    Take(a.get(), k);
    const std::string blob = a->SaveCursor();
    a.reset();
    auto b = Open(o, &blob);
    ASSERT_TRUE(b) << blob;
    Stream next = Take(b.get(), 20);
    ASSERT_EQ(next.batch_sums,
              std::vector<uint64_t>(ref.batch_sums.begin() + k, ref.batch_sums.begin() + k + 20))
        << "k=" << k;
  }
}

// Phase 1 with `before` ranks for k steps, then phase 2 with `after` ranks from the cursor of
// an arbitrary rank; every sample of epoch 0 must be seen exactly once.
void CheckRemap(const ReaderOptions& base, int before, int after, int mb_before, int mb_after,
                int k, uint64_t n) {
  std::vector<int> seen(n, 0);
  std::string blob;
  for (int r = 0; r < before; ++r) {
    ReaderOptions o = base;
    o.dp_rank = r;
    o.dp_size = before;
    o.micro_batch = mb_before;
    auto reader = TokenReader::Open(o, nullptr);
    ASSERT_TRUE(reader.ok());
    Stream s = Take(reader->get(), k);
    for (auto [e, i] : s.rows) {
      if (e == 0) ++seen[i];
    }
    if (r == before - 1) blob = (*reader)->SaveCursor();
  }
  const uint64_t step = uint64_t(mb_after) * after;
  const uint64_t left = n - std::min<uint64_t>(n, uint64_t(k) * mb_before * before);
  const int steps = int((left + step - 1) / step);
  for (int r = 0; r < after; ++r) {
    ReaderOptions o = base;
    o.dp_rank = r;
    o.dp_size = after;
    o.micro_batch = mb_after;
    auto reader = TokenReader::Open(o, &blob);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    Stream s = Take(reader->get(), steps);
    for (auto [e, i] : s.rows) {
      if (e == 0) ++seen[i];
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(seen[i], 1) << "sample " << i << ": R " << before << " -> " << after << ", k " << k;
  }
}

TEST_F(ReaderTest, RemapFourToTwoLosesAndRepeatsNothing) {
  for (int k : {1, 7, 40, 83}) CheckRemap(Opts(0, 1, 3), 4, 2, 3, 3, k, index_->num_rows);
}

TEST_F(ReaderTest, RemapOtherWorldSizesAndMicroBatches) {
  CheckRemap(Opts(0, 1, 3), 2, 4, 3, 3, 11, index_->num_rows);
  CheckRemap(Opts(0, 1, 3), 3, 1, 3, 3, 50, index_->num_rows);
  CheckRemap(Opts(0, 1, 3), 4, 3, 2, 5, 30, index_->num_rows);
}

TEST_F(ReaderTest, CursorBlobIsValidated) {
  auto r = Open(Opts(0, 1, 4));
  Take(r.get(), 3);
  const std::string blob = r->SaveCursor();
  EXPECT_LT(blob.size(), 300u);
  auto c = Cursor::Decode(blob);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->position, 12u);
  EXPECT_EQ(c->Encode(), blob);

  for (const std::string& bad : {std::string(), std::string("garbage"),
                                 blob.substr(0, blob.size() / 2), std::string(2000, 'x')}) {
    auto d = Cursor::Decode(bad);
    EXPECT_TRUE(d.status().IsCorruption()) << bad;
    EXPECT_TRUE(Contains(d.status().message(), "data cursor is invalid")) << d.status().message();
  }
  std::string flipped = blob;
  flipped[blob.find("pos=") + 4] = '9';
  EXPECT_TRUE(Contains(Cursor::Decode(flipped).status().message(), "checksum mismatch"));

  // Another dataset, seed, or window: refused with the reason.
  ReaderOptions o = Opts(0, 1, 4);
  o.seed = 8;
  auto s = TokenReader::Open(o, &blob);
  EXPECT_TRUE(s.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(s.status().message(), "seed")) << s.status().message();
  o = Opts(0, 1, 4);
  o.window_chunks = 5;
  EXPECT_TRUE(Contains(TokenReader::Open(o, &blob).status().message(), "window_chunks"));
  TempDir other;
  SyntheticSpec spec = Spec();
  spec.num_rows = 999;
  ASSERT_TRUE(WriteSyntheticDataset(other.path() + "/ds", spec, Env::Default()).ok());
  o = Opts(0, 1, 4);
  o.source = other.path() + "/ds";
  auto v = TokenReader::Open(o, &blob);
  EXPECT_EQ(v.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_TRUE(Contains(v.status().message(), "data version")) << v.status().message();
}

TEST_F(ReaderTest, BadOptionsNameTheField) {
  ReaderOptions o = Opts(2, 2, 1);
  EXPECT_TRUE(Contains(TokenReader::Open(o, nullptr).status().message(), "dp_rank"));
  o = Opts(0, 1, 0);
  EXPECT_TRUE(Contains(TokenReader::Open(o, nullptr).status().message(), "micro_batch"));
  o = Opts(0, 1, 1);
  o.source = tmp_->path() + "/missing";
  EXPECT_TRUE(TokenReader::Open(o, nullptr).status().IsNotFound());
  o = Opts(0, 1, 1);
  o.expected_data_version = "0000000000000000";
  EXPECT_EQ(TokenReader::Open(o, nullptr).status().code(), Status::Code::kFailedPrecondition);
}

// Copies the dataset so a test can damage it.
std::string CopyDataset(const std::string& from, const TempDir& to) {
  std::string dst = to.path() + "/ds";
  std::string cmd = "cp -r '" + from + "' '" + dst + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dst;
}

TEST_F(ReaderTest, CorruptChunkIsNamedByShardChunkAndOffset) {
  TempDir t;
  std::string dir = CopyDataset(tmp_->path() + "/ds", t);
  const std::string shard = dir + "/shard-000001.bin";
  std::string bytes = testing::ReadFileOrDie(shard);
  bytes[kPayloadAlign + 5 * 16 * 32 + 3] ^= 0x01;  // chunk 5 (16 rows of 32 bytes)
  testing::WriteFileOrDie(shard, bytes);
  ReaderOptions o = Opts(0, 1, 50);
  o.source = dir;
  auto r = Open(o);
  Status s;
  for (int i = 0; i < 30 && s.ok(); ++i) s = r->Next().status();
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-000001.bin: chunk 5 (bytes 6656..7167)")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "checksum mismatch")) << s.message();
  // The error is sticky.
  EXPECT_TRUE(r->Next().status().IsCorruption());

  VerifyReport report;
  auto ds = Dataset::Open(dir, Env::Default());
  ASSERT_TRUE(ds.ok());
  ASSERT_TRUE(VerifyDataset(ds->get(), "", &report, Env::Default()).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_TRUE(Contains(report.problems[0], "shard-000001.bin: chunk 5")) << report.problems[0];
}

TEST_F(ReaderTest, TruncatedShardIsNamedWithTheOffset) {
  TempDir t;
  std::string dir = CopyDataset(tmp_->path() + "/ds", t);
  const std::string shard = dir + "/shard-000002.bin";
  ASSERT_EQ(::truncate(shard.c_str(), kPayloadAlign + 100 * 32), 0);
  ReaderOptions o = Opts(0, 1, 50);
  o.source = dir;
  auto r = Open(o);
  Status s;
  for (int i = 0; i < 30 && s.ok(); ++i) s = r->Next().status();
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "shard-000002.bin: the file is 7296 bytes long"))
      << s.message();

  VerifyReport report;
  auto ds = Dataset::Open(dir, Env::Default());
  ASSERT_TRUE(VerifyDataset(ds->get(), "", &report, Env::Default()).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_TRUE(Contains(report.problems[0], "shard-000002.bin")) << report.problems[0];
}

std::string FlipFirstShardChecksum(std::string s) {
  size_t at = s.find("\"xxh3\": \"") + 10;  // shards come first in sorted keys
  s[at] = s[at] == '0' ? '1' : '0';
  return s;
}

TEST_F(ReaderTest, IndexIsValidated) {
  const std::string good = testing::ReadFileOrDie(tmp_->path() + "/ds/index.json");
  ASSERT_TRUE(DatasetIndex::Parse(good, "x").ok());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string text, message;
  } cases[] = {
      {"{", "not a JSON object"},
      {replace("\"shard-000001.bin\"", "\"../shard-000001.bin\""), "not a plain file name"},
      {replace("\"shard-000001.bin\"", "\"shard-000007.bin\""), "should be 'shard-000001.bin'"},
      {replace("\"num_rows\": 1000", "\"num_rows\": 1001"), "differs from the sum over shards"},
      {FlipFirstShardChecksum(good), "does not match the content"},
      {replace("\"dtype\": \"uint16\"", "\"dtype\": \"int8\""), "dtype 'int8'"},
      {replace("\"seq_len\"", "\"seq_len_x\""), "field 'seq_len' is missing"},
  };
  for (const auto& c : cases) {
    auto x = DatasetIndex::Parse(c.text, "DIR/index.json");
    ASSERT_TRUE(x.status().IsCorruption()) << c.message;
    EXPECT_TRUE(Contains(x.status().message(), "DIR/index.json")) << x.status().message();
    EXPECT_TRUE(Contains(x.status().message(), c.message)) << x.status().message();
  }
}

TEST(ShardFormat, HeaderRoundTripsAndRejectsDamage) {
  ShardHeader h;
  h.token_bytes = 4;
  h.seq_len = 2048;
  h.chunk_rows = 255;
  h.num_rows = 1000;
  h.payload_offset = PayloadOffsetFor(h.num_chunks());
  h.table_xxh3 = 0x1234;
  std::string enc = EncodeShardHeader(h);
  ASSERT_EQ(enc.size(), kShardHeaderBytes);
  ShardHeader d;
  ASSERT_TRUE(DecodeShardHeader(enc.data(), enc.size(), "f", &d).ok());
  EXPECT_EQ(d.num_rows, 1000u);
  EXPECT_EQ(d.seq_len, 2048u);
  std::string bad = enc;
  bad[0] = 'X';
  EXPECT_TRUE(Contains(DecodeShardHeader(bad.data(), bad.size(), "f", &d).message(), "bad magic"));
  bad = enc;
  bad[30] ^= 1;
  EXPECT_TRUE(Contains(DecodeShardHeader(bad.data(), bad.size(), "f", &d).message(), "checksum"));
  EXPECT_TRUE(Contains(DecodeShardHeader(enc.data(), 10, "f", &d).message(), "truncated"));
  uint64_t idx = 0;
  EXPECT_TRUE(ParseShardFileName("shard-000042.bin", &idx));
  EXPECT_EQ(idx, 42u);
  EXPECT_EQ(ShardFileName(1234567), "shard-1234567.bin");
  EXPECT_FALSE(ParseShardFileName("shard-42.bin", &idx));
  EXPECT_FALSE(ParseShardFileName("shard-0000042.bin", &idx));
}

TEST(ShardFormat, Uint32TokensRoundTrip) {
  TempDir t;
  SyntheticSpec spec;
  spec.num_rows = 100;
  spec.token_bytes = 4;
  spec.vocab = 100000;
  ASSERT_TRUE(WriteSyntheticDataset(t.path() + "/ds", spec, Env::Default()).ok());
  ReaderOptions o;
  o.env = Env::Default();
  o.source = t.path() + "/ds";
  o.micro_batch = 10;
  auto r = TokenReader::Open(o, nullptr);
  ASSERT_TRUE(r.ok());
  for (int i = 0; i < 10; ++i) {
    auto b = (*r)->Next();
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(testing::RowsMatchSynthetic(*b, spec.vocab));
  }
}

}  // namespace
}  // namespace ftrain::data
