// Tokenizer::Load and the SentencePiece 0.1.9x implementation; training through
// SentencePieceTrainer with our own sentence iterator so the sample is ours (deterministic) and
// nothing is written to disk.
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "core/log.h"
#include "data/format.h"
#include "data/hash.h"
#include "data/hf_tokenizer.h"
#include "data/verify.h"

namespace ftrain::data {

namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer() : sp_(new sentencepiece::SentencePieceProcessor) {}

  static StatusOr<std::unique_ptr<Tokenizer>> Make(std::string model, const std::string& where) {
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer);
    auto st = t->sp_->LoadFromSerializedProto(model);
    if (!st.ok()) {
      return Status::Corruption(where + ": not a SentencePiece model: " + st.ToString());
    }
    t->xxh3_ = Hash64(model.data(), model.size());
    t->bytes_ = std::move(model);
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  Status Encode(std::string_view text, std::vector<int>* ids) const override {
    auto st = sp_->Encode(text, ids);
    if (!st.ok()) return Status::Internal("SentencePiece Encode failed: " + st.ToString());
    return Status::Ok();
  }

  StatusOr<std::string> Decode(const std::vector<int>& ids) const override {
    std::string out;
    std::vector<int> valid;
    for (int id : ids) {
      if (id >= 0 && id < vocab_size()) valid.push_back(id);
    }
    auto st = sp_->Decode(valid, &out);
    if (!st.ok()) return Status::Internal("SentencePiece Decode failed: " + st.ToString());
    return out;
  }

  int vocab_size() const override { return sp_->GetPieceSize(); }
  int bos_id() const override { return sp_->bos_id(); }
  int eos_id() const override { return sp_->eos_id(); }
  const char* type() const override { return "sentencepiece"; }
  const char* file_name() const override { return kTokenizerFileName; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

StatusOr<std::string> ReadWhole(const std::string& path, const std::string& what) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::NotFound(path + ": cannot open the " + what + ": " + std::strerror(errno));
  }
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) return Status::IOError("read " + path + " failed");
  return bytes;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool LooksLikeJson(const std::string& bytes) {
  size_t i = bytes.find_first_not_of(" \t\r\n");
  return i != std::string::npos && bytes[i] == '{';
}

}  // namespace

StatusOr<std::string> ResolveTokenizerFile(const std::string& path) {
  if (!IsDir(path)) return path;
  for (const char* name : {kHfTokenizerFileName, kTokenizerFileName}) {
    if (IsFile(path + "/" + name)) return path + "/" + name;
  }
  return Status::NotFound(path + ": the directory holds neither " + kHfTokenizerFileName + " nor " +
                          kTokenizerFileName + "; give the tokenizer file itself");
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  FT_ASSIGN_OR_RETURN(std::string file, ResolveTokenizerFile(path));
  size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
  FT_ASSIGN_OR_RETURN(std::string bytes, ReadWhole(file, "tokenizer"));
  std::string config;
  if (LooksLikeJson(bytes) && IsFile(dir + "/" + kHfTokenizerConfigFileName)) {
    FT_ASSIGN_OR_RETURN(config,
                        ReadWhole(dir + "/" + kHfTokenizerConfigFileName, "tokenizer config"));
  }
  return FromBytes(std::move(bytes), file, std::move(config));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBytes(std::string model,
                                                          const std::string& where,
                                                          std::string config) {
  if (LooksLikeJson(model)) return LoadHfTokenizer(std::move(model), where, std::move(config));
  return SentencePieceTokenizer::Make(std::move(model), where);
}

namespace {

// Feeds a prepared vector of sentences to the trainer.
class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>* v) : v_(v) {}
  bool done() const override { return i_ >= v_->size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return (*v_)[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>* v_;
  size_t i_ = 0;
};

constexpr size_t kMaxSentenceBytes = 4096;

}  // namespace

StatusOr<std::string> TrainTokenizer(const InputScan& inputs, const TrainTokenizerOptions& opts) {
  // Estimate the text size (compressed inputs count 4x) to sample lines evenly over all of it.
  double estimate = 0;
  for (const auto& f : inputs.files) {
    estimate += double(f.bytes) * (f.compression == Compression::kNone ? 1.0 : 4.0);
  }
  const double rate = estimate <= double(opts.sample_bytes) ? 1.0 : opts.sample_bytes / estimate;
  const uint64_t threshold = rate >= 1.0 ? UINT64_MAX : uint64_t(rate * 18446744073709551615.0);
  std::vector<std::string> sentences;
  uint64_t sampled = 0, line_no = 0;
  DocumentReader docs(inputs.files, opts.docs);
  Piece piece;
  while (sampled < opts.sample_bytes * 5 / 4) {
    FT_ASSIGN_OR_RETURN(bool more, docs.Next(&piece));
    if (!more) break;
    size_t start = 0;
    while (start < piece.text.size()) {
      size_t nl = piece.text.find('\n', start);
      if (nl == std::string::npos) nl = piece.text.size();
      std::string_view line(piece.text.data() + start, nl - start);
      start = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      if (MixSeed(line_no++, 0x544f4b) > threshold) continue;
      if (line.size() > kMaxSentenceBytes) {
        // Cut at a character boundary (never inside a UTF-8 sequence).
        size_t cut = kMaxSentenceBytes;
        while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
        line = line.substr(0, cut);
      }
      sentences.emplace_back(line);
      sampled += line.size();
    }
  }
  if (sentences.empty()) return Status::NotFound("no text in the inputs to train a tokenizer on");
  FT_LOG(Info) << "pack: training a " << opts.model_type << " SentencePiece tokenizer, vocab "
               << opts.vocab_size << ", on " << sentences.size() << " lines (" << sampled / 1e6
               << " MB sampled from ~" << estimate / 1e6 << " MB)";
  std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(opts.vocab_size)},
      {"model_type", opts.model_type},
      {"num_threads", std::to_string(std::max(1, opts.threads))},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes + 16)},
      {"character_coverage", "0.9995"},
      {"byte_fallback", opts.vocab_size >= 1024 ? "true" : "false"},
      {"minloglevel", "1"},
  };
  VectorIterator it(&sentences);
  std::string model;
  auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  if (!st.ok()) {
    return Status::InvalidArgument("tokenizer training failed: " + st.ToString() +
                                   " (with little text, use a smaller --vocab-size)");
  }
  return model;
}

}  // namespace ftrain::data
