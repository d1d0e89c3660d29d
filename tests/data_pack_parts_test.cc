// `ftrain pack --part I/N` and `ftrain pack merge` as users run them (real build/bin/ftrain,
// real processes, a real SIGKILL): the merged dataset equals a single pack byte for byte for
// N = 1, 2, 3, 5 (a JSON Lines file split across parts, a line longer than a part's range,
// bad records skipped in several parts, plain-text and compressed files whole); the merge
// refuses mixed, missing, repeated and unfinished parts; a killed part restarts cleanly and a
// finished one is kept.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
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

// ftrain-data itself (`ftrain` pack and data commands exec it: Ft).
CommandResult Fd(const std::string& args, int timeout_s = 120) {
  return RunCommand(::ftrain::testing::BinDir() + "/ftrain-data " + args, timeout_s);
}

// Deterministic pseudo-text: invented words, some non-ASCII, a line break now and then.
std::string Words(uint64_t seed, int n) {
  static const char* kSyl[] = {"ka",  "to", "ri", "men", "sa",  "lo",  "ve",  "dan", "mi",  "qu",
                               "ber", "ni", "zo", "ta",  "pel", "gru", "ché", "für", "дом", "日"};
  SplitMix64 rng(seed);
  std::string out;
  for (int i = 0; i < n; ++i) {
    for (uint64_t k = 0, len = 1 + rng.Below(3); k < len; ++k) out += kSyl[rng.Below(20)];
    out += (i % 11 == 10) ? ".\n" : " ";
  }
  return out;
}

std::string JsonDoc(const std::string& text) {
  std::string esc;
  for (char c : text) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
  return "{\"text\": \"" + esc + "\"}\n";
}

// A JSON Lines file of n documents with a bad record every `bad_every` lines (several
// reasons), a blank line, and no newline after the last record.
std::string Jsonl(uint64_t seed, int n, int bad_every) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (bad_every > 0 && i % bad_every == bad_every - 1) {
      static const char* kBad[] = {"{oops\n", "{\"body\": \"x\"}\n", "{\"text\": 5}\n",
                                   "{\"text\": \"bad \xFF\"}\n", "\n"};
      s += kBad[(i / bad_every) % 5];
      continue;
    }
    s += JsonDoc(Words(seed + i, 20 + int((seed + i) % 40)));
  }
  s.pop_back();
  return s;
}

class PackPartsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir;
    const std::string c = Corpus();
    ASSERT_EQ(RunCommand("mkdir -p " + Q(c + "/sub"), 10).exit_code, 0);
    WriteFileOrDie(c + "/a.txt", Words(1, 30000));  // ~190 KB: several 64 KiB pieces
    WriteFileOrDie(c + "/big.jsonl", Jsonl(100, 3000, 37));
    WriteFileOrDie(c + "/long.jsonl", JsonDoc(Words(5, 40000)) + JsonDoc(Words(6, 30)));
    WriteFileOrDie(c + "/sub/c.jsonl", Jsonl(9000, 400, 0));
    WriteFileOrDie(c + "/sub/d.jsonl", Jsonl(7000, 500, 23));
    WriteFileOrDie(c + "/sub/empty.jsonl", "");
    ASSERT_EQ(RunCommand("gzip -n " + Q(c + "/sub/c.jsonl"), 10).exit_code, 0);
    auto r =
        Fd("pack --train-tokenizer --vocab-size 200 --tokenizer-sample-mb 0.3 --seq-len 32 "
           "--on-bad-record skip --out " +
           Q(tmp_->path() + "/tok") + " " + Q(c));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = Fd(Args(Single()) + Q(c));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete tmp_; }

  static std::string Corpus() { return tmp_->path() + "/corpus"; }
  static std::string Single() { return tmp_->path() + "/single"; }
  static std::string Args(const std::string& out, int seq_len = 32,
                          const std::string& on_bad = "skip") {
    return "pack --tokenizer " + Q(tmp_->path() + "/tok/tokenizer.model") + " --seq-len " +
           std::to_string(seq_len) + " --shard-rows 300 --chunk-rows 20 --on-bad-record " + on_bad +
           " --progress none --out " + Q(out) + " ";
  }
  // Packs every part of N into dir/pN-I; returns the part directories.
  static std::vector<std::string> PackParts(const std::string& dir, int n) {
    std::vector<std::string> parts;
    for (int i = 0; i < n; ++i) {
      const std::string p = dir + "/p" + std::to_string(n) + "-" + std::to_string(i);
      auto r =
          Fd(Args(p) + "--part " + std::to_string(i) + "/" + std::to_string(n) + " " + Q(Corpus()));
      EXPECT_EQ(r.exit_code, 0) << r.output;
      parts.push_back(p);
    }
    return parts;
  }
  static std::string Join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += Q(x) + " ";
    return s;
  }

  static TempDir* tmp_;
};
TempDir* PackPartsTest::tmp_ = nullptr;

