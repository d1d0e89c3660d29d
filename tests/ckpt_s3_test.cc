// Checkpoints on object storage against a real S3 server: moto's (FTRAIN_MOTO_PYTHONPATH),
// started once for the binary, with a fault-injecting proxy (tests/s3_fault_proxy.py) where a
// test needs throttling or a store that ignores If-None-Match. Real processes, real sockets:
// ckptctl mirror is killed with SIGKILL in the middle of a multipart upload.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ckpt/filename.h"
#include "ckpt/mirror.h"
#include "ckpt/s3_layout.h"
#include "ckpt/s3_staging.h"
#include "ckpt/s3_store.h"
#include "ckpt/s3_upload_retrier.h"
#include "ckpt/store.h"
#include "ckpt/tools.h"
#include "ckpt_fixture.h"
#include "moto_server.h"
#include "test_util.h"

namespace ftrain::ckpt {
namespace {

using ::ftrain::testing::Contains;
using ::ftrain::testing::RunCommand;
using ::ftrain::testing::TempDir;
namespace fs = std::filesystem;

using ::ftrain::testing::kS3Bucket;
using ::ftrain::testing::MotoEndpoint;
constexpr const char* kBucket = kS3Bucket;
const bool kMoto = ::ftrain::testing::RegisterMotoEnvironment();

int Spawn(const std::vector<std::string>& argv, const std::string& log) {
  return ::ftrain::testing::SpawnChild(argv, log);
}

std::pair<std::string, int> StartProxy(const TempDir& dir, const std::vector<std::string>& flags) {
  return ::ftrain::testing::StartS3Proxy(dir, flags);
}

// A fresh prefix per test, so tests never see each other's objects.
std::string Root(const std::string& name) { return std::string("s3://") + kBucket + "/" + name; }

std::string Ckptctl() { return ::ftrain::testing::BinDir() + "/ckptctl"; }

S3StoreOptions SmallParts() {
  S3StoreOptions o;
  o.upload.part_bytes = 64 << 10;  // many parts per shard, sent 4 at a time
  o.upload.threads = 4;
  o.range_bytes = 48 << 10;
  o.http.backoff_ms = 5;
  o.http.max_backoff_ms = 50;
  return o;
}

// File-system checkpoints of `steps` (world 2) in dir; returns the root.
std::string SaveSteps(const TempDir& dir, const std::vector<int64_t>& steps, int64_t scale = 4) {
  const std::string root = dir / "fs";
  CheckpointStore store(root, Env::Default());
  for (int64_t s : steps) {
    Status st = ::ftrain::testing::SaveFixture(&store, s, 2, {}, scale);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return root;
}

std::unique_ptr<S3CheckpointStore> Open(const std::string& root, S3StoreOptions o = SmallParts()) {
  auto s = S3CheckpointStore::Open(root, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

TEST(CkptS3, MirrorCommitListVerifyPruneRestoreRoundTrip) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {10, 20, 30});
  auto s3 = Open(Root("roundtrip"));
  ASSERT_TRUE(s3->CheckUsable().ok());
  ASSERT_TRUE(s3->ClaimFence("e000000000000001-00000001").ok());
  for (int64_t step : {10, 20, 30}) {
    auto out =
        s3->Upload(fs_root + "/" + StepDirName(step), "e000000000000001-00000001", Env::Default());
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, MirrorOutcome::kCommitted);
  }
  // The same step again: the conditional manifest PUT is refused, nothing overwritten.
  auto again =
      s3->Upload(fs_root + "/" + StepDirName(30), "e000000000000001-00000001", Env::Default());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, MirrorOutcome::kAlreadyCommitted);
  // An older step than the newest committed one is superseded, as on a file system.
  auto old =
      s3->Upload(fs_root + "/" + StepDirName(10), "e000000000000001-00000001", Env::Default());
  ASSERT_TRUE(old.ok());  // step 10 is committed already
  EXPECT_EQ(*old, MirrorOutcome::kAlreadyCommitted);
  auto list = s3->List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 30);
  EXPECT_TRUE((*list)[0].committed);

