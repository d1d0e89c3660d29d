// The HTTP source against a fault-injecting server on loopback (real sockets, libcurl):
// 404 and persistent 5xx fail naming the URL; transient 5xx, stalls mid-shard and truncated
// bodies are retried and logged; corrupted bytes are caught by the chunk checksums.
#include <gtest/gtest.h>

#include "data/format/synthetic.h"
#include "data/read/dataset.h"
#include "data/read/reader.h"
#include "data/read/verify_dataset.h"
#include "data_http_server.h"
#include "data_test_util.h"
#include "test_util.h"

namespace ftrain::data {
namespace {

using ::ftrain::testing::Contains;
using ::ftrain::testing::TempDir;
using testing::FaultyHttpServer;
using testing::Stream;
using testing::Take;
using Fault = FaultyHttpServer::Fault;

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticSpec spec;  // 1000 rows, 4 shards, chunks of 16 rows
    ASSERT_TRUE(WriteSyntheticDataset(tmp_.path() + "/ds", spec, Env::Default()).ok());
    server_ = std::make_unique<FaultyHttpServer>(tmp_.path());
  }

  ReaderOptions Opts(const std::string& source) {
    ReaderOptions o;
    o.env = Env::Default();
    o.source = source;
    o.seed = 3;
    o.micro_batch = 50;
    o.window_chunks = 4;
    o.http.max_retries = 3;
    o.http.backoff_ms = 10;
    o.http.stall_timeout_ms = 600;
    o.prefetch_depth = 0;  // one thread, one request at a time: exact request counts
    o.io_threads = 1;
    return o;
  }
  std::string Url() { return server_->url() + "/ds"; }

  // An epoch (20 batches of 50) through the reader; the error of the first failing Next().
  Status ReadEpoch(const std::string& source, Stream* out = nullptr) {
    auto r = TokenReader::Open(Opts(source), nullptr);
    if (!r.ok()) return r.status();
    for (int i = 0; i < 20; ++i) {
      auto b = (*r)->Next();
      if (!b.ok()) return b.status();
      if (out != nullptr) {
        for (int j = 0; j < b->rows; ++j) out->rows.push_back({b->epochs[j], b->samples[j]});
      }
    }
    return Status::Ok();
  }

  TempDir tmp_;
  std::unique_ptr<FaultyHttpServer> server_;
};

TEST_F(HttpTest, SameBatchesAsTheFileSource) {
  Stream http, file;
  ASSERT_TRUE(ReadEpoch(Url(), &http).ok());
  ASSERT_TRUE(ReadEpoch(tmp_.path() + "/ds", &file).ok());
  EXPECT_EQ(http.rows, file.rows);
  EXPECT_EQ(http.rows.size(), 1000u);
}

TEST_F(HttpTest, MissingIndexIs404NamingTheUrl) {
  auto ds = Dataset::Open(server_->url() + "/nope", Env::Default(), HttpOptions());
  ASSERT_TRUE(ds.status().IsNotFound()) << ds.status().ToString();
  EXPECT_TRUE(Contains(ds.status().message(), server_->url() + "/nope/index.json"));
  EXPECT_TRUE(Contains(ds.status().message(), "HTTP 404"));
}

TEST_F(HttpTest, MissingShardIs404NamingTheUrl) {
  ASSERT_EQ(::unlink((tmp_.path() + "/ds/shard-000002.bin").c_str()), 0);
  Status s = ReadEpoch(Url());
  ASSERT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Url() + "/shard-000002.bin")) << s.message();
  EXPECT_EQ(server_->Requests("shard-000002.bin"), 1) << "a 404 must not be retried";
}

TEST_F(HttpTest, TransientServerErrorsAreRetriedAndLogged) {
  server_->Inject("shard-000001.bin", Fault::kStatus, 2, 503);
  server_->Inject("index.json", Fault::kStatus, 1, 500);
  ::testing::internal::CaptureStderr();
  Status s = ReadEpoch(Url());
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Contains(log, "shard-000001.bin bytes=0-4095: HTTP 503 (attempt 1 of 4); retrying"))
      << log;
  EXPECT_TRUE(Contains(log, "index.json: HTTP 500 (attempt 1 of 4)")) << log;
  EXPECT_TRUE(Contains(log, "succeeded on attempt 3")) << log;
}