TEST_F(PackPartsTest, MergedPartsEqualASinglePackForAnyN) {
  const auto want = DirContents(Single());
  ASSERT_TRUE(want.count("index.json") && want.count("bad-records.jsonl"));
  ASSERT_GE(want.size(), 6u) << "several shards expected";
  TempDir t;
  for (int n : {1, 2, 3, 5}) {
    const std::vector<std::string> parts = PackParts(t.path(), n);
    // Reversed on the command line: the merge orders them by part.json. N=2 through `ftrain`.
    const std::string merge = "pack merge " + Q(t / ("m" + std::to_string(n))) + " " +
                              Join(std::vector<std::string>(parts.rbegin(), parts.rend()));
    auto r = n == 2 ? Ft(merge) : Fd(merge);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(Contains(r.output, "bad records skipped")) << r.output;
    const auto got = DirContents(t / ("m" + std::to_string(n)));
    EXPECT_TRUE(got == want) << "N=" << n << " differs from the single pack";
    if (got.count("index.json")) {
      EXPECT_EQ(got.at("index.json"), want.at("index.json"));
    }
  }
  // N=3 really split big.jsonl: each part read some of it, one part records its hash, and
  // several parts skipped bad records.
  int with_tokens = 0, with_big = 0, with_bad = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string m = ReadFileOrDie(t / ("p3-" + std::to_string(i)) + "/part.json");
    with_big += Contains(m, "big.jsonl") ? 1 : 0;
    with_tokens += Contains(m, "\"tokens\": 0,") ? 0 : 1;
    with_bad +=
        ::access((t / ("p3-" + std::to_string(i)) + "/bad-records.jsonl").c_str(), F_OK) == 0;
  }
  EXPECT_EQ(with_big, 1);
  EXPECT_EQ(with_tokens, 3);
  EXPECT_GE(with_bad, 2);
}