  // boto3 and an independent CRC32C as the oracle: the layout on the server, and the commit
  // object carrying the CRC32C of the bytes it holds (tests/s3_checksum_oracle.py).
  auto oracle = RunCommand("PYTHONPATH=" + std::string(FTRAIN_MOTO_PYTHONPATH) + " python3 " +
                               FTRAIN_SOURCE_DIR + "/tests/s3_checksum_oracle.py " +
                               MotoEndpoint() + " " + kBucket + " roundtrip/step-00000030/ 2>&1",
                           60);
  EXPECT_EQ(oracle.exit_code, 0) << oracle.output;
  EXPECT_TRUE(Contains(oracle.output, "roundtrip/step-00000030/data-none/shard-00001.h5 "))
      << oracle.output;
  EXPECT_TRUE(Contains(oracle.output, "roundtrip/step-00000030/manifest.json ")) << oracle.output;

  auto rep = s3->Verify(30, dir.path(), 2, Env::Default());
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0].problem);
  EXPECT_GT(rep->datasets_checked, 0);

  // ckptctl on the s3:// root.
  auto r = RunCommand(Ckptctl() + " --log-level debug list " + Root("roundtrip") + " 2>&1", 60);
  EXPECT_FALSE(Contains(r.output, "secret/for+tests")) << r.output;  // never in any message
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "step-00000030  complete")) << r.output;
  r = RunCommand(Ckptctl() + " latest " + Root("roundtrip") + " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, Root("roundtrip") + "/step-00000030")) << r.output;
  r = RunCommand(Ckptctl() + " verify " + Root("roundtrip") + " --all 2>&1", 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "OK  " + Root("roundtrip") + "/step-00000010")) << r.output;
  r = RunCommand(Ckptctl() + " prune " + Root("roundtrip") + " --keep 1 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "deleted " + Root("roundtrip") + "/step-00000010/manifest.json"))
      << r.output;
  list = s3->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);  // only the newest is left, whole
  EXPECT_EQ((*list)[0].step, 30);

  // The scratch space is purged: the restore brings the newest back, bit-identical.
  const std::string purged = dir / "purged";
  auto restored = RestoreFromMirror(Root("roundtrip"), purged, Env::Default());
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, 30);
  CheckpointStore back(purged, Env::Default());
  auto latest = back.Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 30);
  std::ostringstream diff;
  auto d = DiffCheckpoints(fs_root + "/" + StepDirName(30), (*latest)->path, diff, Env::Default());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->identical) << diff.str();
  // Nothing more to restore once the file system is as new.
  auto none = RestoreFromMirror(Root("roundtrip"), purged, Env::Default());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// inspect, diff and export on s3:// checkpoints: the root's newest or a named step, copied
