// Object storage against a real local S3 server: moto's server from PyPI (the prefix
// scripts/install-deps.sh makes, FTRAIN_MOTO_PYTHONPATH), started once for the whole binary on
// a free port and filled by boto3 (tests/s3_fixture.py). Requests go over real sockets, signed
// with SigV4 by libcurl; with moto's authentication on, moto checks each signature with
// botocore's signer and the key against its IAM users.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/format/synthetic.h"
#include "data/pack/input_files.h"
#include "data/pack/pack.h"
#include "data/pack/train_tokenizer.h"
#include "data/read/dataset.h"
#include "data/read/reader.h"
#include "data/source/s3.h"
#include "data/tokenize/tokenizer.h"
#include "data_test_util.h"
#include "test_util.h"

namespace ftrain::data {
namespace {

using ::ftrain::testing::Contains;
using ::ftrain::testing::RunCommand;
using ::ftrain::testing::TempDir;
using testing::ReadFileOrDie;
using testing::WriteFileOrDie;
namespace fs = std::filesystem;

constexpr const char* kBucket = "ftrain-test";
constexpr int kManyObjects = 1005;  // more than one ListObjectsV2 page (1000 keys)

// The server, its contents and the credentials boto3 made, for every test.
struct Moto {
  int pid = -1;
  std::string endpoint;
  nlohmann::json creds;
  std::unique_ptr<TempDir> dir;
};
Moto* moto = nullptr;

std::string Q(const std::string& s) { return "'" + s + "'"; }

// Deterministic text with some structure: lines of invented words, some JSON Lines.
std::string Text(uint64_t seed, int lines) {
  std::string out;
  for (int l = 0; l < lines; ++l) {
    for (uint64_t k = 0, v = seed * 7919 + l * 104729; k < 9;
         ++k, v = v * 6364136223846793005u + 1) {
      for (int c = 0; c < 2 + int(v >> 61); ++c) out += char('a' + (v >> (c * 5 + 8)) % 13 + c);
      out += ' ';
    }
    out += "Прочее.\n";
  }
  return out;
}

// A corpus tree whose walk order differs from plain key order ("a/..." before "a.txt" on
// disk, after it in S3), with a gzip file, a hidden file and a file skipped by name.
void WriteCorpus(const std::string& dir) {
  fs::create_directories(dir + "/a");
  WriteFileOrDie(dir + "/a.txt", Text(1, 300));
  WriteFileOrDie(dir + "/a/b.txt", Text(2, 200));
  WriteFileOrDie(dir + "/a/c.jsonl", "{\"text\": \"" + std::string(200, 'q') + " tail\"}\n" +
                                         "{\"text\": \"another document ÿ\"}\n");
  WriteFileOrDie(dir + "/a/notes ü+1.txt", Text(5, 20));  // a key that needs URL encoding
  WriteFileOrDie(dir + "/big.txt", Text(3, 3000));        // several Range parts (see SetUp)
  WriteFileOrDie(dir + "/z.txt", Text(4, 100));
  ASSERT_EQ(std::system(("gzip -n " + Q(dir + "/z.txt")).c_str()), 0);
  WriteFileOrDie(dir + "/.hidden.txt", "never packed\n");
  WriteFileOrDie(dir + "/image.png", "never packed\n");
}

void SetEnv(const std::string& k, const std::string& v) { ::setenv(k.c_str(), v.c_str(), 1); }

// Points the client at moto with the IAM user's key (or `secret` instead of its own).
void UseUserKey(const std::string& secret = "") {
  SetEnv("AWS_ENDPOINT_URL", moto->endpoint);
  SetEnv("AWS_ACCESS_KEY_ID", moto->creds["access_key"].get<std::string>());
  SetEnv("AWS_SECRET_ACCESS_KEY",
         secret.empty() ? moto->creds["secret_key"].get<std::string>() : secret);
  ::unsetenv("AWS_SESSION_TOKEN");
  ::unsetenv("AWS_PROFILE");
}

// moto checks signatures and keys from now on ("0"), or no longer ("inf").
void Authenticate(bool on) {
  auto r = RunCommand("curl -sf -X POST --data " + std::string(on ? "0" : "inf") + " " +
                          moto->endpoint + "/moto-api/reset-auth -H 'Content-Type: text/plain'",
                      30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

class S3Env : public ::testing::Environment {
 public:
  void SetUp() override {
    moto = new Moto;
    moto->dir = std::make_unique<TempDir>("ftrain-s3");
    const std::string d = moto->dir->path();
    const std::string pythonpath = FTRAIN_MOTO_PYTHONPATH;
    ASSERT_TRUE(fs::exists(pythonpath + "/moto/server.py"))
        << pythonpath << " holds no moto: run scripts/install-deps.sh";
    const int port = ::ftrain::testing::FreePort();
    moto->endpoint = "http://127.0.0.1:" + std::to_string(port);
    moto->pid = ::fork();
    ASSERT_GE(moto->pid, 0);
    if (moto->pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed test binary leaves no server behind
      ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
      FILE* log = std::fopen((d + "/moto.log").c_str(), "w");
      ::dup2(fileno(log), 1);
      ::dup2(fileno(log), 2);
      const std::string p = std::to_string(port);
      ::execlp("python3", "python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", p.c_str(),
               nullptr);
      ::_exit(127);
    }
    WriteCorpus(d + "/corpus");
    ASSERT_TRUE(WriteSyntheticDataset(d + "/ds", SyntheticSpec(), Env::Default()).ok());
    auto r = RunCommand(
        "PYTHONPATH=" + Q(pythonpath) + " python3 " + Q(FTRAIN_SOURCE_DIR) +
            "/tests/s3_fixture.py " + moto->endpoint + " " + kBucket + " --upload " +
            Q(d + "/corpus=corpus") + " --upload " + Q(d + "/ds=datasets/ds") +
            " --many many=" + std::to_string(kManyObjects) + " 2>" + Q(d + "/fixture.err"),
        120);
    ASSERT_EQ(r.exit_code, 0) << r.output << ReadFileOrDie(d + "/fixture.err");
    moto->creds = nlohmann::json::parse(r.output);
    SetEnv("FTRAIN_S3_PART_BYTES", "65536");  // big.txt spans several Range parts
    UseUserKey();
  }
  void TearDown() override {
    if (moto != nullptr && moto->pid > 0) ::ftrain::testing::SignalAndReap(moto->pid, SIGKILL);
    delete moto;
    moto = nullptr;
  }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new S3Env);

// One epoch of the synthetic dataset through the reader, (epoch, sample) per row; the
// latencies of the range reads it made, when asked for.
Status ReadEpoch(const std::string& source, testing::Stream* out,
                 std::vector<float>* latencies = nullptr) {
  ReaderOptions o;
  o.env = Env::Default();
  o.source = source;
  o.seed = 3;
  o.micro_batch = 50;
  o.window_chunks = 4;
  o.prefetch_depth = 2;
  auto r = TokenReader::Open(o, nullptr);
  if (!r.ok()) return r.status();
  *out = testing::Take(r->get(), 20);
  if (latencies != nullptr) *latencies = (*r)->TakeReadLatencies();
  return Status::Ok();
}

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(moto, nullptr);
    UseUserKey();
  }
  void TearDown() override { Authenticate(false); }
  std::string Dir() const { return moto->dir->path(); }
};

TEST_F(S3Test, TrainingReadsTheSameRowsAsTheLocalCopy) {
  testing::Stream s3, local;
  std::vector<float> s3_latency, local_latency;
  ASSERT_TRUE(ReadEpoch(std::string("s3://") + kBucket + "/datasets/ds", &s3, &s3_latency).ok());
  ASSERT_TRUE(ReadEpoch(Dir() + "/ds", &local, &local_latency).ok());
  // Every range GET to moto was timed (the metrics' read latency); local reads are not.
  EXPECT_FALSE(s3_latency.empty());
  for (float t : s3_latency) EXPECT_GT(t, 0);
  EXPECT_TRUE(local_latency.empty());
  EXPECT_EQ(s3.rows, local.rows);
  EXPECT_EQ(s3.batch_sums, local.batch_sums);
  EXPECT_EQ(s3.rows.size(), 1000u);
}

TEST_F(S3Test, PackFromAPrefixIsByteIdenticalToPackingTheLocalFiles) {
  TempDir t;
  InputScan scan;  // a small tokenizer: what is packed matters here, not how well
  ASSERT_TRUE(ScanInputs({Dir() + "/corpus/z.txt.gz"}, &scan).ok());
  TrainTokenizerOptions topt;
  topt.vocab_size = 200;
  auto model = TrainTokenizer(scan, topt);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  WriteFileOrDie(t / "tok.model", *model);
  PackOptions o;
  o.env = Env::Default();
  o.tokenizer_path = t / "tok.model";
  o.seq_len = 32;
  o.shard_rows = 200;
  o.chunk_rows = 20;
  o.threads = 2;
  o.progress = ProgressMeter::Mode::kNone;
  o.inputs = {Dir() + "/corpus"};
  o.out_dir = t / "local";
  auto local = Pack(o);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  o.inputs = {std::string("s3://") + kBucket + "/corpus"};
  o.out_dir = t / "s3";
  auto s3 = Pack(o);
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();

  EXPECT_EQ(s3->index.data_version, local->index.data_version);
  ASSERT_EQ(s3->index.shards.size(), local->index.shards.size());
  ASSERT_GE(local->index.shards.size(), 2u);
  for (const auto& sh : local->index.shards) {
    EXPECT_EQ(ReadFileOrDie(t / ("s3/" + sh.name)), ReadFileOrDie(t / ("local/" + sh.name)))
        << sh.name;
  }
  // The same inputs in the same order, with the same stored bytes; only the names differ.
  ASSERT_EQ(s3->index.inputs.size(), 6u);
  ASSERT_EQ(local->index.inputs.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const std::string rel = local->index.inputs[i].path.substr(Dir().size() + 1);
    EXPECT_EQ(s3->index.inputs[i].path, std::string("s3://") + kBucket + "/" + rel);
    EXPECT_EQ(s3->index.inputs[i].xxh3, local->index.inputs[i].xxh3) << rel;
  }
  EXPECT_EQ(local->index.inputs[0].path, Dir() + "/corpus/a/b.txt");  // the walk's order
}

TEST_F(S3Test, ListingOfMoreThanOnePageIsComplete) {
  InputScan scan;
  Status s = ScanInputs({std::string("s3://") + kBucket + "/many"}, &scan);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(scan.files.size(), size_t(kManyObjects));
  for (int i = 0; i < kManyObjects; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "/many/doc-%05d.txt", i);
    ASSERT_EQ(scan.files[i].path, std::string("s3://") + kBucket + name);
    ASSERT_EQ(scan.files[i].bytes, std::string("document " + std::to_string(i) + "\n").size());
  }
}

TEST_F(S3Test, MissingObjectAndBucketAreOneLineNamingTheUrl) {
  auto ds = Dataset::Open(std::string("s3://") + kBucket + "/datasets/nope", Env::Default(),
                          HttpOptions());
  ASSERT_TRUE(ds.status().IsNotFound()) << ds.status().ToString();
  EXPECT_TRUE(Contains(ds.status().message(), std::string("s3://") + kBucket +
                                                  "/datasets/nope/index.json: HTTP 404 NoSuchKey"))
      << ds.status().message();
  InputScan scan;
  Status s = ScanInputs({"s3://no-such-bucket/corpus"}, &scan);
  EXPECT_TRUE(Contains(s.message(), "s3://no-such-bucket/corpus")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "NoSuchBucket")) << s.message();
  s = ScanInputs({std::string("s3://") + kBucket + "/empty-prefix"}, &scan);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "no text objects under this prefix")) << s.message();
}