// The S3 source over the same server, addressed path-style as a custom endpoint (MinIO, Ceph
// RGW): throttling (429, 503) is retried with backoff there too, and logged by s3:// URL.
TEST_F(HttpTest, S3ThrottlingIsRetriedAndLoggedByS3Url) {
  ::setenv("AWS_ENDPOINT_URL", server_->url().c_str(), 1);  // tmp_/ds is bucket "ds"
  ::setenv("AWS_ACCESS_KEY_ID", "AKIAFAULTTEST", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "fault-test-s3cr3t", 1);
  server_->Inject("shard-000001.bin", Fault::kStatus, 2, 503);
  server_->Inject("index.json", Fault::kStatus, 1, 429);
  ::testing::internal::CaptureStderr();
  Stream s3, file;
  Status s = ReadEpoch("s3://ds", &s3);
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(ReadEpoch(tmp_.path() + "/ds", &file).ok());
  EXPECT_EQ(s3.rows, file.rows);
  EXPECT_TRUE(Contains(log, "GET s3://ds/shard-000001.bin bytes=0-4095: HTTP 503 (attempt 1 of 4)"))
      << log;
  EXPECT_TRUE(Contains(log, "GET s3://ds/index.json: HTTP 429 (attempt 1 of 4); retrying")) << log;
  EXPECT_FALSE(Contains(log, "fault-test-s3cr3t")) << log;
  EXPECT_TRUE(Contains(log, "shard-000001.bin bytes=0-4095: succeeded on attempt 3")) << log;
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) {
    ::unsetenv(v);
  }
}

TEST_F(HttpTest, PersistentServerErrorFailsAfterTheRetries) {
  server_->Inject("shard-000003.bin", Fault::kStatus, 1000, 500);
  Status s = ReadEpoch(Url());
  ASSERT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Url() + "/shard-000003.bin")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "failed after 4 attempts; last error: HTTP 500"))
      << s.message();
  EXPECT_EQ(server_->Requests("shard-000003.bin"), 4);
}

TEST_F(HttpTest, StallMidShardIsRetried) {
  // The header+table read is the first request to each shard; the second is a chunk.
  server_->Inject("shard-000000.bin", Fault::kStall, 1);
  ::testing::internal::CaptureStderr();
  Status s = ReadEpoch(Url());
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Contains(log, "stalled: no data for 600 ms after 2048 bytes")) << log;
}

TEST_F(HttpTest, StallThatNeverEndsFailsNamingTheUrl) {
  server_->Inject("shard-000000.bin", Fault::kStall, 1000);
  ReaderOptions o = Opts(Url());
  o.http.max_retries = 1;
  auto r = TokenReader::Open(o, nullptr);
  ASSERT_TRUE(r.ok());
  Status s;
  for (int i = 0; i < 20 && s.ok(); ++i) s = (*r)->Next().status();
  ASSERT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Url() + "/shard-000000.bin bytes=")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "stalled")) << s.message();
}

TEST_F(HttpTest, TruncatedBodyIsRetried) {
  server_->Inject("shard-000002.bin", Fault::kTruncate, 2);
  ::testing::internal::CaptureStderr();
  Status s = ReadEpoch(Url());
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Contains(log, "shard-000002.bin bytes=0-4095")) << log;
  EXPECT_TRUE(Contains(log, "retrying")) << log;
}

TEST_F(HttpTest, CorruptedBytesAreReReadThenReported) {
  // Request 1 to a shard reads its header; request 2 is its first chunk: corrupt that once.
  server_->Inject("shard-000001.bin", Fault::kCorrupt, 1, 0, /*skip=*/1);
  ::testing::internal::CaptureStderr();
  Status s = ReadEpoch(Url());
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Contains(log, Url() + "/shard-000001.bin: chunk ")) << log;
  EXPECT_TRUE(Contains(log, "checksum mismatch")) << log;
  EXPECT_TRUE(Contains(log, "re-reading (attempt 1 of 3)")) << log;
}

TEST_F(HttpTest, CorruptedChunkEveryTimeIsCorruptionNamingUrlAndChunk) {
  // Damage the file itself (payload of shard 1, chunk 2): every read of it is bad.
  std::string path = tmp_.path() + "/ds/shard-000001.bin";
  std::string bytes = testing::ReadFileOrDie(path);
  bytes[4096 + 2 * 512 + 7] ^= 0x40;
  testing::WriteFileOrDie(path, bytes);
  Status s = ReadEpoch(Url());
  ASSERT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Url() + "/shard-000001.bin: chunk 2 (bytes 5120..5631)"))
      << s.message();

  auto ds = Dataset::Open(Url(), Env::Default(), HttpOptions());
  ASSERT_TRUE(ds.ok());
  VerifyReport report;
  ASSERT_TRUE(VerifyDataset(ds->get(), "", &report, Env::Default()).ok());
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_TRUE(Contains(report.problems[0], "shard-000001.bin: chunk 2")) << report.problems[0];
}

TEST_F(HttpTest, ConnectionRefusedIsRetriedThenNamed) {
  HttpOptions h;
  h.max_retries = 2;
  h.backoff_ms = 5;
  std::string url = "http://127.0.0.1:1/ds";  // nothing listens on port 1
  auto ds = Dataset::Open(url, Env::Default(), h);
  ASSERT_EQ(ds.status().code(), Status::Code::kUnavailable) << ds.status().ToString();
  EXPECT_TRUE(Contains(ds.status().message(), url + "/index.json")) << ds.status().message();
  EXPECT_TRUE(Contains(ds.status().message(), "failed after 3 attempts")) << ds.status().message();
}

}  // namespace
}  // namespace ftrain::data
