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
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "ckpt/filename.h"
#include "ckpt/reader.h"
#include "ckpt/store.h"
#include "ckpt/tools.h"
#include "ckpt/verify.h"
#include "ckpt_fixture.h"
#include "comm/collectives.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace ftrain::testing {
namespace {

using ckpt::CheckpointReader;
using ckpt::CheckpointStore;

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
  CheckpointStore store(tmp.path(), Env::Default());
  ASSERT_TRUE(SaveFixture(&store, 10, 2).ok());
  auto latest = store.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 10);
  EXPECT_EQ(ReadAll(tmp.path() + "/LATEST"), "step-00000010\n");
  auto rep = ckpt::VerifyCheckpoint((*latest)->path, 0, Env::Default());
  EXPECT_TRUE(rep.ok()) << rep.problems.front().problem;
  EXPECT_GT(rep.datasets_checked, 20);
  auto reader = CheckpointReader::Open((*latest)->path, Env::Default());
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
      CheckpointStore store(tmp.path(), Env::Default());
      ckpt::WriteOptions o;
      o.zstd_level = level;
      o.shuffle = shuffle;
      o.chunk_bytes = 1000;  // many chunks, a partial edge chunk, odd sizes
      o.threads = 3;
      ASSERT_TRUE(SaveFixture(&store, 1, 3, o).ok());
      auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000001", 0, Env::Default());
      EXPECT_TRUE(rep.ok()) << "level " << level << " shuffle " << shuffle;
      auto reader = CheckpointReader::Open(tmp.path() + "/step-00000001", Env::Default());
      ASSERT_TRUE(reader.ok());
      ExpectTensorMatchesFixture(**reader, 1);
    }
  }
}

TEST(Ckpt, ReshardingReadsAnyWorldSize) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ASSERT_TRUE(SaveFixture(&store, 5, 3).ok());
  auto reader = CheckpointReader::Open(tmp.path() + "/step-00000005", Env::Default());
  ASSERT_TRUE(reader.ok());
  const auto tensors = FixtureTensors();
  for (int new_world : {1, 2, 4, 5}) {
    for (int r = 0; r < new_world; ++r) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        auto span = comm::ShardOf(tensors[t].numel(), new_world, r);
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
  CheckpointStore store(tmp.path(), Env::Default());
  ckpt::WriteOptions o;
  o.zstd_level = GetParam().level;
  ASSERT_TRUE(SaveFixture(&store, 1, 2, o).ok());
  const std::string shard = tmp.path() + "/step-00000001/shard-00001.h5";
  const std::string ds = "/master/model.embed_tokens.weight";
  uint64_t size = 0;
  const uint64_t addr = DataAddress(shard, ds, &size);
  ASSERT_GT(size, 16u);
  FlipByte(shard, addr + size / 2);
  auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000001", 0, Env::Default());
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
    store_ = std::make_unique<CheckpointStore>(tmp_.path(), Env::Default());
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
    EXPECT_TRUE(ckpt::VerifyCheckpoint((*latest)->path, 0, Env::Default()).ok());
  }
  std::string FirstProblem() {
    auto rep = ckpt::VerifyCheckpoint(dir_, 0, Env::Default());
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
    auto reader = CheckpointReader::Open(dir_, Env::Default());
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
  auto rep = ckpt::VerifyCheckpoint(dir_, 0, Env::Default());
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
  CheckpointStore none(empty.path(), Env::Default());
  auto l2 = none.Latest();
  ASSERT_TRUE(l2.ok());
  EXPECT_FALSE(l2->has_value());
  CheckpointStore missing(empty.path() + "/nope", Env::Default());
  EXPECT_FALSE(missing.List().ok());
}

TEST(CkptCommit, OnlyOneCommitterAndOnlyWhenEveryRankIsThere) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
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
  CheckpointStore store(tmp.path(), Env::Default());
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
  EXPECT_TRUE(ckpt::VerifyCheckpoint((*latest)->path, 0, Env::Default()).ok());
}

TEST(CkptCommit, OlderStepIsNotCommittedOverANewerOne) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ASSERT_TRUE(SaveFixture(&store, 8, 1).ok());
  Status s = SaveFixture(&store, 6, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("superseded"), std::string::npos) << s.ToString();
}