// into a private directory under $TMPDIR that is gone afterwards; the results are the same as
// on the file-system original (diff identical, the exported safetensors byte-identical).
TEST(CkptS3, InspectDiffExportReadS3Checkpoints) {
  TempDir dir("ckpt-s3-tools");
  const std::string fs_root = SaveSteps(dir, {10, 20});
  const std::string root = Root("tools");
  auto s3 = Open(root);
  for (int64_t step : {10, 20}) {
    auto out =
        s3->Upload(fs_root + "/" + StepDirName(step), "e000000000000001-00000001", Env::Default());
    ASSERT_TRUE(out.ok()) << out.status().ToString();
  }
  const std::string tmp = dir / "tmp";
  fs::create_directories(tmp);
  const std::string ctl = "TMPDIR=" + tmp + " " + Ckptctl();
  auto r = RunCommand(ctl + " inspect " + root + " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "step         20")) << r.output;
  r = RunCommand(ctl + " inspect --json " + root + "/step-00000010 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"stored_bytes\"")) << r.output;
  r = RunCommand(ctl + " diff " + fs_root + "/" + StepDirName(20) + " " + root + " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "identical")) << r.output;
  r = RunCommand(ctl + " diff " + root + "/step-00000010 " + root + "/step-00000020 2>&1", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string a = dir / "fs.safetensors", b = dir / "s3.safetensors";
  r = RunCommand(ctl + " export " + fs_root + "/" + StepDirName(20) +
                     " --format safetensors --dtype fp32 -o " + a + " 2>&1",
                 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand(ctl + " export " + root + " --format safetensors --dtype fp32 -o " + b + " 2>&1",
                 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(RunCommand("cmp " + a + " " + b + " 2>&1", 30).exit_code, 0);
  // A step that is not committed there is named, exit 2; no copy is left in $TMPDIR.
  r = RunCommand(ctl + " inspect " + root + "/step-00000030 2>&1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(fs::is_empty(tmp)) << "a private copy was left in " << tmp;
}

// ckpt.root = s3:// (s3_staging.h): a staged step counts once CommitStaged put it on S3
// (S3_LATEST); a start's reconciliation drops staged steps S3 never committed and aborts what
// they left there; a damaged step is set aside so that no resume chooses it again.
TEST(CkptS3, StagingRootCommitsOnS3AndReconcileDropsUncommittedSteps) {
  TempDir dir("ckpt-s3-staging");
  const std::string fs_root = SaveSteps(dir, {10, 20});
  const std::string root = Root("staged");
  ASSERT_TRUE(MarkStagingRoot(fs_root, root, {}, Env::Default()).ok());
  auto url = StagedS3Root(fs_root, Env::Default());
  ASSERT_TRUE(url.ok() && *url == root) << url.status().ToString();
  EXPECT_EQ(StagedS3Latest(fs_root, Env::Default()), -1);
  Status s = CommitStaged(fs_root, 10, 3, Env::Default());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(StagedS3Latest(fs_root, Env::Default()), 10);
  auto s3 = Open(root);
  auto latest = s3->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, 10);
  // Step 20 is staged and never committed there (its uploader was killed).
  auto newest = ReconcileStaging(fs_root, root, 3, Env::Default());
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  ASSERT_TRUE(newest->has_value());
  EXPECT_EQ(**newest, 10);
  EXPECT_FALSE(fs::exists(fs_root + "/" + StepDirName(20)));
  EXPECT_TRUE(fs::exists(fs_root + "/" + StepDirName(10)));  // the same manifest as S3's
  CheckpointStore staged(fs_root, Env::Default());
  auto local = staged.Latest();
  ASSERT_TRUE(local.ok() && local->has_value());
  EXPECT_EQ((*local)->step, 10);
  // A damaged step is set aside: no longer committed, its manifest kept as evidence.
  ASSERT_TRUE(SetAsideDamaged(root, 10).ok());
  latest = s3->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
  EXPECT_TRUE(s3->client()->Head({kBucket, "staged/CORRUPT-step-00000010.json"}).ok());
}

// The S3 root's upload settings (ckpt.s3_part_mb, ckpt.s3_threads, ckpt.s3_max_mb_s) travel
// in S3_ROOT to every writer: CommitStaged sends the parts of the size recorded (an object's
// ETag counts them) and holds to the bandwidth cap; an S3_ROOT from before the settings means
// the defaults, and a malformed one is Corruption, never a guess.
TEST(CkptS3, StagingRootCarriesTheUploadSettingsToCommitStaged) {
  TempDir dir("ckpt-s3-knobs");
  const std::string fs_root = SaveSteps(dir, {10, 20}, /*scale=*/1300);
  const std::string root = Root("knobs");
  ASSERT_TRUE(MarkStagingRoot(fs_root, root, {}, Env::Default()).ok());
  auto u = StagedS3Upload(fs_root, Env::Default());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->part_bytes, 8ull << 20);
  data::UploadOptions want;
  want.part_bytes = 5ull << 20;
  want.threads = 2;
  want.max_bytes_per_s = 8'000'000;
  ASSERT_TRUE(MarkStagingRoot(fs_root, root, want, Env::Default()).ok());
  auto url = StagedS3Root(fs_root, Env::Default());
  ASSERT_TRUE(url.ok() && *url == root) << url.status().ToString();
  u = StagedS3Upload(fs_root, Env::Default());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->part_bytes, want.part_bytes);
  EXPECT_EQ(u->threads, 2);
  EXPECT_EQ(u->max_bytes_per_s, want.max_bytes_per_s);

  uint64_t bytes = 0, largest = 0;
  std::string largest_name;
  for (const auto& e : fs::directory_iterator(fs_root + "/" + StepDirName(10))) {
    bytes += e.file_size();
    if (e.file_size() > largest) largest = e.file_size(), largest_name = e.path().filename();
  }
  ASSERT_GT(largest, 5ull << 20) << "the fixture must span two parts of 5 MiB";
  const auto t0 = std::chrono::steady_clock::now();
  Status s = CommitStaged(fs_root, 10, 3, Env::Default());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.ok()) << s.ToString();
  // 8 MB/s: the upload cannot be faster than bytes / 8e6 (less a token bucket's first burst).
  EXPECT_GT(took, 0.7 * double(bytes) / 8e6) << bytes << " bytes in " << took << " s";
  auto objects = Open(root)->client()->List({kBucket, "knobs/step-00000010/"});
  ASSERT_TRUE(objects.ok());
  const uint64_t parts = (largest + want.part_bytes - 1) / want.part_bytes;
  bool found = false;
  for (const auto& o : *objects) {
    if (o.key.size() < largest_name.size() ||
        o.key.compare(o.key.size() - largest_name.size(), largest_name.size(), largest_name) != 0)
      continue;
    found = true;
    // boto3 is the oracle: a multipart object's ETag ends in "-<number of parts>".
    auto out = RunCommand("PYTHONPATH=" + std::string(FTRAIN_MOTO_PYTHONPATH) +
                              " python3 -c \"import boto3,os; print(boto3.client('s3', "
                              "region_name='us-east-1', endpoint_url=os.environ["
                              "'AWS_ENDPOINT_URL']).head_object(Bucket='" +
                              std::string(kBucket) + "', Key='" + o.key + "')['ETag'])\" 2>&1",
                          60);
    EXPECT_TRUE(Contains(out.output, "-" + std::to_string(parts) + "\"")) << out.output;
  }
  EXPECT_TRUE(found);

  std::ofstream(fs_root + "/" + kS3RootName) << root << "\npart_bytes=lots\n";
  EXPECT_TRUE(StagedS3Upload(fs_root, Env::Default()).status().IsCorruption());
  EXPECT_TRUE(CommitStaged(fs_root, 20, 3, Env::Default()).IsCorruption());
}

// An outage while training goes on costs no checkpoint: the store answers 503 to everything
// while DOWN exists; CommitStaged fails as an outage, the retry thread keeps trying, and
// once the store is back the step is committed on S3 and in S3_LATEST. A wait that gives up
// ends CommitStagedRetrying with the outage, nothing committed.
TEST(CkptS3, StagedUploadThatMeetsAnOutageIsRetriedUntilCommitted) {
  TempDir dir("ckpt-s3-outage");
  const std::string fs_root = SaveSteps(dir, {10, 20});
  const std::string root = Root("outage");
  ASSERT_TRUE(MarkStagingRoot(fs_root, root, {}, Env::Default()).ok());
  const std::string down = dir / "DOWN";
  std::ofstream(down) << "down\n";
  auto [endpoint, pid] = StartProxy(dir, {"--down-file", down});
  ::setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  int tries = 0;
  Status s = CommitStagedRetrying(
      fs_root, 10, 3, [&](std::chrono::milliseconds) { return ++tries < 2; }, Env::Default());
  EXPECT_TRUE(IsS3Outage(s)) << s.ToString();
  EXPECT_EQ(tries, 2);
  EXPECT_EQ(StagedS3Latest(fs_root, Env::Default()), -1);
  {
    StagedUploadRetrier retrier(fs_root, 3, Env::Default());
    retrier.Add(10);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    EXPECT_EQ(retrier.pending(), 1u);
    EXPECT_EQ(StagedS3Latest(fs_root, Env::Default()), -1);
    fs::remove(down);  // the store is back
    for (int i = 0; i < 600 && retrier.pending() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(retrier.pending(), 0u);
  }
  ::setenv("AWS_ENDPOINT_URL", MotoEndpoint().c_str(), 1);
  ::ftrain::testing::SignalAndReap(pid, SIGKILL);
  EXPECT_EQ(StagedS3Latest(fs_root, Env::Default()), 10);
  auto latest = Open(root)->Latest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status().ToString();
  EXPECT_EQ(**latest, 10);
  EXPECT_GE(std::stoi(::ftrain::testing::ReadFile(dir / "proxy.port.faults")), 2);
}

TEST(CkptS3, MirrorThreadCopiesNewCheckpointsRotatesAndFencesOlderJobs) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {1});
  MirrorOptions o;
  o.env = Env::Default();
  o.url = Root("mirror");
  o.keep = 2;
  o.every_s = 0.2;
  o.store = SmallParts();
  auto m = CheckpointMirror::Open(o, fs_root, "e000000000000005-00000001");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  (*m)->Start();
  CheckpointStore store(fs_root, Env::Default());
  auto s3 = Open(o.url);
  for (int64_t step : {2, 3, 4}) {
    ASSERT_TRUE(::ftrain::testing::SaveFixture(&store, step, 2, {}, 4).ok());
    std::optional<int64_t> latest;
    for (int i = 0; i < 500 && latest.value_or(-1) < step; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto l = s3->Latest();
      if (l.ok()) latest = *l;
    }
    EXPECT_EQ(latest.value_or(-1), step);  // copied while "training" goes on
  }
  ASSERT_TRUE(::ftrain::testing::SaveFixture(&store, 5, 2, {}, 4).ok());
  ASSERT_TRUE((*m)->Stop(/*final_pass=*/true).ok());  // the end of a run: the final one too
  auto list = s3->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);  // ckpt.mirror_keep = 2
  EXPECT_EQ((*list)[0].step, 5);
  EXPECT_EQ((*list)[1].step, 4);
  // A job older than the one that claimed the mirror is refused at its start.
  auto old = CheckpointMirror::Open(o, fs_root, "e000000000000004-00000001");
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), Status::Code::kFailedPrecondition) << old.status().ToString();
  EXPECT_TRUE(Contains(old.status().message(), "newer job")) << old.status().ToString();
}

