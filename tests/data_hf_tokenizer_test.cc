// Hugging Face tokenizer.json against the real `tokenizers` (0.23, FTRAIN_HF_PYTHONPATH): the
// oracle script trains byte-level (GPT-2 with Digits, Llama 3 with ignore_merges, Qwen2.5 with
// NFC) and SentencePiece-style (Llama 2 Prepend+Replace, Metaspace "first") BPE tokenizers and
// encodes held-out multilingual documents; ftrain's ids, its packed stream and its decoding
// must equal them. Unsupported components are refused with one line and exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "data/format/hash.h"
#include "data/pack/pack.h"
#include "data/read/dataset.h"
#include "data/tokenize/tokenizer.h"
#include "data_test_util.h"
#include "test_util.h"

namespace ftrain::data {
namespace {

using ::ftrain::testing::Contains;
using ::ftrain::testing::RunCommand;
using ::ftrain::testing::TempDir;
using testing::ReadFileOrDie;
using json = nlohmann::json;

class HfTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("ftrain-hftok");
    auto r = RunCommand(std::string("PYTHONPATH=") + FTRAIN_HF_PYTHONPATH + " /usr/bin/python3 " +
                            FTRAIN_SOURCE_DIR + "/tests/hf_tokenizer_oracle.py " + dir_->path() +
                            " 2>&1",
                        300);
    ASSERT_EQ(r.exit_code, 0) << "the tokenizers oracle failed (is tokenizers in "
                              << FTRAIN_HF_PYTHONPATH << "? scripts/install-deps.sh)\n"
                              << r.output;
    expected_ = new json(json::parse(ReadFileOrDie(*dir_ / "expected.json")));
    std::string line;
    docs_ = new std::vector<std::string>;
    std::string all = ReadFileOrDie(*dir_ / "heldout.jsonl");
    for (size_t at = 0, nl; (nl = all.find('\n', at)) != std::string::npos; at = nl + 1) {
      docs_->push_back(json::parse(all.substr(at, nl - at))["text"].get<std::string>());
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete expected_;
    delete docs_;
  }

  static TempDir* dir_;
  static json* expected_;
  static std::vector<std::string>* docs_;
};

TempDir* HfTokenizerTest::dir_ = nullptr;
json* HfTokenizerTest::expected_ = nullptr;
std::vector<std::string>* HfTokenizerTest::docs_ = nullptr;

std::string Show(const std::vector<int>& v, size_t from) {
  std::string s;
  for (size_t i = from; i < v.size() && i < from + 12; ++i) s += std::to_string(v[i]) + " ";
  return s;
}

TEST_P(HfTokenizerTest, EncodeEqualsTokenizersOnHeldOutText) {
  const json& e = (*expected_)[GetParam()];
  auto tok = Tokenizer::Load(*dir_ / GetParam(), Env::Default());  // the model directory
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_STREQ((*tok)->type(), "huggingface");
  EXPECT_EQ((*tok)->bos_id(), e["bos"].get<int>());
  EXPECT_EQ((*tok)->eos_id(), e["eos"].get<int>());
  EXPECT_EQ((*tok)->vocab_size(), e["vocab_size"].get<int>());
  ASSERT_EQ(docs_->size(), e["ids"].size());
  for (size_t d = 0; d < docs_->size(); ++d) {
    std::vector<int> got;
    ASSERT_TRUE((*tok)->Encode((*docs_)[d], &got).ok());
    const auto want = e["ids"][d].get<std::vector<int>>();
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    EXPECT_EQ(got, want) << GetParam() << " document " << d << " ('" << (*docs_)[d]
                         << "') differs at token " << i << ": ftrain " << Show(got, i)
                         << "| tokenizers " << Show(want, i);
    auto text = (*tok)->Decode(want);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, e["decoded"][d].get<std::string>()) << GetParam() << " document " << d;
  }
}

// The packed stream is BOS? ids EOS? per document, in order, cut into rows of L+1 tokens.
TEST_P(HfTokenizerTest, PackedStreamEqualsTokenizersPerDocument) {
  const json& e = (*expected_)[GetParam()];
  TempDir out("ftrain-hfpack");
  PackOptions o;
  o.env = Env::Default();
  o.inputs = {*dir_ / "heldout.jsonl"};
  o.out_dir = out.path();
  o.tokenizer_path = *dir_ / (GetParam() + "/tokenizer.json");
  o.seq_len = 7;
  o.shard_rows = 16;
  o.chunk_rows = 4;
  o.threads = 2;
  o.progress = ProgressMeter::Mode::kNone;
  auto r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<uint32_t> want;
  for (size_t d = 0; d < docs_->size(); ++d) {
    const auto& ids = e["ids"][d];
    // The packer skips documents of nothing but ASCII whitespace (stats.skipped_empty_documents).
    if ((*docs_)[d].find_first_not_of(" \t\n\r\f\v") == std::string::npos) continue;
    if (e["bos"].get<int>() >= 0) want.push_back(e["bos"].get<uint32_t>());
    for (int id : ids) want.push_back(uint32_t(id));
    if (e["eos"].get<int>() >= 0) want.push_back(e["eos"].get<uint32_t>());
  }
  auto ds = Dataset::Open(out.path(), Env::Default(), {});
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const DatasetIndex& x = (*ds)->index();
  EXPECT_EQ(x.tokenizer_type, "huggingface");
  EXPECT_EQ(x.tokenizer_file, "tokenizer.json");
  EXPECT_EQ(x.tokenizer_config_file, "tokenizer_config.json");
  const std::string stored = ReadFileOrDie(out / "tokenizer.json");
  EXPECT_EQ(stored, ReadFileOrDie(*dir_ / (GetParam() + "/tokenizer.json")));
  EXPECT_EQ(x.tokenizer_xxh3, Hash64(stored.data(), stored.size()));
  EXPECT_EQ(x.stats.stream_tokens, want.size());
  std::vector<uint32_t> got;
  std::vector<uint8_t> chunk;
  for (uint64_t c = 0; c < (*ds)->num_chunks(); ++c) {
    ASSERT_TRUE((*ds)->ReadChunk(c, &chunk).ok());
    for (size_t row = 0; row * x.row_bytes() < chunk.size(); ++row) {
      for (uint64_t t = got.empty() ? 0 : 1; t < x.row_tokens(); ++t) {  // rows overlap by one
        const uint8_t* p = chunk.data() + row * x.row_bytes() + t * x.token_bytes;
        got.push_back(x.token_bytes == 2 ? uint32_t(p[0] | p[1] << 8)
                                         : uint32_t(p[0] | p[1] << 8 | p[2] << 16 | p[3] << 24));
      }
    }
  }
  ASSERT_EQ(got.size(), x.num_rows * x.seq_len + 1);
  EXPECT_LT(want.size() - got.size(), x.row_tokens());
  want.resize(got.size());
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Kinds, HfTokenizerTest,
                         ::testing::Values("gpt2", "llama3", "qwen", "llama2", "metaspace"));