TEST(CkptRotation, KeepsNewestKMilestonesAndLeasedOnes) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  for (int step = 1; step <= 8; ++step) ASSERT_TRUE(SaveFixture(&store, step, 1).ok());
  auto lease = ckpt::ReadLease::Acquire(tmp.path() + "/step-00000001");
  ASSERT_TRUE(lease.ok());
  // Debris: an abandoned old partial, a newer partial (maybe live), a half-deleted directory.
  ASSERT_EQ(mkdir((tmp.path() + "/step-00000003.partial").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((tmp.path() + "/step-00000009.partial").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((tmp.path() + "/step-00000002.deleting").c_str(), 0755), 0);
  auto dry = store.Rotate({3, 4}, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok());
  EXPECT_TRUE(ckpt::VerifyCheckpoint(tmp.path() + "/step-00000002", 0, Env::Default()).ok())
      << "dry run deleted";
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
    ckpt::CheckpointStore plain(tmp.path(), Env::Default());
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
        CheckpointStore plain(tmp.path(), Env::Default());
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
        EXPECT_TRUE(ckpt::VerifyCheckpoint((*latest)->path, 0, Env::Default()).ok()) << "op " << op;
        if ((*latest)->step == 1) {
          // The save failed before the commit point: step 1 untouched.
          EXPECT_TRUE(ckpt::VerifyCheckpoint(tmp.path() + "/step-00000001", 0, Env::Default()).ok())
              << "op " << op;
        }
        // A retry at the next interval (new step, healthy disk) succeeds.
        CheckpointStore healthy(tmp.path(), Env::Default());
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
  CheckpointStore a(tmp.path() + "/a", Env::Default()), b(tmp.path() + "/b", Env::Default()),
      c(tmp.path() + "/c", Env::Default());
  ASSERT_TRUE(SaveFixture(&a, 5, 2).ok());
  ASSERT_TRUE(SaveFixture(&b, 5, 3).ok());  // same state, other world size
  ASSERT_TRUE(SaveFixture(&c, 6, 2).ok());
  std::ostringstream out;
  auto same = ckpt::DiffCheckpoints(tmp.path() + "/a/step-00000005",
                                    tmp.path() + "/b/step-00000005", out, Env::Default());
  ASSERT_TRUE(same.ok());
  // Tensors are identical across world sizes; per-rank state is not comparable.
  EXPECT_FALSE(same->identical);
  EXPECT_NE(out.str().find("per-rank and the world sizes differ"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("elements differ"), std::string::npos) << out.str();
  std::ostringstream out2;
  auto diff = ckpt::DiffCheckpoints(tmp.path() + "/a/step-00000005",
                                    tmp.path() + "/c/step-00000006", out2, Env::Default());
  ASSERT_TRUE(diff.ok());
  EXPECT_FALSE(diff->identical);
  EXPECT_NE(out2.str().find("max abs difference"), std::string::npos) << out2.str();

  for (const char* dtype : {"bf16", "fp32"}) {
    const std::string file = tmp.path() + "/model-" + dtype + ".safetensors";
    std::ostringstream log;
    ASSERT_TRUE(
        ckpt::ExportSafetensors(tmp.path() + "/a/step-00000005", dtype, file, log, Env::Default())
            .ok());
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

// Resume verifies while it loads: a flipped byte in a tensor is a Corruption from the reader
// itself (not only from ckptctl verify), for whole pieces and resharded ranges alike.
TEST_P(CorruptionTest, ReaderVerifiesEveryPieceItLoads) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ckpt::WriteOptions o;
  o.zstd_level = GetParam().level;
  ASSERT_TRUE(SaveFixture(&store, 1, 2, o).ok());
  const std::string dir = tmp.path() + "/step-00000001";
  const std::string shard = dir + "/shard-00001.h5";
  const std::string ds = "/master/model.embed_tokens.weight";
  uint64_t size = 0;
  const uint64_t addr = DataAddress(shard, ds, &size);
  FlipByte(shard, addr + size / 2);
  auto reader = CheckpointReader::Open(dir, Env::Default());
  ASSERT_TRUE(reader.ok()) << reader.status().message();  // sizes still match: opens fine
  const ckpt::ManifestTensor* t =
      (*reader)->manifest().FindTensor("master", "model.embed_tokens.weight");
  ASSERT_NE(t, nullptr);
  std::vector<float> all(static_cast<size_t>(t->numel()));
  Status s =
      (*reader)->ReadTensorRange("master", "model.embed_tokens.weight", 0, t->numel(), all.data());
  ASSERT_TRUE(s.IsCorruption()) << s.message();
  // The manifest comparison, or zstd's own frame checksum for a compressed chunk.
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("shard-00001.h5"), std::string::npos) << s.message();
  // A range inside rank 1's piece (what a resharded rank reads) is caught too; rank 0's piece
  // alone still reads.
  const ckpt::TensorPiece& p1 = t->pieces.back();
  ASSERT_EQ(p1.rank, 1);
  std::vector<float> part(4);
  EXPECT_TRUE(
      (*reader)
          ->ReadTensorRange("master", "model.embed_tokens.weight", p1.offset + 1, 4, part.data())
          .IsCorruption());
  std::vector<float> first(static_cast<size_t>(t->pieces.front().length));
  EXPECT_TRUE((*reader)
                  ->ReadTensorRange("master", "model.embed_tokens.weight", 0,
                                    t->pieces.front().length, first.data())
                  .ok());
  // The same damage through the second line of defence alone (no whole-file check): each
  // piece's hash against the manifest, or zstd's frame checksum, names it too.
  auto pieces = CheckpointReader::Open(dir, Env::Default());
  ASSERT_TRUE(pieces.ok());
  (*pieces)->set_piece_checks_for_test();
  Status ps =
      (*pieces)->ReadTensorRange("master", "model.embed_tokens.weight", 0, t->numel(), all.data());
  ASSERT_TRUE(ps.IsCorruption()) << ps.message();
  EXPECT_NE(ps.message().find("checksum"), std::string::npos) << ps.message();
}

// Moving a damaged checkpoint aside keeps the evidence, makes the older one the latest, and
// rotation never deletes it; prune removes it only when asked.
TEST(CkptStore, MarkCorruptKeepsEvidenceAndRotationLeavesIt) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE(SaveFixture(&store, step, 2).ok());
  auto moved = store.MarkCorrupt(3);
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  EXPECT_EQ(*moved, tmp.path() + "/step-00000003.corrupt");
  auto latest = store.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 2);
  EXPECT_EQ(ReadAll(tmp.path() + "/LATEST"), "step-00000002\n");
  // The same step damaged again later gets its own name.
  ASSERT_TRUE(SaveFixture(&store, 3, 2).ok());
  auto again = store.MarkCorrupt(3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, tmp.path() + "/step-00000003.corrupt-2");
  ASSERT_TRUE(store.Rotate({1, 0}).ok());
  auto list = store.List();
  ASSERT_TRUE(list.ok());
  int corrupt = 0;
  for (const auto& i : *list) corrupt += i.status == ckpt::CheckpointStatus::kCorrupt;
  EXPECT_EQ(corrupt, 2);
  auto removed = store.RemoveCorrupt(false);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->size(), 2u);
}