TEST_F(S3Test, SignedRequestsPassAndAWrongSecretIsNamedWithoutTheSecret) {
  Authenticate(true);
  const std::string url = std::string("s3://") + kBucket + "/datasets/ds";
  testing::Stream rows;
  Status ok = ReadEpoch(url, &rows);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(rows.rows.size(), 1000u);

  const std::string wrong = "wrongSECRET/abc+def1234567890";
  UseUserKey(wrong);
  auto ds = Dataset::Open(url, Env::Default(), HttpOptions());
  ASSERT_FALSE(ds.ok());
  const std::string m = ds.status().message();
  EXPECT_TRUE(Contains(m, url + "/index.json: HTTP 403 SignatureDoesNotMatch")) << m;
  EXPECT_TRUE(Contains(m, "AWS_SECRET_ACCESS_KEY")) << m;  // where the credentials came from
  EXPECT_FALSE(Contains(m, wrong)) << m;
  // The CLI: one line, exit 2, and neither secret anywhere in its output.
  auto r = RunCommand(::ftrain::testing::Ftrain() + " data inspect " + url, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "SignatureDoesNotMatch")) << r.output;
  EXPECT_FALSE(Contains(r.output, wrong)) << r.output;
  EXPECT_FALSE(Contains(r.output, moto->creds["secret_key"].get<std::string>())) << r.output;
}

