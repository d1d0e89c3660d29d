// Checkpoint library tests: format round trip, resharding reads, compression settings,
// corruption of every kind, fault injection (ENOSPC/EIO) at every file-system step of a save,
// commit races, recovery and rotation. Real HDF5 files in a temp directory.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/filename.h"
#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "ckpt/tools.h"
#include "ckpt/verify.h"
#include "ckpt_fixture.h"
#include "dist/comm.h"
#include "model/safetensors.h"

namespace ftrain::testing {
namespace {

using ckpt::CheckpointReader;
using ckpt::CheckpointStore;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ftrain-ckpt-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// File address of a dataset's data: first chunk when chunked, else the contiguous block.
uint64_t DataAddress(const std::string& file, const std::string& dataset, uint64_t* size) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hid_t dcpl = H5Dget_create_plist(d);
  haddr_t addr = 0;
  hsize_t sz = 0;
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hid_t space = H5Dget_space(d);
    hsize_t off[1];
    unsigned mask;
    H5Dget_chunk_info(d, space, 0, off, &mask, &addr, &sz);
    H5Sclose(space);
  } else {
    addr = H5Dget_offset(d);
    sz = H5Dget_storage_size(d);
  }
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
  *size = sz;
  return addr;
}

void ExpectTensorMatchesFixture(CheckpointReader& r, int64_t step) {
  const auto tensors = FixtureTensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(r.ReadTensor("master", tensors[t].name, &bytes).ok());
    ASSERT_EQ(bytes.size(), static_cast<size_t>(tensors[t].numel()) * 4);
    for (int64_t i = 0; i < tensors[t].numel(); ++i) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      ASSERT_EQ(v, FixtureValue(step, t, "master", i)) << tensors[t].name << " element " << i;
    }
  }
}

TEST(CkptFilename, BuildAndParse) {
  EXPECT_EQ(ckpt::StepDirName(120), "step-00000120");
  auto e = ckpt::ParseRootEntry("step-00000120");
  EXPECT_EQ(e.kind, ckpt::EntryKind::kComplete);
  EXPECT_EQ(e.step, 120);
  EXPECT_EQ(ckpt::ParseRootEntry("step-00000120.partial").kind, ckpt::EntryKind::kPartial);
  EXPECT_EQ(ckpt::ParseRootEntry("step-0000012").kind, ckpt::EntryKind::kOther);
  EXPECT_EQ(ckpt::ParseRootEntry("step-00000120x").kind, ckpt::EntryKind::kOther);
  EXPECT_EQ(ckpt::ParseShardFileName("shard-00003.h5"), 3);
  EXPECT_EQ(ckpt::ParseShardFileName("shard-0003.h5"), -1);
  EXPECT_FALSE(ckpt::IsSafeRelativeName("../x"));
  EXPECT_FALSE(ckpt::IsSafeRelativeName("/etc/passwd"));
  EXPECT_FALSE(ckpt::IsSafeRelativeName("a/b"));
  EXPECT_TRUE(ckpt::IsSafeRelativeName("shard-00000.h5"));
}

TEST(Ckpt, RoundTripVerifiesAndReadsBack) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  ASSERT_TRUE(SaveFixture(&store, 10, 2).ok());
  auto latest = store.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 10);
  EXPECT_EQ(ReadAll(tmp.path() + "/LATEST"), "step-00000010\n");
  auto rep = ckpt::VerifyCheckpoint((*latest)->path);
  EXPECT_TRUE(rep.ok()) << rep.problems.front().problem;
  EXPECT_GT(rep.datasets_checked, 20);
  auto reader = CheckpointReader::Open((*latest)->path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ExpectTensorMatchesFixture(**reader, 10);
  auto sched = (*reader)->ReadBlob("scheduler", "state", 0, 2);
  ASSERT_TRUE(sched.ok());
  EXPECT_EQ(*sched, "{\"step\":10,\"lr\":0.001}");
  EXPECT_EQ((*reader)->manifest().meta.config_hash, "cfg-123");
  EXPECT_EQ((*reader)->manifest().meta.data_version, "data-abc");
}

TEST(Ckpt, EveryCompressionSettingRoundTrips) {
  for (int level : {0, 1, 3, 9}) {
    for (bool shuffle : {false, true}) {
      TempDir tmp;
      CheckpointStore store(tmp.path());
      ckpt::WriteOptions o;
      o.zstd_level = level;
      o.shuffle = shuffle;
      o.chunk_bytes = 1000;  // many chunks, a partial edge chunk, odd sizes
      o.threads = 3;
      ASSERT_TRUE(SaveFixture(&store, 1, 3, o).ok());
      auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000001");
      EXPECT_TRUE(rep.ok()) << "level " << level << " shuffle " << shuffle;
      auto reader = CheckpointReader::Open(tmp.path() + "/step-00000001");
      ASSERT_TRUE(reader.ok());
      ExpectTensorMatchesFixture(**reader, 1);
    }
  }
}