// Rotation deletes an older checkpoint only once the newest one reads back and verifies.
TEST(CkptRotation, NothingOlderIsDeletedWhileTheNewestFailsVerification) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ASSERT_TRUE(SaveFixture(&store, 1, 2).ok());
  ASSERT_TRUE(SaveFixture(&store, 2, 2).ok());
  const std::string shard = tmp.path() + "/step-00000002/shard-00000.h5";
  uint64_t size = 0;
  FlipByte(shard, DataAddress(shard, "/master/model.embed_tokens.weight", &size) + size / 2);
  auto deleted = store.Rotate({1, 0});
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(deleted->empty()) << "deleted the only good checkpoint: " << deleted->front();
  struct stat st;
  EXPECT_EQ(stat((tmp.path() + "/step-00000001").c_str(), &st), 0);
}

// A step-N symlink to an archive is listed, never followed or deleted by rotation/prune, and
// the archive's contents survive.
TEST(CkptRotation, SymlinkToAnArchiveIsNeverFollowedOrDeleted) {
  TempDir tmp;
  const std::string root = tmp.path() + "/root", archive = tmp.path() + "/archive";
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
  CheckpointStore arch(archive, Env::Default());
  ASSERT_TRUE(SaveFixture(&arch, 1, 2).ok());
  ASSERT_EQ(symlink((archive + "/step-00000001").c_str(), (root + "/step-00000001").c_str()), 0);
  CheckpointStore store(root, Env::Default());
  for (int step = 2; step <= 5; ++step) ASSERT_TRUE(SaveFixture(&store, step, 2).ok());
  auto list = store.List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->back().is_symlink);
  auto deleted = store.Rotate({1, 0});
  ASSERT_TRUE(deleted.ok());
  for (const auto& d : *deleted) EXPECT_NE(d, root + "/step-00000001");
  EXPECT_TRUE(ckpt::VerifyCheckpoint(archive + "/step-00000001", 0, Env::Default()).ok());
  struct stat st;
  EXPECT_EQ(lstat((root + "/step-00000001").c_str(), &st), 0);
  // A link inside a directory being removed is unlinked, its target untouched.
  const std::string doomed = tmp.path() + "/doomed";
  ASSERT_EQ(mkdir(doomed.c_str(), 0755), 0);
  ASSERT_EQ(symlink(archive.c_str(), (doomed + "/link").c_str()), 0);
  ASSERT_TRUE(Env::Default()->RemoveDirRecursive(doomed).ok());
  EXPECT_TRUE(ckpt::VerifyCheckpoint(archive + "/step-00000001", 0, Env::Default()).ok());
  EXPECT_FALSE(Env::Default()->RemoveDirRecursive(root + "/step-00000001").ok());
}