TEST(CkptS3, OlderGenerationIsFencedAndCommitsNothing) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {5});
  auto s3 = Open(Root("fenced"));
  ASSERT_TRUE(s3->ClaimFence("e000000000000002-0000aaaa").ok());
  Status claim = s3->ClaimFence("e000000000000001-0000bbbb");
  EXPECT_EQ(claim.code(), Status::Code::kFailedPrecondition) << claim.ToString();
  auto out =
      s3->Upload(fs_root + "/" + StepDirName(5), "e000000000000001-0000bbbb", Env::Default());
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(Contains(out.status().message(), "fenced")) << out.status().ToString();
  auto latest = s3->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());  // its objects are there, its manifest is not
  // The owner of the fence commits.
  auto owner =
      s3->Upload(fs_root + "/" + StepDirName(5), "e000000000000002-0000aaaa", Env::Default());
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
}

TEST(CkptS3, KilledUploadLeavesNothingVisibleAndPruneAbortsIt) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {7, 8}, 400);
  const std::string root = Root("killed");
  auto s3 = Open(root);
  ASSERT_TRUE(s3->Upload(fs_root + "/" + StepDirName(7), "g", Env::Default()).ok());
  // A real process uploading step 8 at 1 MB/s, killed once its multipart upload exists.
  const int pid = Spawn({Ckptctl(), "mirror", fs_root + "/" + StepDirName(8), root,
                         "--max-mb-per-s", "0.2", "--part-mb", "5", "--generation", "g"},
                        dir / "mirror.log");
  bool uploading = false;
  for (int i = 0; i < 600 && !uploading; ++i) {
    auto ups = s3->client()->ListUploads({kBucket, "killed/"});
    uploading = ups.ok() && !ups->empty();
    if (!uploading) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(uploading) << ::ftrain::testing::ReadFile(dir / "mirror.log");
  ::ftrain::testing::SignalAndReap(pid, SIGKILL);
  auto latest = s3->Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->value_or(-1), 7);  // step 8 is invisible
  auto r = RunCommand(Ckptctl() + " latest " + root + " 2>&1", 60);
  EXPECT_TRUE(Contains(r.output, "step-00000007")) << r.output;
  // Without --abandoned the newer upload may still be alive: left alone.
  r = RunCommand(Ckptctl() + " prune " + root + " --keep 1 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(Contains(r.output, "upload ")) << r.output;
  r = RunCommand(Ckptctl() + " prune " + root + " --keep 1 --abandoned 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      Contains(r.output, "deleted upload s3://" + std::string(kBucket) + "/killed/step-00000008/"))
      << r.output;
  auto ups = s3->client()->ListUploads({kBucket, "killed/"});
  ASSERT_TRUE(ups.ok());
  EXPECT_TRUE(ups->empty());
  auto list = s3->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 7);
}

