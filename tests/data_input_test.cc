// Unit tests of the packer's input side: strict UTF-8, documents and pieces from plain text
// and JSON Lines (BOS on the first piece of a document only, EOS on the last only), CRLF and
// BOM handling, and errors that name file:line.
#include <gtest/gtest.h>

#include <cerrno>

#include "core/env.h"
#include "data/format/format.h"
#include "data/pack/documents.h"
#include "data/pack/pack.h"
#include "data/pack/train_tokenizer.h"
#include "data/pack/utf8.h"
#include "data_test_util.h"
#include "test_util.h"

namespace ftrain::data {
namespace {

using ::ftrain::testing::TempDir;
using testing::WriteFileOrDie;

TEST(Utf8, AcceptsValidAndPinpointsTheFirstBadByte) {
  size_t bad = 0;
  for (const std::string& ok : {std::string(""), std::string("plain"), std::string("é ü 日本語 😀"),
                                std::string("\xF4\x8F\xBF\xBF")}) {
    EXPECT_TRUE(ValidUtf8(ok.data(), ok.size(), &bad)) << ok;
  }
  struct Case {
    std::string text;
    size_t at;
  } cases[] = {
      {"ab\xC3\x28", 2},        // bad continuation
      {"\xC0\xAF", 0},          // overlong '/'
      {"x\xE0\x80\xAF", 1},     // overlong 3-byte
      {"\xED\xA0\x80", 0},      // surrogate U+D800
      {"\xF4\x90\x80\x80", 0},  // above U+10FFFF
      {"ok\xE6\x97", 2},        // truncated at the end
      {"\xFF", 0},
  };
  for (const auto& c : cases) {
    EXPECT_FALSE(ValidUtf8(c.text.data(), c.text.size(), &bad));
    EXPECT_EQ(bad, c.at);
  }
}

std::vector<Piece> ReadAll(const std::vector<InputFile>& files, DocOptions opts, Status* s) {
  DocumentReader r(files, opts);
  std::vector<Piece> out;
  for (;;) {
    Piece p;
    auto more = r.Next(&p);
    if (!more.ok()) {
      *s = more.status();
      return out;
    }
    if (!*more) return out;
    out.push_back(p);
  }
}

InputFile File(const std::string& path) {
  InputFile f;
  f.path = path;
  ClassifyName(path, &f.format, &f.compression);
  return f;
}

TEST(Documents, LongTextFileIsOneDocumentInPieces) {
  TempDir t;
  std::string text = "\xEF\xBB\xBF";  // a BOM, dropped
  for (int i = 0; i < 5000; ++i) text += "line " + std::to_string(i) + " of a long document\r\n";
  WriteFileOrDie(t / "long.txt", text);
  WriteFileOrDie(t / "short.txt", "just one line");
  WriteFileOrDie(t / "blank.txt", "\n  \n");
  DocOptions o;
  o.max_piece_bytes = 16 << 10;
  Status s;
  auto pieces =
      ReadAll({File(t / "long.txt"), File(t / "blank.txt"), File(t / "short.txt")}, o, &s);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_GT(pieces.size(), 3u);
  EXPECT_TRUE(pieces.front().bos);
  EXPECT_EQ(pieces.front().text.rfind("line 0 of", 0), 0u);  // BOM gone
  std::string joined;
  for (size_t i = 0; i + 1 < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].bos, i == 0);
    EXPECT_EQ(pieces[i].eos, i + 2 == pieces.size());
    joined += pieces[i].text;
  }
  EXPECT_EQ(joined.find('\r'), std::string::npos);
  EXPECT_NE(joined.find("line 4999 of a long document\n"), std::string::npos);
  EXPECT_TRUE(pieces.back().bos && pieces.back().eos);
  EXPECT_EQ(pieces.back().text, "just one line\n");
}

TEST(Documents, JsonLinesTakeTheFieldAndNameBadLines) {
  TempDir t;
  WriteFileOrDie(t / "a.jsonl",
                 "{\"text\": \"one\", \"x\": 1}\n\n{\"body\": \"two\", \"text\": \"t\\u00e9\"}\n");
  Status s;
  auto pieces = ReadAll({File(t / "a.jsonl")}, DocOptions(), &s);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[1].text, "t\xC3\xA9");
  DocOptions o;
  o.text_field = "body";
  ReadAll({File(t / "a.jsonl")}, o, &s);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("a.jsonl:1: no field 'body'"), std::string::npos) << s.message();
}

TEST(Documents, InvalidLinesCanBeSkippedAndCounted) {
  TempDir t;
  WriteFileOrDie(t / "u.txt", "good\nbad \xFF\nalso good\n");
  DocOptions o;
  o.skip_invalid_utf8 = true;
  DocumentReader r({File(t / "u.txt")}, o);
  Piece p;
  ASSERT_TRUE(r.Next(&p).ok());
  EXPECT_EQ(p.text, "good\nalso good\n");
  EXPECT_EQ(r.stats().skipped_invalid_lines, 1u);
}

// Every write of a pack fails in turn (ENOSPC): the pack reports it, and a dataset never looks
// complete (index.json, written last, exists only when everything before it succeeded).
TEST(Pack, AFailedWriteNeverLeavesADatasetThatLooksComplete) {
  TempDir t;
  std::string text;
  for (uint64_t i = 0; i < 4000; ++i) {  // invented words: enough variety for the tokenizer
    for (uint64_t v = i * 7919 % 10007, k = 0; k < 6; ++k, v /= 5) text += char('a' + v % 13 + k);
    text += i % 9 == 8 ? ".\n" : " ";
  }
  WriteFileOrDie(t / "in.txt", text);
  InputScan scan;
  ASSERT_TRUE(ScanInputs({t / "in.txt"}, &scan).ok());
  TrainTokenizerOptions topt;
  topt.vocab_size = 150;
  auto model = TrainTokenizer(scan, topt);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  WriteFileOrDie(t / "tok.model", *model);

  PackOptions o;

  o.env = Env::Default();
  o.inputs = {t / "in.txt"};
  o.tokenizer_path = t / "tok.model";
  o.seq_len = 16;
  o.shard_rows = 300;
  o.chunk_rows = 50;
  o.threads = 2;
  o.progress = ProgressMeter::Mode::kNone;
  FaultInjectionEnv counting(Env::Default());
  o.env = &counting;
  o.out_dir = t / "ok";
  auto ok = Pack(o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const int64_t ops = counting.op_count();
  ASSERT_GT(ops, 8);
  for (int64_t n = 1; n <= ops; ++n) {
    FaultInjectionEnv faulty(Env::Default());
    faulty.FailAt(n, ENOSPC);
    o.env = &faulty;
    o.out_dir = t / ("fail" + std::to_string(n));
    auto r = Pack(o);
    ASSERT_FALSE(r.ok()) << "op " << n << " of " << ops;
    EXPECT_NE(r.status().message().find("injected fault at op " + std::to_string(n)),
              std::string::npos)
        << r.status().message();
    const bool indexed = Env::Default()->FileExists(o.out_dir + "/" + kIndexFileName);
    // Only the last op (the directory fsync after renaming index.json) comes after the commit.
    EXPECT_EQ(indexed, n == ops) << "op " << n << ": " << faulty.op_log().back();
  }
}

}  // namespace
}  // namespace ftrain::data