// A dataset stored with another element type than the manifest says is refused before any
// copy (an F64 dataset read into a float32 buffer would overflow it).
TEST(CkptReader, DatasetOfAnotherTypeIsRefusedBeforeCopying) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ASSERT_TRUE(SaveFixture(&store, 1, 1).ok());
  const std::string dir = tmp.path() + "/step-00000001";
  const std::string shard = dir + "/shard-00000.h5";
  const std::string name = "model.norm.weight";
  auto reader = CheckpointReader::Open(dir, Env::Default());
  ASSERT_TRUE(reader.ok());
  const int64_t n = (*reader)->manifest().FindTensor("master", name)->numel();
  reader->reset();
  {  // Replace the dataset by an F64 one of the same length.
    hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Ldelete(f, ("/master/" + name).c_str(), H5P_DEFAULT), 0);
    hsize_t dims[1] = {static_cast<hsize_t>(n)};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, ("/master/" + name).c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    std::vector<double> values(static_cast<size_t>(n), 1.0);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(f);
  }
  // A consistent but foreign checkpoint: the manifest records the new file's size and hash
  // (so the whole-file check passes) and only the dataset type is wrong.
  std::string manifest = ReadAll(dir + "/manifest.json");
  struct stat st;
  ASSERT_EQ(stat(shard.c_str(), &st), 0);
  auto m = ckpt::Manifest::FromJson(manifest, "m");
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(ckpt::HashFile(shard, &m->files[0].size, &m->files[0].xxh3).ok());
  WriteAll(dir + "/manifest.json", m->ToJson());
  auto reader2 = CheckpointReader::Open(dir, Env::Default());
  ASSERT_TRUE(reader2.ok()) << reader2.status().message();
  std::vector<float> buf(static_cast<size_t>(n) + 16, 7.0f);
  Status s = (*reader2)->ReadTensorRange("master", name, 0, n, buf.data());
  ASSERT_TRUE(s.IsCorruption()) << s.message();
  EXPECT_NE(s.message().find("is not stored as float32"), std::string::npos) << s.message();
  EXPECT_EQ(buf[static_cast<size_t>(n)], 7.0f);  // nothing written past the buffer
}