TEST(Ckpt, ReshardingReadsAnyWorldSize) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  ASSERT_TRUE(SaveFixture(&store, 5, 3).ok());
  auto reader = CheckpointReader::Open(tmp.path() + "/step-00000005");
  ASSERT_TRUE(reader.ok());
  const auto tensors = FixtureTensors();
  for (int new_world : {1, 2, 4, 5}) {
    for (int r = 0; r < new_world; ++r) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        auto span = dist::ShardOf(tensors[t].numel(), new_world, r);
        std::vector<float> got(static_cast<size_t>(span.length));
        ASSERT_TRUE((*reader)
                        ->ReadTensorRange("optim/exp_avg", tensors[t].name, span.offset,
                                          span.length, got.data())
                        .ok());
        for (int64_t i = 0; i < span.length; ++i) {
          ASSERT_EQ(got[static_cast<size_t>(i)],
                    FixtureValue(5, t, "optim/exp_avg", span.offset + i));
        }
      }
    }
  }
  // Rank-local state cannot silently move to a different world size.
  auto rng = (*reader)->ReadBlob("rng", "torch_cpu", 0, 2);
  ASSERT_FALSE(rng.ok());
  EXPECT_EQ(rng.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(rng.status().message().find("rng/torch_cpu"), std::string::npos);
  auto all = (*reader)->ReadBlobAllRanks("data", "cursor");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[2], "cursor-2/3");
  auto same = (*reader)->ReadBlob("rng", "torch_cpu", 1, 3);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, "rng-of-rank-1-step-5");
  EXPECT_TRUE((*reader)->ReadBlob("scheduler", "state", 3, 4).ok());  // replicated: any world
}

struct CorruptionCase {
  const char* name;
  int level;
};

class CorruptionTest : public ::testing::TestWithParam<CorruptionCase> {};

TEST_P(CorruptionTest, FlippedByteInDataIsCaughtAndNamed) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  ckpt::WriteOptions o;
  o.zstd_level = GetParam().level;
  ASSERT_TRUE(SaveFixture(&store, 1, 2, o).ok());
  const std::string shard = tmp.path() + "/step-00000001/shard-00001.h5";
  const std::string ds = "/master/model.embed_tokens.weight";
  uint64_t size = 0;
  const uint64_t addr = DataAddress(shard, ds, &size);
  ASSERT_GT(size, 16u);
  FlipByte(shard, addr + size / 2);
  auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000001");
  ASSERT_FALSE(rep.ok());
  bool named = false;
  for (const auto& p : rep.problems) {
    if (p.file == shard && p.dataset == ds) named = true;
  }
  EXPECT_TRUE(named) << rep.problems.front().file << " " << rep.problems.front().problem;
}

INSTANTIATE_TEST_SUITE_P(Levels, CorruptionTest,
                         ::testing::Values(CorruptionCase{"uncompressed", 0},
                                           CorruptionCase{"zstd", 3}),
                         [](const auto& info) { return std::string(info.param.name); });

class DamagedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<CheckpointStore>(tmp_.path());
    ASSERT_TRUE(SaveFixture(store_.get(), 1, 2).ok());
    ASSERT_TRUE(SaveFixture(store_.get(), 2, 2).ok());
    dir_ = tmp_.path() + "/step-00000002";
  }
  // After damaging step 2, step 1 must still be complete and be the latest.
  void ExpectFallsBackToStep1() {
    auto list = store_->List();
    ASSERT_TRUE(list.ok());
    EXPECT_EQ((*list)[0].step, 2);
    EXPECT_EQ((*list)[0].status, ckpt::CheckpointStatus::kUnreadable);
    auto latest = store_->Latest();
    ASSERT_TRUE(latest.ok() && latest->has_value());
    EXPECT_EQ((*latest)->step, 1);
    EXPECT_TRUE(ckpt::VerifyCheckpoint((*latest)->path).ok());
  }
  std::string FirstProblem() {
    auto rep = ckpt::VerifyCheckpoint(dir_);
    EXPECT_FALSE(rep.ok());
    return rep.problems.empty() ? ""
                                : rep.problems.front().file + ": " + rep.problems.front().problem;
  }
  TempDir tmp_;
  std::unique_ptr<CheckpointStore> store_;
  std::string dir_;
};