TEST_F(S3Test, SessionTokenAndProfileCredentials) {
  Authenticate(true);
  const std::string url = std::string("s3://") + kBucket + "/datasets/ds";
  // A role's temporary credentials with their session token.
  SetEnv("AWS_ACCESS_KEY_ID", moto->creds["temp_access_key"].get<std::string>());
  SetEnv("AWS_SECRET_ACCESS_KEY", moto->creds["temp_secret_key"].get<std::string>());
  SetEnv("AWS_SESSION_TOKEN", moto->creds["temp_token"].get<std::string>());
  auto ds = Dataset::Open(url, Env::Default(), HttpOptions());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  // moto compares the token with the one it issued: a wrong one is refused, and not echoed.
  SetEnv("AWS_SESSION_TOKEN", "wrong-session-token-123");
  ds = Dataset::Open(url, Env::Default(), HttpOptions());
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status().message(), "InvalidToken")) << ds.status().message();
  EXPECT_TRUE(Contains(ds.status().message(), "session token")) << ds.status().message();
  EXPECT_FALSE(Contains(ds.status().message(), "wrong-session-token-123"));

  // ~/.aws/credentials with AWS_PROFILE; the default profile holds a wrong key.
  TempDir home;
  fs::create_directories(home / ".aws");
  WriteFileOrDie(home / ".aws/credentials",
                 "[default]\naws_access_key_id = AKIAWRONG\naws_secret_access_key = x\n\n"
                 "# the test user\n[ftrain-test]\naws_access_key_id = " +
                     moto->creds["access_key"].get<std::string>() + "\naws_secret_access_key=" +
                     moto->creds["secret_key"].get<std::string>() + "\n");
  const std::string old_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  SetEnv("HOME", home.path());
  for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}) {
    ::unsetenv(v);
  }
  SetEnv("AWS_PROFILE", "ftrain-test");
  ds = Dataset::Open(url, Env::Default(), HttpOptions());
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  ::unsetenv("AWS_PROFILE");
  ds = Dataset::Open(url, Env::Default(), HttpOptions());
  ASSERT_FALSE(ds.ok());
  EXPECT_TRUE(Contains(ds.status().message(), "InvalidAccessKeyId")) << ds.status().message();
  EXPECT_TRUE(Contains(ds.status().message(), "profile [default] in " + home.path()))
      << ds.status().message();
  SetEnv("AWS_PROFILE", "nope");
  ds = Dataset::Open(url, Env::Default(), HttpOptions());
  EXPECT_TRUE(ds.status().IsInvalidArgument()) << ds.status().ToString();
  EXPECT_TRUE(Contains(ds.status().message(), "no profile [nope] in " + home.path()))
      << ds.status().message();
  SetEnv("HOME", old_home);
}