// Manifests and receipts are untrusted input: a seeded mutation run over valid ones (drop,
// rename or retype a key, huge/negative/fractional numbers, empty or wrong-typed arrays,
// truncation, random bytes) never throws, never crashes and never accepts a manifest whose
// pieces do not tile its tensors. Runs 10,000+ cases in a few seconds.
TEST(CkptUntrusted, MutatedManifestsAndReceiptsAreRejectedCleanly) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ASSERT_TRUE(SaveFixture(&store, 1, 2).ok());
  const std::string manifest = ReadAll(tmp.path() + "/step-00000001/manifest.json");
  ASSERT_TRUE(ckpt::Manifest::FromJson(manifest, "m").ok());
  // A receipt of the same checkpoint, rebuilt from a fresh partial write.
  ckpt::Receipt receipt;
  {
    auto r = store.WriteShard(FixtureMeta(2, 2), 0, RankState(2, 0, 2).contents(), {});
    ASSERT_TRUE(r.ok());
    receipt = *r;
  }
  const std::string receipt_text = receipt.ToJson();
  std::mt19937_64 rng(20261201);
  const std::vector<nlohmann::json> hostile = {nullptr,
                                               true,
                                               -1,
                                               0,
                                               1e300,
                                               -1e300,
                                               18446744073709551615ull,
                                               -9223372036854775807ll - 1,
                                               0.5,
                                               "",
                                               "x",
                                               "../../etc/passwd",
                                               nlohmann::json::array(),
                                               nlohmann::json::object(),
                                               nlohmann::json::array({nlohmann::json::object()}),
                                               nlohmann::json::array({-1, 1e30})};
  // Every JSON pointer of a document (leaves and containers).
  std::function<void(const nlohmann::json&, const std::string&, std::vector<std::string>*)> walk =
      [&](const nlohmann::json& j, const std::string& at, std::vector<std::string>* out) {
        out->push_back(at);
        if (j.is_object()) {
          for (auto it = j.begin(); it != j.end(); ++it) walk(it.value(), at + "/" + it.key(), out);
        } else if (j.is_array()) {
          for (size_t i = 0; i < j.size(); ++i) walk(j[i], at + "/" + std::to_string(i), out);
        }
      };
  int cases = 0, accepted = 0;
  for (const std::string* doc : {&manifest, &receipt_text}) {
    const nlohmann::json base = nlohmann::json::parse(*doc);
    std::vector<std::string> pointers;
    walk(base, "", &pointers);
    for (int i = 0; i < 6000; ++i) {
      std::string text;
      nlohmann::json j = base;
      const std::string& at = pointers[rng() % pointers.size()];
      const int kind = static_cast<int>(rng() % 6);
      try {
        nlohmann::json::json_pointer ptr(at);
        if (kind == 0 && !at.empty()) {  // drop the key / element
          nlohmann::json::json_pointer parent = ptr.parent_pointer();
          const std::string key = ptr.back();
          if (j[parent].is_object())
            j[parent].erase(key);
          else if (j[parent].is_array())
            j[parent].erase(std::stoul(key));
        } else if (kind == 1 && !at.empty() && j[ptr.parent_pointer()].is_object()) {
          nlohmann::json::json_pointer parent = ptr.parent_pointer();  // rename the key
          nlohmann::json v = j[ptr];
          j[parent].erase(ptr.back());
          j[parent][ptr.back() + "_renamed"] = v;
        } else if (kind <= 3) {
          j[ptr] = hostile[rng() % hostile.size()];  // retype / hostile value
        }
        text = j.dump();
        if (kind == 4) text = text.substr(0, rng() % (text.size() + 1));  // truncated
        if (kind == 5) {                                                  // random bytes
          for (int k = 0; k < 3; ++k) text[rng() % text.size()] = static_cast<char>(rng());
        }
      } catch (const std::exception&) {
        continue;  // the mutation itself did not apply; not a case
      }
      ++cases;
      if (doc == &manifest) {
        auto m = ckpt::Manifest::FromJson(text, "mutated manifest");
        if (m.ok()) {
          ++accepted;
          // Whatever was accepted must be safe to use: pieces tile every tensor.
          for (const auto& t : m->tensors) {
            int64_t next = 0;
            for (const auto& p : t.pieces) {
              ASSERT_EQ(p.offset, next) << text;
              ASSERT_GE(p.rank, 0);
              ASSERT_LT(p.rank, m->meta.world_size);
              next += p.length;
            }
            ASSERT_EQ(next, t.numel()) << text;
          }
        } else {
          ASSERT_TRUE(m.status().IsCorruption()) << m.status().message();
          ASSERT_NE(m.status().message().find("mutated manifest"), std::string::npos)
              << m.status().message();
        }
      } else {
        auto r = ckpt::Receipt::FromJson(text, "mutated receipt");
        if (r.ok()) {
          ++accepted;
          ASSERT_GE(r->rank, 0);
          ASSERT_LT(r->rank, r->world_size);
        } else {
          ASSERT_NE(r.status().message().find("mutated receipt"), std::string::npos);
        }
      }
    }
  }
  EXPECT_GE(cases, 10000);
  EXPECT_LT(accepted, cases / 2) << "most mutations should be refused";
}

