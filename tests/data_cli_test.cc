// `ftrain pack` and `ftrain data` as users run them (the real build/bin/ftrain, real
// processes): byte-identical packs, every bad input of the issue with its exit code and
// message, verify naming bad shards, resume and world-size remap across processes, and the
// HTTP source served by a private nginx on loopback equal to the directory, byte for byte.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/format/hash.h"
#include "data_test_util.h"
#include "test_util.h"

namespace ftrain::data {
namespace {

using ::ftrain::testing::CommandResult;
using ::ftrain::testing::Contains;
using ::ftrain::testing::Ftrain;
using ::ftrain::testing::RunCommand;
using ::ftrain::testing::TempDir;
using testing::DirContents;
using testing::Ft;
using testing::Q;
using testing::ReadFileOrDie;
using testing::WriteFileOrDie;

// Deterministic pseudo-text with some non-ASCII words.
std::string Words(uint64_t seed, int n) {
  static const char* kWords[] = {
      "the",           "model",   "data",     "shard",    "token",   "checkpoint",
      "node",          "failure", "restart",  "gradient", "cluster", "sequence",
      "batch",         "epoch",   "résumé",   "naïve",    "Größe",   "日本語",
      "über",          "rank",    "reader",   "window",   "chunk",   "of",
      "and",           "a",       "is",       "to",       "in",      "we",
      "training",      "loss",    "learning", "rate",     "bits",    "exact",
      "deterministic", "order"};
  const int kN = sizeof(kWords) / sizeof(kWords[0]);
  SplitMix64 rng(seed);
  std::string out;
  static const char* kSyllables[] = {"ka", "to",  "ri", "men", "sa", "lo",  "ve",  "dan", "mi",
                                     "qu", "ber", "ni", "zo",  "ta", "pel", "gru", "ché", "for"};
  const int kS = sizeof(kSyllables) / sizeof(kSyllables[0]);
  for (int i = 0; i < n; ++i) {
    if (rng.Below(3) == 0) {  // an invented word: many distinct words for the tokenizer
      for (uint64_t k = 0, len = 2 + rng.Below(3); k < len; ++k) out += kSyllables[rng.Below(kS)];
    } else {
      out += kWords[rng.Below(kN)];
    }
    out += (i % 13 == 12) ? ".\n" : " ";
  }
  return out;
}

std::string JsonDoc(const std::string& text) {
  std::string esc;
  for (char c : text) {
    if (c == '\n')
      esc += "\\n";
    else if (c == '"')
      esc += "\\\"";
    else
      esc += c;
  }
  return "{\"id\": 1, \"text\": \"" + esc + "\"}\n";
}

// "step N ..." lines of `ftrain data batches`, without the step number.
std::vector<std::string> BatchLines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("step ", 0) == 0) lines.push_back(line.substr(line.find(" pos ")));
  }
  return lines;
}

class DataCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir;
    const std::string c = Corpus();
    ASSERT_EQ(RunCommand("mkdir -p " + Q(c + "/sub/deeper"), 10).exit_code, 0);
    std::string a;
    for (int d = 0; d < 3; ++d) a += Words(100 + d, 6000) + "\n\n";
    WriteFileOrDie(c + "/a.txt", a);
    std::string b;
    for (int d = 0; d < 300; ++d) b += JsonDoc(Words(1000 + d, 60 + d % 50));
    WriteFileOrDie(c + "/b.jsonl", b);
    WriteFileOrDie(c + "/sub/c.txt", Words(7, 20000));
    WriteFileOrDie(c + "/sub/deeper/d.jsonl", b.substr(0, b.find('\n', b.size() / 2) + 1));
    WriteFileOrDie(c + "/sub/image.png", std::string("\x89PNG\r\n\x1a\n\xff\xfe", 10));
    ASSERT_EQ(RunCommand("gzip -n " + Q(c + "/sub/c.txt") + " && zstd -q --rm " +
                             Q(c + "/sub/deeper/d.jsonl"),
                         30)
                  .exit_code,
              0);
    auto r = Ft("pack --train-tokenizer --vocab-size 400 --seq-len 32 --threads 2 --out " +
                Q(Tok()) + " --shard-rows 500 --chunk-rows 20 --progress plain " + Q(c));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = Ft("pack --tokenizer " + Q(Tok() + "/tokenizer.model") +
           " --seq-len 32 --shard-rows 500 --chunk-rows 20 --out " + Q(Packed()) + " " + Q(c));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string Corpus() { return tmp_->path() + "/corpus"; }
  static std::string Tok() { return tmp_->path() + "/tok"; }
  static std::string Packed() { return tmp_->path() + "/packed"; }
  static std::string Model() { return Tok() + "/tokenizer.model"; }
  static std::string PackArgs(const std::string& out) {
    return "pack --tokenizer " + Q(Model()) +
           " --seq-len 32 --shard-rows 500 --chunk-rows 20 --out " + Q(out) + " ";
  }

  static TempDir* tmp_;
};
TempDir* DataCliTest::tmp_ = nullptr;