TEST(CkptS3, ThrottlingIsRetriedAndOutagesAreNotDamage) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {3});
  // Two stalled requests (no answer for 3 s, past the 1 s stall timeout), then every third
  // request SlowDown: listings, part uploads, completions and the commit all meet one.
  auto [endpoint, pid] =
      StartProxy(dir, {"--stall-first", "2", "--stall-s", "3", "--fail-every", "3"});
  ::setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  S3StoreOptions o = SmallParts();
  o.http.stall_timeout_ms = 1000;
  auto s3 = Open(Root("throttled"), o);
  auto out = s3->Upload(fs_root + "/" + StepDirName(3), "g", Env::Default());
  ::setenv("AWS_ENDPOINT_URL", MotoEndpoint().c_str(), 1);
  ::ftrain::testing::SignalAndReap(pid, SIGKILL);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_GE(std::stoi(::ftrain::testing::ReadFile(dir / "proxy.port.faults")), 5);
  auto rep = Open(Root("throttled"))->Verify(3, dir.path(), 2, Env::Default());
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());

  // The store goes down after the start-up check and the listing (2 requests): ckptctl
  // verify says so (exit 2), never "bad" (exit 1).
  TempDir dir2("ckpt-s3");
  auto [down, pid2] = StartProxy(dir2, {"--fail-after", "2"});
  auto r = RunCommand(
      "AWS_ENDPOINT_URL=" + down + " " + Ckptctl() + " verify " + Root("throttled") + " 2>&1", 300);
  ::ftrain::testing::SignalAndReap(pid2, SIGKILL);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "SlowDown")) << r.output;
  EXPECT_TRUE(Contains(r.output, "an outage, not damage")) << r.output;
}