// One malformed manifest (a renamed key: valid JSON) makes that checkpoint unreadable with a
// message naming the file and field; listing, rotation and Latest go on with the others.
TEST(CkptUntrusted, RenamedKeyInAnOldManifestDoesNotStopListingOrRotation) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  for (int step = 1; step <= 4; ++step) ASSERT_TRUE(SaveFixture(&store, step, 2).ok());
  const std::string path = tmp.path() + "/step-00000001/manifest.json";
  nlohmann::json j = nlohmann::json::parse(ReadAll(path));
  j["tensors"][0]["pieces_"] = j["tensors"][0]["pieces"];
  j["tensors"][0].erase("pieces");
  WriteAll(path, j.dump());
  auto list = store.List();
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 4u);
  EXPECT_EQ(list->back().status, ckpt::CheckpointStatus::kUnreadable);
  EXPECT_NE(list->back().problem.find("manifest.json"), std::string::npos) << list->back().problem;
  EXPECT_NE(list->back().problem.find("'pieces'"), std::string::npos) << list->back().problem;
  auto deleted = store.Rotate({2, 0});
  ASSERT_TRUE(deleted.ok()) << deleted.status().message();
  auto latest = store.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 4);
}

// Every zstd frame carries its content checksum flag, so any zstd decoder (ours, hdf5plugin,
// python-zstandard) rejects a damaged chunk on its own.
TEST(CkptFormat, ZstdFramesCarryTheirChecksumFlag) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  ckpt::WriteOptions o;
  o.zstd_level = 3;
  o.shuffle = false;
  ASSERT_TRUE(SaveFixture(&store, 1, 1, o).ok());
  const std::string shard = tmp.path() + "/step-00000001/shard-00000.h5";
  uint64_t size = 0;
  const uint64_t addr = DataAddress(shard, "/master/model.embed_tokens.weight", &size);
  std::ifstream in(shard, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(addr));
  unsigned char head[5] = {0};
  in.read(reinterpret_cast<char*>(head), 5);
  ASSERT_EQ(head[0], 0x28);  // zstd magic 0xFD2FB528, little endian
  ASSERT_EQ(head[3], 0xFD);
  EXPECT_TRUE(head[4] & 0x04) << "Content_Checksum_flag not set";
}

// Fencing: a writer (a daemon still persisting, a rank that woke up late) of generation G
// never puts its shard into generation G+1's commit of the same step, whichever comes first.
TEST(CkptFencing, AStaleGenerationNeverGetsIntoANewerCommit) {
  TempDir tmp;
  CheckpointStore store(tmp.path(), Env::Default());
  const std::string old_gen = "000001700000000-0000000a", new_gen = "000001700000999-0000000b";
  ASSERT_LT(old_gen, ckpt::NewGeneration(0));
  auto meta_of = [&](const std::string& g) {
    ckpt::CheckpointMeta m = FixtureMeta(5, 2);
    m.generation = g;
    return m;
  };
  // G wrote rank 0 of step 5 and died before rank 1; G+1 starts and writes both ranks: the
  // old partial is replaced, and the commit has only G+1's shards.
  ASSERT_TRUE(store.WriteShard(meta_of(old_gen), 0, RankState(5, 0, 2).contents(), {}).ok());
  ASSERT_TRUE(store.WriteShard(meta_of(new_gen), 0, RankState(5, 0, 2).contents(), {}).ok());
  // The late G writer of rank 1 is refused, before it writes anything.
  auto late = store.WriteShard(meta_of(old_gen), 1, RankState(5, 1, 2).contents(), {});
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("fenced"), std::string::npos) << late.status().message();
  ASSERT_TRUE(store.WriteShard(meta_of(new_gen), 1, RankState(5, 1, 2).contents(), {}).ok());
  // A stale receipt planted into the partial (a writer that passed its last check just before
  // the takeover) is refused by the committer, which releases its marker.
  const std::string partial = tmp.path() + "/step-00000005.partial";
  const std::string good = ReadAll(partial + "/shard-00001.json");
  nlohmann::json j = nlohmann::json::parse(good);
  j["generation"] = old_gen;
  WriteAll(partial + "/shard-00001.json", j.dump());
  auto refused = store.TryCommit(meta_of(new_gen));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("stale writer"), std::string::npos)
      << refused.status().message();
  struct stat st;
  EXPECT_NE(stat((partial + "/COMMIT").c_str(), &st), 0) << "a failed commit kept its marker";
  WriteAll(partial + "/shard-00001.json", good);
  auto committed = store.TryCommit(meta_of(new_gen));
  ASSERT_TRUE(committed.ok()) << committed.status().message();
  EXPECT_EQ(*committed, ckpt::CommitOutcome::kCommitted);
  auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000005", 0, Env::Default());
  EXPECT_TRUE(rep.ok()) << rep.problems.front().file << ": " << rep.problems.front().problem;
  auto m = CheckpointReader::Open(tmp.path() + "/step-00000005", Env::Default());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->manifest().meta.generation, new_gen);
  // And once G+1 owns a partial, a G writer cannot take it back.
  ckpt::CheckpointMeta m6 = FixtureMeta(6, 2);
  m6.generation = new_gen;
  ASSERT_TRUE(store.WriteShard(m6, 0, RankState(6, 0, 2).contents(), {}).ok());
  m6.generation = old_gen;
  EXPECT_FALSE(store.WriteShard(m6, 1, RankState(6, 1, 2).contents(), {}).ok());
}