TEST_F(DamagedCheckpointTest, TruncatedShard) {
  const std::string shard = dir_ + "/shard-00000.h5";
  ASSERT_EQ(truncate(shard.c_str(), 3000), 0);
  EXPECT_NE(FirstProblem().find("truncated"), std::string::npos) << FirstProblem();
  ExpectFallsBackToStep1();
}

TEST_F(DamagedCheckpointTest, MissingShard) {
  ASSERT_EQ(unlink((dir_ + "/shard-00001.h5").c_str()), 0);
  EXPECT_NE(FirstProblem().find("missing shard of rank 1"), std::string::npos) << FirstProblem();
  ExpectFallsBackToStep1();
}

TEST_F(DamagedCheckpointTest, ExtraUnknownShard) {
  WriteAll(dir_ + "/shard-00007.h5", ReadAll(dir_ + "/shard-00000.h5"));
  EXPECT_NE(FirstProblem().find("extra shard"), std::string::npos) << FirstProblem();
}

TEST_F(DamagedCheckpointTest, ManifestPathOutsideTheCheckpoint) {
  for (const char* evil : {"../x", "/etc/passwd", "..", "sub/shard-00000.h5"}) {
    auto j = nlohmann::json::parse(ReadAll(dir_ + "/manifest.json"));
    j["files"][0]["path"] = evil;
    WriteAll(dir_ + "/manifest.json", j.dump());
    EXPECT_NE(FirstProblem().find("not a plain name"), std::string::npos) << evil;
    ExpectFallsBackToStep1();
    auto reader = CheckpointReader::Open(dir_);
    EXPECT_FALSE(reader.ok());
  }
}

TEST_F(DamagedCheckpointTest, WrongWorldSizeInManifest) {
  auto j = nlohmann::json::parse(ReadAll(dir_ + "/manifest.json"));
  j["world_size"] = 3;
  WriteAll(dir_ + "/manifest.json", j.dump());
  EXPECT_NE(FirstProblem().find("no shard file listed for rank 2"), std::string::npos)
      << FirstProblem();
  ExpectFallsBackToStep1();
}

TEST_F(DamagedCheckpointTest, ManifestStepDisagreesWithDirectory) {
  auto j = nlohmann::json::parse(ReadAll(dir_ + "/manifest.json"));
  j["step"] = 7;
  WriteAll(dir_ + "/manifest.json", j.dump());
  ExpectFallsBackToStep1();
}

TEST_F(DamagedCheckpointTest, WrongMagicOrVersionInShard) {
  // Rewrite rank 0's shard as a valid HDF5 file that is not an ftrain shard.
  const std::string shard = dir_ + "/shard-00000.h5";
  hid_t f = H5Fcreate(shard.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  auto rep = ckpt::VerifyCheckpoint(dir_);
  ASSERT_FALSE(rep.ok());
  std::string all;
  for (const auto& p : rep.problems) all += p.problem + "\n";
  EXPECT_NE(all.find("magic"), std::string::npos) << all;
}

TEST_F(DamagedCheckpointTest, EmptyAndForeignDirectories) {
  ASSERT_EQ(mkdir((tmp_.path() + "/notes").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((tmp_.path() + "/step-00000009").c_str(), 0755), 0);  // empty, no manifest
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)[0].step, 9);
  EXPECT_EQ((*list)[0].status, ckpt::CheckpointStatus::kUnreadable);
  auto foreign = store_->ListForeign();
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(*foreign, std::vector<std::string>{"notes"});
  auto latest = store_->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 2);
  TempDir empty;
  CheckpointStore none(empty.path());
  auto l2 = none.Latest();
  ASSERT_TRUE(l2.ok());
  EXPECT_FALSE(l2->has_value());
  CheckpointStore missing(empty.path() + "/nope");
  EXPECT_FALSE(missing.List().ok());
}

TEST(CkptCommit, OnlyOneCommitterAndOnlyWhenEveryRankIsThere) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  const auto meta = FixtureMeta(3, 2);
  RankState r0(3, 0, 2), r1(3, 1, 2);
  ASSERT_TRUE(store.WriteShard(meta, 0, r0.contents(), {}).ok());
  auto o = store.TryCommit(meta);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, ckpt::CommitOutcome::kNotReady);
  ASSERT_TRUE(store.WriteShard(meta, 1, r1.contents(), {}).ok());
  o = store.TryCommit(meta);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, ckpt::CommitOutcome::kCommitted);
  o = store.TryCommit(meta);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, ckpt::CommitOutcome::kAlreadyCommitted);
  EXPECT_FALSE(store.WriteShard(meta, 0, r0.contents(), {}).ok()) << "rewrote a committed step";
}