class HfTokenizerCliTest : public HfTokenizerTest {};

TEST_F(HfTokenizerCliTest, UnsupportedComponentsAreOneLineAndExit2) {
  const std::pair<const char*, const char*> cases[] = {
      {"unsupported-wordpiece", "model type 'WordPiece' is not supported"},
      {"unsupported-unigram", "model type 'Unigram' is not supported"},
      {"unsupported-lowercase", "normalizer 'Lowercase' is not supported"},
  };
  for (const auto& [name, msg] : cases) {
    TempDir out("ftrain-hfbad");
    auto r = RunCommand(::ftrain::testing::Ftrain() + " pack --progress none --seq-len 8 --out " +
                            out.path() + " --tokenizer " + *dir_ / name + " " +
                            *dir_ / "heldout.jsonl 2>&1",
                        120);
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.output;
    EXPECT_TRUE(Contains(r.output, msg)) << name << ": " << r.output;
    EXPECT_TRUE(Contains(r.output, std::string(name) + "/tokenizer.json")) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

// A model directory with both files: tokenizer.json (what transformers loads) wins.
TEST_F(HfTokenizerCliTest, ModelDirectoryPrefersTokenizerJsonAndSpecialStringsBecomeSpecialIds) {
  TempDir t("ftrain-hfdir");
  ASSERT_EQ(RunCommand("cp " + *dir_ / "gpt2/tokenizer.json" + " " +
                           *dir_ / "gpt2/tokenizer_config.json " + t.path() + " && printf x > " +
                           t / "tokenizer.model",
                       10)
                .exit_code,
            0);
  auto tok = Tokenizer::Load(t.path(), Env::Default());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_STREQ((*tok)->type(), "huggingface");
  // "<|endoftext|>" written inside a document is the special token, as in tokenizers' encode.
  std::vector<int> ids;
  ASSERT_TRUE((*tok)->Encode("a <|endoftext|> b", &ids).ok());
  EXPECT_NE(std::find(ids.begin(), ids.end(), (*tok)->eos_id()), ids.end());
  auto missing = Tokenizer::Load(*dir_ / "unsupported-none", Env::Default());
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
}

TEST_F(HfTokenizerCliTest, PackAndInspectDecodeWithTheStoredTokenizerJson) {
  TempDir out("ftrain-hfcli");
  auto r = RunCommand(::ftrain::testing::Ftrain() + " pack --progress none --seq-len 200 --out " +
                          out.path() + " --tokenizer " + *dir_ / "llama3" + " " +
                          *dir_ / "heldout.jsonl 2>&1",
                      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto index = json::parse(ReadFileOrDie(out / "index.json"));
  EXPECT_EQ(index["tokenizer"]["type"], "huggingface") << index.dump(2);
  EXPECT_EQ(index["tokenizer"]["file"], "tokenizer.json");
  EXPECT_EQ(index["tokenizer"]["config_file"], "tokenizer_config.json");
  auto in = RunCommand(
      ::ftrain::testing::Ftrain() + " data inspect " + out.path() + " --row 0 --chars 100000 2>&1",
      120);
  ASSERT_EQ(in.exit_code, 0) << in.output;
  EXPECT_TRUE(Contains(in.output, "tokenizer:     tokenizer.json vocab 1202, bos 1200, eos 1201"))
      << in.output;
  auto v = RunCommand(::ftrain::testing::Ftrain() + " data verify " + out.path() + " --tokenizer " +
                          *dir_ / "llama3" + " 2>&1",
                      120);
  EXPECT_EQ(v.exit_code, 0) << v.output;  // a model directory names its tokenizer.json
  EXPECT_TRUE(Contains(v.output, "verify: OK")) << v.output;
  // The first document, decoded by ftrain from the stored tokenizer.json.
  EXPECT_TRUE(Contains(in.output, (*docs_)[0] + (*docs_)[1])) << in.output;
}

}  // namespace
}  // namespace ftrain::data
