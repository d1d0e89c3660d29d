// Memory tier (issue 35), unit level: the memory manifest (format, validation, fenced durable
// writes, crash safety through the fault-injecting Env), the SUBMIT memory-only flag on the
// wire, and the snapshot digest.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "ckpt/filename.h"
#include "ckpt/memory_manifest.h"
#include "core/env.h"
#include "test_util.h"

namespace ftrain::ckpt {
namespace {

MemoryManifest Make(int64_t step, const std::string& gen, int world = 3) {
  MemoryManifest m;
  m.step = step;
  m.generation = gen;
  m.world_size = world;
  m.config_hash = "00112233aabbccdd";
  for (int r = 0; r < world; ++r) m.digests.push_back(0xfedcba9876543210ull + r);
  return m;
}

class MemoryManifestTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_ = std::make_unique<testing::TempDir>(); }
  std::string root() const { return tmp_->path(); }
  std::unique_ptr<testing::TempDir> tmp_;
};

TEST_F(MemoryManifestTest, RoundTripsAndIsAbsentUntilWritten) {
  auto none = ReadMemoryManifest(Env::Default(), root());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  const MemoryManifest m = Make(42, "000001700000000-0000abcd");
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), m).ok());
  auto back = ReadMemoryManifest(Env::Default(), root());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->step, 42);
  EXPECT_EQ((*back)->generation, m.generation);
  EXPECT_EQ((*back)->config_hash, m.config_hash);
  EXPECT_EQ((*back)->digests, m.digests);  // 64-bit digests survive exactly
  // No temp file is left behind.
  auto names = Env::Default()->ListDir(root());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{kMemoryManifestName});
}

TEST_F(MemoryManifestTest, MalformedFilesAreNamedCorruption) {
  const std::string path = JoinPath(root(), kMemoryManifestName);
  const std::string good = Make(7, "g").ToJson();
  std::vector<std::string> bad = {
      "",
      "[]",
      "{}",
      "not json",
      R"({"format":"other","version":1})",
      R"({"format":"ftrain-memory-tier","version":2,"step":1,"world_size":1,"generation":"g","config_hash":"c","digests":["0000000000000000"]})",
      R"({"format":"ftrain-memory-tier","version":1,"step":-1,"world_size":1,"generation":"g","config_hash":"c","digests":["0000000000000000"]})",
      R"({"format":"ftrain-memory-tier","version":1,"step":1,"world_size":2,"generation":"g","config_hash":"c","digests":["0000000000000000"]})",
      R"({"format":"ftrain-memory-tier","version":1,"step":1,"world_size":1,"generation":"g","config_hash":"c","digests":["xyz"]})",
      R"({"format":"ftrain-memory-tier","version":1,"step":1,"world_size":1,"generation":"g","config_hash":"c","digests":[5]})",
      good.substr(0, good.size() / 2)};
  for (const auto& text : bad) {
    ASSERT_TRUE(WriteFileDurably(Env::Default(), path, text).ok());
    auto r = ReadMemoryManifest(Env::Default(), root());
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(r.status().IsCorruption()) << text;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  }
  // An unreadable record fences nothing: the next write replaces it.
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), Make(8, "g")).ok());
  EXPECT_EQ((*ReadMemoryManifest(Env::Default(), root()))->step, 8);
}

TEST_F(MemoryManifestTest, GenerationFencing) {
  const std::string old_gen = "000001700000000-00000001";
  const std::string new_gen = "000001700000500-00000002";
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), Make(10, old_gen)).ok());
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), Make(15, old_gen)).ok());
  // The same generation never goes back.
  Status back = WriteMemoryManifest(Env::Default(), root(), Make(12, old_gen));
  EXPECT_EQ(back.code(), Status::Code::kFailedPrecondition) << back.ToString();
  // A newer start may record an older step (it resumed from the disk and redoes steps).
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), Make(11, new_gen)).ok());
  // A stale writer of the older start is refused, whatever its step.
  Status stale = WriteMemoryManifest(Env::Default(), root(), Make(99, old_gen));
  EXPECT_EQ(stale.code(), Status::Code::kFailedPrecondition) << stale.ToString();
  EXPECT_NE(stale.message().find("stale"), std::string::npos) << stale.message();
  auto now = ReadMemoryManifest(Env::Default(), root());
  EXPECT_EQ((*now)->step, 11);
  EXPECT_EQ((*now)->generation, new_gen);
  // One digest per rank, or nothing is written.
  MemoryManifest m = Make(20, new_gen);
  m.digests.pop_back();
  EXPECT_EQ(WriteMemoryManifest(Env::Default(), root(), m).code(), Status::Code::kInvalidArgument);
}