TEST(CkptCommit, RecoveryFinishesACommitWhoseCommitterDied) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  const auto meta = FixtureMeta(4, 2);
  for (int r = 0; r < 2; ++r) {
    RankState s(4, r, 2);
    ASSERT_TRUE(store.WriteShard(meta, r, s.contents(), {}).ok());
  }
  // The committer took the marker and died.
  WriteAll(tmp.path() + "/step-00000004.partial/COMMIT", "dead:1\n");
  auto o = store.TryCommit(meta);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, ckpt::CommitOutcome::kBeingCommitted);
  ASSERT_TRUE(store.Recover().ok());
  auto latest = store.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 4);
  EXPECT_TRUE(ckpt::VerifyCheckpoint((*latest)->path).ok());
}

TEST(CkptCommit, OlderStepIsNotCommittedOverANewerOne) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  ASSERT_TRUE(SaveFixture(&store, 8, 1).ok());
  Status s = SaveFixture(&store, 6, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("superseded"), std::string::npos) << s.ToString();
}

TEST(CkptRotation, KeepsNewestKMilestonesAndLeasedOnes) {
  TempDir tmp;
  CheckpointStore store(tmp.path());
  for (int step = 1; step <= 8; ++step) ASSERT_TRUE(SaveFixture(&store, step, 1).ok());
  auto lease = ckpt::ReadLease::Acquire(tmp.path() + "/step-00000001");
  ASSERT_TRUE(lease.ok());
  // Debris: an abandoned old partial, a newer partial (maybe live), a half-deleted directory.
  ASSERT_EQ(mkdir((tmp.path() + "/step-00000003.partial").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((tmp.path() + "/step-00000009.partial").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((tmp.path() + "/step-00000002.deleting").c_str(), 0755), 0);
  auto dry = store.Rotate({3, 4}, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok());
  EXPECT_TRUE(ckpt::VerifyCheckpoint(tmp.path() + "/step-00000002").ok()) << "dry run deleted";
  auto deleted = store.Rotate({3, 4});
  ASSERT_TRUE(deleted.ok());
  auto list = store.List();
  ASSERT_TRUE(list.ok());
  std::vector<std::string> left;
  for (const auto& i : *list)
    left.push_back(ckpt::StepDirName(i.step) + ":" + CheckpointStatusName(i.status));
  // 8,7,6 newest; 4 milestone; 1 leased; 9.partial may be live; 2,3,5 and debris gone.
  std::vector<std::string> want = {"step-00000009:partial",  "step-00000008:complete",
                                   "step-00000007:complete", "step-00000006:complete",
                                   "step-00000004:complete", "step-00000001:complete"};
  EXPECT_EQ(left, want);
  lease->reset();
  ASSERT_TRUE(store.Rotate({1, 0}).ok());
  list = store.List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)[1].step, 8);
  EXPECT_EQ(list->size(), 2u) << "the newest complete one must always survive";
}

// Every mutating file-system operation of a save + commit + rotation fails once, with ENOSPC
// and with EIO, and from then on (a full disk): the previous checkpoint always stays complete
// and verifiable, and the latest is always the old or the new step.
TEST(CkptFaults, FailureAtEveryFileSystemStep) {
  // Count the operations of one save first.
  int64_t total_ops = 0;
  {
    TempDir tmp;
    ckpt::CheckpointStore plain(tmp.path());
    ASSERT_TRUE(SaveFixture(&plain, 1, 2).ok());
    FaultInjectionEnv env(Env::Default());
    CheckpointStore store(tmp.path(), &env);
    ASSERT_TRUE(SaveFixture(&store, 2, 2).ok());
    ASSERT_TRUE(store.Rotate({1, 0}).ok());
    total_ops = env.op_count();
  }
  ASSERT_GT(total_ops, 20);
  int failures_seen = 0;
  for (int error : {ENOSPC, EIO}) {
    for (bool sticky : {false, true}) {
      for (int64_t op = 1; op <= total_ops; ++op) {
        TempDir tmp;
        CheckpointStore plain(tmp.path());
        ASSERT_TRUE(SaveFixture(&plain, 1, 2).ok());
        FaultInjectionEnv env(Env::Default());
        if (sticky)
          env.FailAllFrom(op, error);
        else
          env.FailAt(op, error);
        CheckpointStore store(tmp.path(), &env);
        Status s = SaveFixture(&store, 2, 2);
        if (s.ok()) s = store.Rotate({1, 0}).status();
        if (!s.ok()) {
          ++failures_seen;
          EXPECT_NE(s.message().find(std::strerror(error)), std::string::npos) << s.ToString();
        }
        auto latest = plain.Latest();
        ASSERT_TRUE(latest.ok() && latest->has_value()) << "op " << op;
        EXPECT_TRUE((*latest)->step == 1 || (*latest)->step == 2) << "op " << op;
        EXPECT_TRUE(ckpt::VerifyCheckpoint((*latest)->path).ok()) << "op " << op;
        if ((*latest)->step == 1) {
          // The save failed before the commit point: step 1 untouched.
          EXPECT_TRUE(ckpt::VerifyCheckpoint(tmp.path() + "/step-00000001").ok()) << "op " << op;
        }
        // A retry at the next interval (new step, healthy disk) succeeds.
        CheckpointStore healthy(tmp.path());
        ASSERT_TRUE(healthy.Recover().ok());
        Status retry = SaveFixture(&healthy, 3, 2);
        EXPECT_TRUE(retry.ok()) << "op " << op << ": " << retry.ToString();
      }
    }
  }
  EXPECT_GT(failures_seen, 2 * total_ops);
}