TEST_F(PackPartsTest, MergeRefusesMixedMissingRepeatedAndUnfinishedParts) {
  TempDir t;
  const std::vector<std::string> p = PackParts(t.path(), 3);
  auto refuse = [&](const std::string& parts, const std::string& message) {
    auto r = Fd("pack merge " + Q(t / "out") + " " + parts);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(Contains(r.output, message)) << "want '" << message << "' in: " << r.output;
    EXPECT_FALSE(::access((t / "out/index.json").c_str(), F_OK) == 0);
  };
  refuse(Join({p[0], p[2]}), "part 1/3 is missing: give all 3 part directories");
  refuse(Join(p) + Q(p[1]), "part 1/3 is given twice");
  auto r = Fd(Args(t / "two") + "--part 1/2 " + Q(Corpus()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  refuse(Join(p) + Q(t / "two"), "(part counts differ)");
  r = Fd(Args(t / "seq", 16) + "--part 1/3 " + Q(Corpus()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  refuse(Join({p[0], t / "seq", p[2]}), "(--seq-len values differ)");
  r = Fd(Args(t / "less") + "--part 1/3 " + Q(Corpus() + "/sub") + " " + Q(Corpus() + "/a.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  refuse(Join({p[0], t / "less", p[2]}), "(inputs or options differ)");
  ASSERT_EQ(::rename((p[1] + "/part.json").c_str(), (t / "saved.json").c_str()), 0);
  refuse(Join(p), p[1] + ": no part.json: the part is unfinished");
  ASSERT_EQ(::rename((t / "saved.json").c_str(), (p[1] + "/part.json").c_str()), 0);
  // A damaged token stream: bad data (exit 1), and no index.json.
  std::string tokens = ReadFileOrDie(p[1] + "/tokens.bin");
  tokens[tokens.size() / 2] ^= 1;
  WriteFileOrDie(p[1] + "/tokens.bin", tokens);
  r = Fd("pack merge " + Q(t / "out") + " " + Join(p));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, p[1] + "/tokens.bin does not match its part.json")) << r.output;
  EXPECT_FALSE(::access((t / "out/index.json").c_str(), F_OK) == 0);
  // Rerunning the damaged part packs it again (its check fails), then the merge succeeds.
  r = Fd(Args(p[1]) + "--part 1/3 " + Q(Corpus()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packing the part again")) << r.output;
  r = Fd("pack merge " + Q(t / "out") + " " + Join(p));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ReadFileOrDie(t / "out/index.json"), ReadFileOrDie(Single() + "/index.json"));
  // --on-bad-record=fail in a part that starts inside big.jsonl names the file's own line: one
  // of those the single pack listed, not the first.
  r = Fd(Args(t / "failing", 32, "fail") + "--part 1/3 " + Q(Corpus()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const size_t at = r.output.find("big.jsonl:");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at + 10, r.output.find(':', at + 10) - at - 10);
  EXPECT_GT(std::stoul(line), 37u) << r.output;
  EXPECT_TRUE(Contains(ReadFileOrDie(Single() + "/bad-records.jsonl"),
                       "big.jsonl\",\"line\":" + line + ","))
      << "line " << line;
  EXPECT_NE(::access((t / "failing/part.json").c_str(), F_OK), 0);
  r = Fd(Args(t / "x") + "--part 3/3 " + Q(Corpus()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "need 0 <= I < N")) << r.output;
}

// SIGKILL while a part is half written: nothing looks finished, the merge refuses it, a rerun
// packs it from scratch, and a rerun after that keeps the finished part untouched.
TEST_F(PackPartsTest, KilledPartRestartsCleanlyAndAFinishedPartIsKept) {
  TempDir t;
  const std::string in = t / "in";
  ASSERT_EQ(::mkdir(in.c_str(), 0755), 0);
  WriteFileOrDie(in + "/one.jsonl", Jsonl(1, 24000, 0));  // ~5 MB: seconds on one thread
  const std::string part = t / "part0";
  const std::string args = Args(part) + "--threads 1 --part 0/2 " + Q(in);
  const std::string log = t / "killed.log";
  pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd =
        "exec " + ::ftrain::testing::BinDir() + "/ftrain-data " + args + " >" + Q(log) + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Killed once it has written tokens and is still tokenizing (WIFSIGNALED proves the latter).
  struct stat st;
  bool started = false;
  for (int i = 0; i < 5000 && !started; ++i) {
    started = ::stat((part + "/tokens.bin.partial").c_str(), &st) == 0 && st.st_size > 0;
    if (!started) ::usleep(1000);
  }
  const int status = ::ftrain::testing::SignalAndReap(pid, SIGKILL);
  ASSERT_TRUE(started) << "the part never wrote tokens: " << ReadFileOrDie(log);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the part ended before the kill: " << ReadFileOrDie(log);
  EXPECT_NE(::access((part + "/part.json").c_str(), F_OK), 0);
  auto r = Fd("pack merge " + Q(t / "out") + " " + Q(part));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "the part is unfinished")) << r.output;

  r = Fd(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "packed part 0/2")) << r.output;
  EXPECT_NE(::access((part + "/tokens.bin.partial").c_str(), F_OK), 0);
  ASSERT_EQ(::stat((part + "/tokens.bin").c_str(), &st), 0);
  const auto inode = st.st_ino;
  const auto mtime = st.st_mtim;
  r = Ft(args);  // the array resubmitted (through `ftrain`): verified and kept
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "part 0/2 was already packed")) << r.output;
  ASSERT_EQ(::stat((part + "/tokens.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, inode);
  EXPECT_EQ(st.st_mtim.tv_nsec, mtime.tv_nsec);

  r = Fd(Args(t / "p1") + "--part 1/2 " + Q(in));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Fd("pack merge " + Q(t / "out") + " " + Q(part) + " " + Q(t / "p1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Fd(Args(t / "single") + Q(in));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(DirContents(t / "out") == DirContents(t / "single"));
}

}  // namespace
}  // namespace ftrain::data