// A write that fails at any point (file create, append, sync, rename, directory sync) leaves
// the previous record whole: readers see the old step or the new one, never a torn file.
TEST_F(MemoryManifestTest, AFailedWriteAtAnyPointLeavesThePreviousRecord) {
  int64_t prev = 5;
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), Make(prev, "g")).ok());
  bool succeeded = false;
  for (int n = 1; n <= 10 && !succeeded; ++n) {
    FaultInjectionEnv env(Env::Default());
    env.FailAt(n, EIO);
    Status s = WriteMemoryManifest(&env, root(), Make(prev + 1, "g"));
    auto r = ReadMemoryManifest(Env::Default(), root());
    ASSERT_TRUE(r.ok()) << n << ": " << r.status().ToString();
    ASSERT_TRUE(r->has_value());
    succeeded = s.ok();
    if (succeeded) {
      EXPECT_EQ((*r)->step, prev + 1);
    } else {
      // Old or new (a failed directory sync after the rename), never torn.
      EXPECT_TRUE((*r)->step == prev || (*r)->step == prev + 1) << "failure at op " << n;
    }
    prev = (*r)->step;
  }
  EXPECT_TRUE(succeeded) << "no write succeeded within 10 operations";
}

// Issue 44, hole 7: after exit 77 a record newer than the last passed replica check is
// dropped (the restart goes to a checked state); one at or before it stays; a failed removal
// is an IOError naming the file and leaves the record for the resume to see.
TEST_F(MemoryManifestTest, SdcDropsARecordNewerThanTheLastPassedCheckOnly) {
  auto none = DropMemoryManifestNewerThan(Env::Default(), root(), 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, -1) << "no record: nothing to drop";
  ASSERT_TRUE(WriteMemoryManifest(Env::Default(), root(), Make(12, "g")).ok());
  auto kept = DropMemoryManifestNewerThan(Env::Default(), root(), 12);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, -1) << "step 12 was checked: it stays restorable";
  ASSERT_TRUE((*ReadMemoryManifest(Env::Default(), root())).has_value());

  FaultInjectionEnv failing(Env::Default());
  failing.FailAt(1, EIO);
  auto bad = DropMemoryManifestNewerThan(&failing, root(), 9);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kIOError);
  EXPECT_NE(bad.status().message().find(kMemoryManifestName), std::string::npos)
      << bad.status().message();

  auto dropped = DropMemoryManifestNewerThan(Env::Default(), root(), 9);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, 12);
  auto after = ReadMemoryManifest(Env::Default(), root());
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value()) << "the unchecked step is no longer restorable";
}

TEST(MemoryTierWire, SubmitCarriesTheMemoryOnlyFlagAndOldEncodingsStayDiskSnapshots) {
  proto::Submit m;
  m.step = 12;
  m.slot = 1;
  m.meta.world_size = 2;
  m.meta.config_hash = "h";
  m.meta.generation = "g";
  proto::PieceDesc p;
  p.is_blob = true;
  p.kind = "train";
  p.name = "state";
  p.policy = "per_rank";
  p.length = 8;
  m.pieces.push_back(p);
  auto disk = proto::DecodeSubmit(proto::EncodeSubmit(m), 64);
  ASSERT_TRUE(disk.ok()) << disk.status().ToString();
  EXPECT_FALSE(disk->memory_only);
  m.memory_only = true;
  const std::string wire = proto::EncodeSubmit(m);
  auto mem = proto::DecodeSubmit(wire, 64);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_TRUE(mem->memory_only);
  EXPECT_EQ(mem->meta.generation, "g");
  // A flag other than 0/1 and trailing bytes after it are refused.
  std::string bad = wire;
  bad.back() = 2;
  EXPECT_FALSE(proto::DecodeSubmit(bad, 64).ok());
  EXPECT_FALSE(proto::DecodeSubmit(wire + "x", 64).ok());
}

TEST(MemoryTierWire, DigestCoversEveryPieceInOrder) {
  std::vector<uint8_t> slot(64);
  for (size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<uint8_t>(i * 7);
  proto::Submit m;
  for (int i = 0; i < 2; ++i) {
    proto::PieceDesc p;
    p.is_blob = true;
    p.kind = "g";
    p.name = "b" + std::to_string(i);
    p.length = 16;
    p.slot_offset = 16 * static_cast<uint64_t>(i);
    m.pieces.push_back(p);
  }
  const auto h = proto::PieceHashes(m, slot.data());
  ASSERT_EQ(h.size(), 2u);
  const uint64_t d = proto::SnapshotDigest(h);
  EXPECT_NE(h[0], h[1]);
  EXPECT_NE(d, proto::SnapshotDigest({h[1], h[0]}));  // order matters
  slot[20] ^= 1;                                      // one bit of the second piece
  EXPECT_NE(proto::SnapshotDigest(proto::PieceHashes(m, slot.data())), d);
}

}  // namespace
}  // namespace ftrain::ckpt