TEST(CkptS3, DamagedObjectIsCorruption) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {4});
  auto s3 = Open(Root("damaged"));
  ASSERT_TRUE(s3->Upload(fs_root + "/" + StepDirName(4), "g", Env::Default()).ok());
  auto m = s3->ReadManifest(4);
  ASSERT_TRUE(m.ok());
  const std::string key = S3FileKey("damaged", 4, m->meta.generation, m->files[1].path);
  std::string bytes;
  ASSERT_TRUE(s3->client()->Get({kBucket, key}, &bytes).ok());
  bytes[bytes.size() / 2] ^= 0x10;
  ASSERT_TRUE(s3->client()->Put({kBucket, key}, bytes).ok());
  // A damaged local shard is never uploaded: step 5's upload stops before its commit.
  const std::string fs5 = SaveSteps(dir, {5}) + "/" + StepDirName(5) + "/" + m->files[0].path;
  {
    std::string local = ::ftrain::testing::ReadFile(fs5);
    local[local.size() / 3] ^= 0x01;
    std::FILE* f = std::fopen(fs5.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(local.data(), 1, local.size(), f), local.size());
    std::fclose(f);
  }
  auto bad_upload = s3->Upload(fs5.substr(0, fs5.rfind('/')), "g", Env::Default());
  EXPECT_EQ(bad_upload.status().code(), Status::Code::kCorruption)
      << bad_upload.status().ToString();
  auto latest4 = s3->Latest();
  ASSERT_TRUE(latest4.ok());
  EXPECT_EQ(latest4->value_or(-1), 4);

  auto r = RunCommand(Ckptctl() + " verify " + Root("damaged") + " 2>&1", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "XXH3")) << r.output;
  auto restored = RestoreFromMirror(Root("damaged"), dir / "restore", Env::Default());
  EXPECT_EQ(restored.status().code(), Status::Code::kCorruption) << restored.status().ToString();
  CheckpointStore fs(dir / "restore", Env::Default());
  auto latest = fs.Latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());  // nothing half-restored is visible
}