TEST_F(DataCliTest, PackIsByteIdenticalAcrossRunsAndThreadCounts) {
  TempDir t;
  for (int threads : {1, 2, 3}) {
    auto r = Ft(PackArgs(t / ("out" + std::to_string(threads))) + "--threads " +
                std::to_string(threads) + " " + Q(Corpus()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  auto want = DirContents(Packed());
  ASSERT_GE(want.size(), 4u);  // index, tokenizer, shards
  ASSERT_TRUE(want.count("index.json"));
  for (int threads : {1, 2, 3}) {
    EXPECT_TRUE(DirContents(t / ("out" + std::to_string(threads))) == want)
        << "threads " << threads << " differ from the first pack";
  }
  const std::string index = want["index.json"];
  EXPECT_TRUE(Contains(index, "sub/c.txt.gz")) << index;
  EXPECT_TRUE(Contains(index, "sub/deeper/d.jsonl.zst")) << index;
  EXPECT_FALSE(Contains(index, "image.png")) << index;
}

TEST_F(DataCliTest, TrainedTokenizerIsDeterministicAndDecodes) {
  TempDir t;
  auto r = Ft("pack --train-tokenizer --vocab-size 400 --seq-len 32 --threads 2 --out " +
              Q(t / "tok") + " --shard-rows 500 --chunk-rows 20 " + Q(Corpus()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ReadFileOrDie(t / "tok/tokenizer.model"), ReadFileOrDie(Model()));
  r = Ft("data inspect " + Q(Packed()) + " --row 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "data version:")) << r.output;
  EXPECT_TRUE(Contains(r.output, "tokenizer:     tokenizer.model vocab 400")) << r.output;
  EXPECT_TRUE(Contains(r.output, "row 3 text:")) << r.output;
  // The decoded sample is corpus text (the header has common words of its own): row 3 lies
  // inside a.txt's first document (6000 words; rows of 33 tokens), so its text, whitespace
  // collapsed, is a piece of that file.
  auto collapse = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      const bool space = c == ' ' || c == '\n' || c == '\t';
      if (space && (out.empty() || out.back() == ' ')) continue;
      out += space ? ' ' : c;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  };
  const std::string marker = "row 3 text:";
  const size_t at = r.output.find(marker);
  ASSERT_NE(at, std::string::npos) << r.output;
  const size_t begin = at + marker.size();
  std::string text = r.output.substr(begin, r.output.find('\n', begin) - begin);
  if (text.size() > 4 && text.compare(text.size() - 4, 4, " ...") == 0)
    text.resize(text.size() - 4);
  text = collapse(text);
  ASSERT_GE(text.size(), 40u) << "too little text to tell: '" << text << "'";
  EXPECT_TRUE(Contains(collapse(ReadFileOrDie(Corpus() + "/a.txt")), text))
      << "row 3 decodes to text that is not in the corpus: '" << text << "'";
}

TEST_F(DataCliTest, VerifyPassesThenNamesEachBadShard) {
  auto ok = Ft("data verify " + Q(Packed()));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(Contains(ok.output, "verify: OK")) << ok.output;
  TempDir t;
  ASSERT_EQ(RunCommand("cp -r " + Q(Packed()) + " " + Q(t / "p"), 10).exit_code, 0);
  std::string shard1 = ReadFileOrDie(t / "p/shard-000001.bin");
  shard1[shard1.size() - 100] ^= 0x10;
  WriteFileOrDie(t / "p/shard-000001.bin", shard1);
  ASSERT_EQ(::truncate((t / "p/shard-000002.bin").c_str(), 5000), 0);
  auto bad = Ft("data verify " + Q(t / "p"));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "shard-000001.bin: chunk 24")) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "checksum mismatch")) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "shard-000002.bin: the file is 5000 bytes long")) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "verify: FAILED")) << bad.output;
}