// An Env that runs `hook(op, path, before)` around each directory-level mutating operation,
// to put another writer's whole WriteShard at an exact point of this writer's protocol.
class HookEnv : public FaultInjectionEnv {
 public:
  using Hook = std::function<void(const std::string& op, const std::string& path, bool before)>;
  explicit HookEnv(Hook hook) : FaultInjectionEnv(Env::Default()), hook_(std::move(hook)) {}
  Status CreateExclusive(const std::string& p, const std::string& c) override {
    return Around("create", p, [&] { return FaultInjectionEnv::CreateExclusive(p, c); });
  }
  Status SyncFile(const std::string& p) override {
    return Around("sync", p, [&] { return FaultInjectionEnv::SyncFile(p); });
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return Around("rename", from, [&] { return FaultInjectionEnv::Rename(from, to); });
  }
  Status RemoveDirRecursive(const std::string& p) override {
    return Around("rmdir", p, [&] { return FaultInjectionEnv::RemoveDirRecursive(p); });
  }
  Status CreateDir(const std::string& p) override {
    return Around("mkdir", p, [&] { return FaultInjectionEnv::CreateDir(p); });
  }

 private:
  Status Around(const std::string& op, const std::string& path,
                const std::function<Status()>& run) {
    hook_(op, path, true);
    Status s = run();
    hook_(op, path, false);
    return s;
  }
  Hook hook_;
};

std::string GenerationOf(const std::string& partial) {
  std::ifstream in(partial + "/GENERATION");
  std::string g;
  std::getline(in, g);
  return g;
}

// GENERATION is published with the partial directory (made aside, renamed into place): no
// writer ever sees step-N.partial without its generation. (The old protocol created the
// directory, then GENERATION with O_EXCL, then its contents: a second rank of the same
// generation could read it empty, take it for an older generation's leftover and delete the
// winner's shards; it waited up to a second for the contents as a stopgap.)
TEST(CkptFencing, APartialIsNeverVisibleWithoutItsGeneration) {
  TempDir tmp;
  const std::string partial = tmp.path() + "/step-00000007.partial";
  const std::string gen = ckpt::NewGeneration(0);
  int looks = 0;
  std::vector<std::string> bare;
  HookEnv env([&](const std::string& op, const std::string& path, bool) {
    struct stat st;
    if (stat(partial.c_str(), &st) != 0) return;
    ++looks;
    if (GenerationOf(partial) != gen) bare.push_back(op + " " + path);
  });
  CheckpointStore store(tmp.path(), &env);
  ckpt::CheckpointMeta meta = FixtureMeta(7, 2);
  meta.generation = gen;
  for (int rank : {0, 1}) {
    auto r = store.WriteShard(meta, rank, RankState(7, rank, 2).contents(), {});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  EXPECT_GT(looks, 0);
  EXPECT_TRUE(bare.empty()) << "step-7.partial had no generation around: " << bare.front();
  auto c = store.TryCommit(meta);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c, ckpt::CommitOutcome::kCommitted);
}