// libcurl's signatures for the request shapes moto cannot check (listings with a prefix and a
// continuation token full of reserved characters, keys that need encoding, a region other than
// the default, a session token) against botocore's signer in tests/sigv4_oracle.py.
TEST(S3Signing, LibcurlSignaturesEqualBotocoresForListingsAndKeys) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const int pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], 1);
    ::setenv("PYTHONPATH", FTRAIN_MOTO_PYTHONPATH, 1);
    const std::string script = std::string(FTRAIN_SOURCE_DIR) + "/tests/sigv4_oracle.py";
    ::execlp("python3", "python3", script.c_str(), "AKIDORACLE", "oracle/secret+KEY",
             "tok/en+==", "eu-west-3", nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  std::string port;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') port += c;
  ::close(out[0]);
  ASSERT_FALSE(port.empty()) << "sigv4_oracle.py did not start";
  S3Config config;
  config.access_key = "AKIDORACLE";
  config.secret_key = "oracle/secret+KEY";
  config.session_token = "tok/en+==";
  config.region = "eu-west-3";
  config.endpoint = "http://127.0.0.1:" + port;
  S3Client client(config, HttpOptions());
  auto list = client.List({"bkt", "d ir/ü/"});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);  // two pages, the second asked for with the decoded token
  EXPECT_EQ((*list)[0].key, "d ir/ü/a.txt");
  EXPECT_EQ((*list)[1].key, "d ir/ü/b&2.txt");
  std::string body;
  Status s = client.Get({"bkt", "notes ü+1 (x)=y.txt"}, &body);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(body, "ok");
  config.secret_key = "another";  // the oracle is not vacuous
  S3Client wrong(config, HttpOptions());
  s = wrong.Get({"bkt", "k"}, &body);
  EXPECT_TRUE(Contains(s.message(), "SignatureDoesNotMatch")) << s.ToString();
  ::ftrain::testing::SignalAndReap(pid, SIGKILL);
}

}  // namespace
}  // namespace ftrain::data