TEST_F(DataCliTest, TokenizerThatDoesNotMatchTheIndexIsRefused) {
  TempDir t;
  auto r = Ft("pack --train-tokenizer --vocab-size 300 --seq-len 32 --out " + Q(t / "other") + " " +
              Q(Corpus() + "/a.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string other = t / "other/tokenizer.model";
  r = Ft("data verify " + Q(Packed()) + " --tokenizer " + Q(other));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "does not match index.json's tokenizer hash")) << r.output;
  r = Ft("data inspect " + Q(Packed()) + " --tokenizer " + Q(other));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, other + ": tokenizer hash")) << r.output;
  ASSERT_EQ(RunCommand("cp -r " + Q(Packed()) + " " + Q(t / "p") + " && cp " + Q(other) + " " +
                           Q(t / "p/tokenizer.model"),
                       10)
                .exit_code,
            0);
  r = Ft("data verify " + Q(t / "p"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, t / "p/tokenizer.model: tokenizer hash")) << r.output;
}

struct BadInput {
  const char* name;
  std::string files;  // "path=contents;..." created under the case's directory
  std::string args;   // after the common pack flags; {D} is the case's directory
  int exit_code;
  std::string message;
};

TEST_F(DataCliTest, BadInputsFailWithAClearMessageAndExitCode) {
  const std::vector<BadInput> cases = {
      {"no inputs", "", "", 2, "no inputs"},
      {"empty file", "e.txt=", "{D}/e.txt", 1, "no text in the inputs (1 files, 0 bytes"},
      {"only whitespace", "w.txt=  \n\n", "{D}/w.txt", 1, "no text in the inputs"},
      {"dir with no text", "img/x.png=PNG;img/y.bin=1", "{D}/img", 1,
       "img: directory holds no text files (skipped by name: 1 .bin, 1 .png"},
      {"empty dir", "", "{D}", 1, "directory holds no text files (it is empty)"},
      {"missing input", "", "{D}/nope.txt", 1, "nope.txt: no such file or directory"},
      {"invalid utf-8", "u.txt=fine line\nsecond line\nbad \xC3\x28 byte\n", "{D}/u.txt", 1,
       "u.txt:3: invalid UTF-8 at byte 5 of the line (byte offset 26 in the file)"},
      {"invalid utf-8 jsonl", "u.jsonl={\"text\": \"ok\"}\n{\"text\": \"\xFF\"}\n", "{D}/u.jsonl",
       1, "u.jsonl:2: invalid UTF-8 at byte 11"},
      {"json without field", "f.jsonl={\"text\": \"a b c\"}\n{\"body\": \"x\"}\n", "{D}/f.jsonl", 1,
       "f.jsonl:2: no field 'text' (pick the field with --text-field)"},
      {"field not a string", "g.jsonl={\"text\": 5}\n", "{D}/g.jsonl", 1,
       "g.jsonl:1: field 'text' is number, not a string"},
      {"not json", "h.jsonl={\"text\": \"a\"}\n{oops\n", "{D}/h.jsonl", 1,
       "h.jsonl:2: not valid JSON"},
      {"corrupt gzip", "", "{D}/z.txt.gz", 1, "z.txt.gz: gzip data error near stored byte"},
      {"truncated zstd", "", "{D}/t.jsonl.zst", 1, "t.jsonl.zst: compressed stream ends early"},
      {"seq-len 0", "", "--seq-len 0 {D}", 2, "--seq-len must be > 0"},
      {"two tokenizers", "", "--train-tokenizer --vocab-size 100 {D}", 2,
       "give exactly one of --tokenizer MODEL and --train-tokenizer"},
      {"bad tokenizer file", "m.model=not a model;x.txt=abc", "--tokenizer {D}/m.model {D}/x.txt",
       1, "m.model: not a SentencePiece model"},
  };
  for (const auto& c : cases) {
    TempDir t;
    std::string dir = t / "in";
    ASSERT_EQ(RunCommand("mkdir -p " + Q(dir), 10).exit_code, 0);
    std::istringstream specs(c.files);
    std::string spec;
    while (std::getline(specs, spec, ';')) {
      if (spec.empty()) continue;
      size_t eq = spec.find('=');
      std::string path = dir + "/" + spec.substr(0, eq);
      RunCommand("mkdir -p " + Q(path.substr(0, path.rfind('/'))), 10);
      WriteFileOrDie(path, spec.substr(eq + 1));
    }
    if (std::string(c.name) == "corrupt gzip") {
      WriteFileOrDie(dir + "/z.txt", Words(6, 5000));
      ASSERT_EQ(RunCommand("cd " + Q(dir) + " && gzip -n z.txt", 10).exit_code, 0);
      std::string gz = ReadFileOrDie(dir + "/z.txt.gz");
      for (size_t i = gz.size() / 3; i < gz.size() / 3 + 64; ++i) gz[i] = char(gz[i] ^ 0x5a);
      WriteFileOrDie(dir + "/z.txt.gz", gz);
    }
    if (std::string(c.name) == "truncated zstd") {
      std::string text = Words(5, 5000);
      WriteFileOrDie(dir + "/t.jsonl", JsonDoc(text));
      ASSERT_EQ(
          RunCommand("cd " + Q(dir) + " && zstd -q --rm t.jsonl && truncate -s 200 t.jsonl.zst", 10)
              .exit_code,
          0);
    }
    std::string args = c.args;
    for (size_t at; (at = args.find("{D}")) != std::string::npos;) args.replace(at, 3, Q(dir));
    std::string cmd = "pack --seq-len 32 --out " + Q(t / "out") + " ";
    if (!Contains(args, "--train-tokenizer") && !Contains(args, "--tokenizer")) {
      cmd += "--tokenizer " + Q(Model()) + " ";
    } else if (Contains(args, "--train-tokenizer")) {
      cmd += "--tokenizer " + Q(Model()) + " ";
    }
    if (Contains(args, "--seq-len"))
      cmd = "pack --out " + Q(t / "out") + " --tokenizer " + Q(Model()) + " ";
    auto r = Ft(cmd + args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.name << "\n" << r.output;
    EXPECT_TRUE(Contains(r.output, c.message)) << c.name << ": expected '" << c.message << "' in\n"
                                               << r.output;
    EXPECT_FALSE(Contains(r.output, "Segmentation")) << c.name;
  }
}

// --on-bad-record=skip: every reason of the issue is counted, listed in bad-records.jsonl by
// file, line and reason (never the text), recorded in index.json and printed in the summary;
// the good records around them are packed.
TEST_F(DataCliTest, OnBadRecordSkipCountsListsAndRecordsEachReason) {
  TempDir t;
  const std::string dir = t / "in";
  ASSERT_EQ(RunCommand("mkdir -p " + Q(dir), 10).exit_code, 0);
  WriteFileOrDie(dir + "/a.jsonl", JsonDoc(Words(1, 50)) + "{oops SECRET0\n" +
                                       "{\"body\": \"SECRET1\"}\n" + "{\"text\": 5}\n" +
                                       "{\"text\": \"bad \xFF SECRET2\"}\n" + "[1, 2]\n" +
                                       JsonDoc(Words(2, 50)));
  std::string z;
  for (int i = 0; i < 400; ++i) z += JsonDoc(Words(10 + i, 40));
  WriteFileOrDie(dir + "/z.jsonl", z);
  ASSERT_EQ(RunCommand("cd " + Q(dir) + " && gzip -n z.jsonl", 10).exit_code, 0);
  std::string gz = ReadFileOrDie(dir + "/z.jsonl.gz");
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 64; ++i) gz[i] = char(gz[i] ^ 0x5a);
  SplitMix64 rng(7);  // 2 MB of stored bytes past the damage, beyond the first read
  for (int i = 0; i < (2 << 20); ++i) gz.push_back(char(rng.Below(256)));
  WriteFileOrDie(dir + "/z.jsonl.gz", gz);

  // The default fails at the first one, naming file:line and the reason.
  auto fail =
      Ft("pack --seq-len 32 --out " + Q(t / "f") + " --tokenizer " + Q(Model()) + " " + Q(dir));
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_TRUE(Contains(fail.output, "a.jsonl:2: not valid JSON")) << fail.output;
  EXPECT_TRUE(Contains(fail.output, "--on-bad-record=skip")) << fail.output;
  EXPECT_FALSE(Contains(fail.output, "SECRET")) << fail.output;

  auto r = Ft("pack --seq-len 32 --on-bad-record skip --out " + Q(t / "o") + " --tokenizer " +
              Q(Model()) + " " + Q(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string counts =
      "6 bad records skipped (invalid_utf8 1, malformed_json 2, missing_field 1, "
      "non_string_field 1, undecodable_compressed_block 1)";
  EXPECT_TRUE(Contains(r.output, counts + ", see ")) << r.output;
  EXPECT_FALSE(Contains(r.output, "SECRET")) << r.output;
  const std::string listed = ReadFileOrDie(t / "o/bad-records.jsonl");
  EXPECT_FALSE(Contains(listed, "SECRET")) << listed;
  std::istringstream lines(listed);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  ASSERT_EQ(got.size(), 6u) << listed;
  const std::string a = "{\"file\":\"" + dir + "/a.jsonl\",\"line\":";
  EXPECT_EQ(got[0], a + "2,\"reason\":\"malformed_json\"}");
  EXPECT_EQ(got[1], a + "3,\"reason\":\"missing_field\"}");
  EXPECT_EQ(got[2], "{\"detail\":\"number\",\"file\":\"" + dir +
                        "/a.jsonl\",\"line\":4,\"reason\":\"non_string_field\"}");
  EXPECT_EQ(got[3], "{\"detail\":\"byte 15\",\"file\":\"" + dir +
                        "/a.jsonl\",\"line\":5,\"reason\":\"invalid_utf8\"}");
  EXPECT_EQ(got[4], "{\"detail\":\"array\",\"file\":\"" + dir +
                        "/a.jsonl\",\"line\":6,\"reason\":\"malformed_json\"}");
  EXPECT_TRUE(Contains(got[5], "z.jsonl.gz\",\"line\":")) << got[5];
  EXPECT_TRUE(Contains(got[5], "\"reason\":\"undecodable_compressed_block\"")) << got[5];
  const std::string index = ReadFileOrDie(t / "o/index.json");
  for (const char* c : {"\"invalid_utf8\": 1", "\"malformed_json\": 2", "\"missing_field\": 1",
                        "\"non_string_field\": 1", "\"undecodable_compressed_block\": 1"}) {
    EXPECT_TRUE(Contains(index, c)) << c << " in\n" << index;
  }
  // The whole stored gzip file is hashed even though its tail could not be decoded.
  EXPECT_TRUE(Contains(index, "\"bytes\": " + std::to_string(gz.size()))) << index;
  auto in = Ft("data inspect " + Q(t / "o"));
  ASSERT_EQ(in.exit_code, 0) << in.output;
  EXPECT_TRUE(Contains(in.output, counts)) << in.output;
}

TEST_F(DataCliTest, ExistingDatasetNeedsForce) {
  TempDir t;
  auto r = Ft(PackArgs(t / "o") + Q(Corpus() + "/a.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Ft(PackArgs(t / "o") + Q(Corpus() + "/a.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "already holds a packed dataset")) << r.output;
  r = Ft(PackArgs(t / "o") + "--force " + Q(Corpus() + "/a.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

std::string BatchesArgs(const std::string& src, int rank, int world, int steps) {
  return "data batches " + Q(src) + " --seed 11 --micro-batch 3 --window-chunks 3 --dp-rank " +
         std::to_string(rank) + " --dp-size " + std::to_string(world) + " --steps " +
         std::to_string(steps);
}

TEST_F(DataCliTest, CursorInANewProcessGivesTheSameNextBatches) {
  TempDir t;
  auto ref = Ft(BatchesArgs(Packed(), 1, 2, 160));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  std::vector<std::string> want = BatchLines(ref.output);
  ASSERT_EQ(want.size(), 160u);
  for (int k : {0, 1, 2, 5, 9, 23, 57, 100, 140}) {
    const std::string cursor = t / ("cursor" + std::to_string(k));
    auto a = Ft(BatchesArgs(Packed(), 1, 2, k) + " --cursor-out " + Q(cursor));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = Ft(BatchesArgs(Packed(), 1, 2, 20) + " --cursor-in " + Q(cursor));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    std::vector<std::string> got = BatchLines(b.output);
    ASSERT_EQ(got, std::vector<std::string>(want.begin() + k, want.begin() + k + 20)) << "k=" << k;
  }
}

TEST_F(DataCliTest, RemapFourRanksToTwoAcrossProcesses) {
  TempDir t;
  auto info = Ft("data inspect " + Q(Packed()));
  ASSERT_EQ(info.exit_code, 0);
  uint64_t rows = std::stoull(info.output.substr(info.output.find("rows:") + 5));
  std::map<uint64_t, int> seen;
  auto collect = [&](const std::string& out) {
    for (const auto& line : BatchLines(out)) {
      std::istringstream in(line.substr(line.find(" rows ") + 6));
      std::string tok;
      while (in >> tok && tok != "sum") {
        if (tok.rfind("0:", 0) == 0) ++seen[std::stoull(tok.substr(2))];
      }
    }
  };
  const int k = 37;
  for (int r = 0; r < 4; ++r) {
    auto a = Ft(BatchesArgs(Packed(), r, 4, k) + " --cursor-out " + Q(t / "c"));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    collect(a.output);
  }
  const int steps = int((rows - uint64_t(k) * 12 + 5) / 6);
  for (int r = 0; r < 2; ++r) {
    auto b = Ft(BatchesArgs(Packed(), r, 2, steps) + " --cursor-in " + Q(t / "c"));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_TRUE(Contains(b.output, "dp_size 4 -> 2")) << b.output;
    EXPECT_TRUE(Contains(b.output, "no sample of the epoch is skipped or repeated")) << b.output;
    collect(b.output);
  }
  EXPECT_EQ(seen.size(), rows);
  for (const auto& [sample, n] : seen) ASSERT_EQ(n, 1) << "sample " << sample;
}

// A private nginx serving `root` on a free loopback port; stopped (by PID) in the destructor.
class Nginx {
 public:
  explicit Nginx(const std::string& root) : dir_() {
    port_ = ::ftrain::testing::FreePort();
    const std::string d = dir_.path();
    std::string conf =
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid " + d +
        "/nginx.pid;\nerror_log " + d +
        "/error.log;\nevents { worker_connections 64; }\n"
        "http {\n  access_log " +
        d + "/access.log;\n  client_body_temp_path " + d + "/b;\n  proxy_temp_path " + d +
        "/p;\n  fastcgi_temp_path " + d + "/f;\n  uwsgi_temp_path " + d + "/u;\n  scgi_temp_path " +
        d + "/s;\n  default_type application/octet-stream;\n  server {\n    listen 127.0.0.1:" +
        std::to_string(port_) + ";\n    root " + root + ";\n  }\n}\n";
    WriteFileOrDie(d + "/nginx.conf", conf);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("nginx", "nginx", "-e", (d + "/error.log").c_str(), "-p", d.c_str(), "-c",
               (d + "/nginx.conf").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 100 && !Up(); ++i) ::usleep(50 * 1000);
  }
  ~Nginx() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  bool Up() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port_));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string error_log() const { return ReadFileOrDie(dir_.path() + "/error.log"); }

 private:
  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(DataCliTest, HttpSourceThroughNginxEqualsTheDirectoryByteForByte) {
  if (RunCommand("command -v nginx", 10).exit_code != 0) {
    GTEST_SKIP() << "nginx is not installed (scripts/install-deps.sh installs nginx-light)";
  }
  Nginx nginx(tmp_->path());
  ASSERT_TRUE(nginx.Up()) << "nginx did not start:\n" << nginx.error_log();
  const std::string url = nginx.url() + "/packed";
  for (int world : {1, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      auto file = Ft(BatchesArgs(Packed(), rank, world, 60) + " --tokens");
      auto http = Ft(BatchesArgs(url, rank, world, 60) + " --tokens");
      ASSERT_EQ(file.exit_code, 0) << file.output;
      ASSERT_EQ(http.exit_code, 0) << http.output;
      EXPECT_EQ(BatchLines(http.output), BatchLines(file.output))
          << "rank " << rank << "/" << world;
    }
  }
  auto v = Ft("data verify " + Q(url));
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_TRUE(Contains(v.output, "verify: OK")) << v.output;
  auto i = Ft("data inspect " + Q(url));
  EXPECT_EQ(i.exit_code, 0) << i.output;
  // A truncated shard behind nginx: verify names its URL and size.
  ASSERT_EQ(RunCommand("rm -rf " + Q(tmp_->path() + "/broken") + " && cp -r " + Q(Packed()) + " " +
                           Q(tmp_->path() + "/broken") + " && truncate -s 5000 " +
                           Q(tmp_->path() + "/broken/shard-000002.bin"),
                       10)
                .exit_code,
            0);
  auto broken = Ft("data verify " + Q(nginx.url() + "/broken"));
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  EXPECT_TRUE(Contains(broken.output, nginx.url() + "/broken/shard-000002.bin bytes=4096-"))
      << broken.output;
  EXPECT_TRUE(Contains(broken.output, "the file is 5000 bytes long")) << broken.output;
  auto missing = Ft("data verify " + Q(nginx.url() + "/nothing-here"));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(Contains(missing.output, nginx.url() + "/nothing-here/index.json: HTTP 404"))
      << missing.output;
}

}  // namespace
}  // namespace ftrain::data