// A writer of generation G claims step-5.partial and is paused right after the claim (a
// daemon that woke up late); G+1 takes the partial over and writes the same rank's shard.
// When the G writer goes on, its shard must not replace G+1's: the commit holds G+1's bytes.
TEST(CkptFencing, AStaleWriterPausedAfterItsClaimNeverOverwritesTheNewerShard) {
  TempDir tmp;
  const std::string partial = tmp.path() + "/step-00000005.partial";
  const std::string old_gen = "000001700000000-0000000a", new_gen = "000001700000999-0000000b";
  auto meta_of = [&](const std::string& g) {
    ckpt::CheckpointMeta m = FixtureMeta(5, 1);
    m.generation = g;
    return m;
  };
  CheckpointStore newer(tmp.path(), Env::Default());
  StatusOr<ckpt::Receipt> newer_receipt = Status::Internal("not run");
  bool fired = false;
  HookEnv env([&](const std::string&, const std::string&, bool before) {
    if (fired || before || GenerationOf(partial) != old_gen) return;
    fired = true;  // the stale writer's claim is in place: the newer start runs now
    newer_receipt = newer.WriteShard(meta_of(new_gen), 0, RankState(5, 0, 1).contents(), {});
  });
  CheckpointStore stale(tmp.path(), &env);
  // Different bytes (and size) from the newer shard.
  auto late = stale.WriteShard(meta_of(old_gen), 0, RankState(5, 0, 1, 2).contents(), {});
  ASSERT_TRUE(fired);
  ASSERT_TRUE(newer_receipt.ok()) << newer_receipt.status().message();
  EXPECT_FALSE(late.ok()) << "the stale writer was not refused";
  uint64_t size = 0, hash = 0;
  ASSERT_TRUE(ckpt::HashFile(partial + "/shard-00000.h5", &size, &hash).ok());
  EXPECT_EQ(size, newer_receipt->size) << "the stale writer replaced the newer shard";
  EXPECT_EQ(hash, newer_receipt->xxh3) << "the stale writer replaced the newer shard";
  auto c = newer.TryCommit(meta_of(new_gen));
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000005", 0, Env::Default());
  EXPECT_TRUE(rep.ok()) << rep.problems.front().file << ": " << rep.problems.front().problem;
}

// Two ranks of a new generation both find an older generation's partial and both retire it.
// The slower one must not remove the claim (and shard) the faster one already published.
TEST(CkptFencing, TwoWritersOfOneGenerationNeverRemoveEachOthersClaim) {
  TempDir tmp;
  const std::string partial = tmp.path() + "/step-00000005.partial";
  const std::string old_gen = "000001700000000-0000000a", new_gen = "000001700000999-0000000b";
  auto meta_of = [&](const std::string& g) {
    ckpt::CheckpointMeta m = FixtureMeta(5, 2);
    m.generation = g;
    return m;
  };
  CheckpointStore fast(tmp.path(), Env::Default());
  ASSERT_TRUE(fast.WriteShard(meta_of(old_gen), 0, RankState(5, 0, 2).contents(), {}).ok());
  StatusOr<ckpt::Receipt> first = Status::Internal("not run");
  bool fired = false;
  HookEnv env([&](const std::string& op, const std::string& path, bool before) {
    if (fired || !before || path != partial || (op != "rename" && op != "rmdir")) return;
    fired = true;  // the slow rank judged the old partial and is about to remove it
    first = fast.WriteShard(meta_of(new_gen), 0, RankState(5, 0, 2).contents(), {});
  });
  CheckpointStore slow(tmp.path(), &env);
  auto second = slow.WriteShard(meta_of(new_gen), 1, RankState(5, 1, 2).contents(), {});
  ASSERT_TRUE(fired);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_TRUE(second.ok()) << second.status().message();
  auto c = fast.TryCommit(meta_of(new_gen));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c, ckpt::CommitOutcome::kCommitted) << "a rank's claim and shard were removed";
  auto rep = ckpt::VerifyCheckpoint(tmp.path() + "/step-00000005", 0, Env::Default());
  EXPECT_TRUE(rep.ok()) << rep.problems.front().file << ": " << rep.problems.front().problem;
  // Nothing of the retired partial or the claims is left in the root.
  auto foreign = fast.ListForeign();
  ASSERT_TRUE(foreign.ok());
  EXPECT_TRUE(foreign->empty()) << foreign->front();
}

}  // namespace
}  // namespace ftrain::testing