TEST(CkptS3, BadStoresExitTwoBeforeTouchingAnything) {
  TempDir dir("ckpt-s3");
  const std::string fs_root = SaveSteps(dir, {2});
  const std::string ck = fs_root + "/" + StepDirName(2);
  // No bucket.
  auto r = RunCommand(Ckptctl() + " mirror " + ck + " s3://no-such-bucket/x 2>&1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "no-such-bucket")) << r.output;
  // No credentials.
  r = RunCommand("env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY HOME=" + dir.path() + " " +
                     Ckptctl() + " list " + Root("creds") + " 2>&1",
                 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "AWS_ACCESS_KEY_ID")) << r.output;
  // Access denied (moto checking keys: ours is no IAM user's): the message names the bucket,
  // the operation and the variables to check, and never the secret.
  auto auth = [](const char* on) {
    return RunCommand("curl -sf -X POST --data " + std::string(on) + " " + MotoEndpoint() +
                          "/moto-api/reset-auth -H 'Content-Type: text/plain'",
                      30);
  };
  ASSERT_EQ(auth("0").exit_code, 0);
  r = RunCommand(Ckptctl() + " mirror " + ck + " " + Root("denied") + " 2>&1", 60);
  ASSERT_EQ(auth("inf").exit_code, 0);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "HEAD s3://" + std::string(kBucket))) << r.output;
  EXPECT_TRUE(Contains(r.output, "AWS_ACCESS_KEY_ID")) << r.output;
  EXPECT_TRUE(Contains(r.output, "AWS_ENDPOINT_URL")) << r.output;
  EXPECT_FALSE(Contains(r.output, "secret/for+tests")) << r.output;
  // A store that ignores If-None-Match: fencing cannot work there.
  auto [endpoint, pid] = StartProxy(dir, {"--strip-if-none-match"});
  r = RunCommand("AWS_ENDPOINT_URL=" + endpoint + " " + Ckptctl() + " mirror " + ck + " " +
                     Root("nocond") + " 2>&1",
                 60);
  // Readers need no conditional writes (nor write access): list works through the same store.
  auto reader = RunCommand(
      "AWS_ENDPOINT_URL=" + endpoint + " " + Ckptctl() + " list " + Root("nocond") + " 2>&1", 60);
  ::ftrain::testing::SignalAndReap(pid, SIGKILL);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "If-None-Match")) << r.output;
  EXPECT_EQ(reader.exit_code, 0) << reader.output;
  auto list = Open(Root("nocond"))->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());  // nothing was uploaded
}

}  // namespace
}  // namespace ftrain::ckpt