TEST(CkptTools, DiffAndExport) {
  TempDir tmp;
  CheckpointStore a(tmp.path() + "/a"), b(tmp.path() + "/b"), c(tmp.path() + "/c");
  ASSERT_TRUE(SaveFixture(&a, 5, 2).ok());
  ASSERT_TRUE(SaveFixture(&b, 5, 3).ok());  // same state, other world size
  ASSERT_TRUE(SaveFixture(&c, 6, 2).ok());
  std::ostringstream out;
  auto same =
      ckpt::DiffCheckpoints(tmp.path() + "/a/step-00000005", tmp.path() + "/b/step-00000005", out);
  ASSERT_TRUE(same.ok());
  // Tensors are identical across world sizes; per-rank state is not comparable.
  EXPECT_FALSE(same->identical);
  EXPECT_NE(out.str().find("per-rank and the world sizes differ"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("elements differ"), std::string::npos) << out.str();
  std::ostringstream out2;
  auto diff =
      ckpt::DiffCheckpoints(tmp.path() + "/a/step-00000005", tmp.path() + "/c/step-00000006", out2);
  ASSERT_TRUE(diff.ok());
  EXPECT_FALSE(diff->identical);
  EXPECT_NE(out2.str().find("max abs difference"), std::string::npos) << out2.str();

  for (const char* dtype : {"bf16", "fp32"}) {
    const std::string file = tmp.path() + "/model-" + dtype + ".safetensors";
    std::ostringstream log;
    ASSERT_TRUE(ckpt::ExportSafetensors(tmp.path() + "/a/step-00000005", dtype, file, log).ok());
    auto header = model::ReadSafetensorsHeader(file);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    ASSERT_EQ(header->entries.size(), FixtureTensors().size());
    const auto tensors = FixtureTensors();
    for (const auto& e : header->entries) {
      size_t t = 0;
      while (tensors[t].name != e.name) ++t;
      EXPECT_EQ(e.shape, tensors[t].shape);
      std::vector<uint8_t> bytes;
      ASSERT_TRUE(model::ReadSafetensorsTensor(file, *header, e, &bytes).ok());
      for (int64_t i = 0; i < tensors[t].numel(); i += 7) {
        const float want = FixtureValue(5, t, "master", i);
        if (std::string(dtype) == "fp32") {
          float v;
          std::memcpy(&v, bytes.data() + 4 * i, 4);
          ASSERT_EQ(v, want);
        } else {
          uint16_t h;
          std::memcpy(&h, bytes.data() + 2 * i, 2);
          ASSERT_EQ(h, ckpt::Fp32ToBf16(want));
        }
      }
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(ckpt::Fp32ToBf16(1.0f), 0x3f80);
  float up;  // 1 + 2^-8 + tiny: above the halfway point -> rounds up
  uint32_t bits = 0x3f808001;
  std::memcpy(&up, &bits, 4);
  EXPECT_EQ(ckpt::Fp32ToBf16(up), 0x3f81);
  bits = 0x3f808000;  // exactly halfway, even below -> stays
  std::memcpy(&up, &bits, 4);
  EXPECT_EQ(ckpt::Fp32ToBf16(up), 0x3f80);
  bits = 0x3f818000;  // halfway, odd below -> rounds up to even
  std::memcpy(&up, &bits, 4);
  EXPECT_EQ(ckpt::Fp32ToBf16(up), 0x3f82);
}

}  // namespace
}  // namespace ftrain::testing
