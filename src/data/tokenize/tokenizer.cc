// Tokenizer::Load and the SentencePiece 0.1.9x implementation. Training a SentencePiece model
// is the packer's (data/pack/train_tokenizer.cc).
#include "data/tokenize/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>

#include "core/env.h"
#include "core/log.h"
#include "data/format/format.h"
#include "data/format/hash.h"
#include "data/tokenize/hf_tokenizer.h"

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

// A tokenizer named but not readable is not there to use (NotFound: exit 1).
StatusOr<std::string> ReadWhole(const std::string& path, const std::string& what, Env* env) {
  std::string bytes;
  Status s = env->ReadFile(path, &bytes);
  if (!s.ok()) return Status::NotFound("cannot read the " + what + ": " + s.message());
  return bytes;
}

bool LooksLikeJson(const std::string& bytes) {
  size_t i = bytes.find_first_not_of(" \t\r\n");
  return i != std::string::npos && bytes[i] == '{';
}

}  // namespace

StatusOr<std::string> ResolveTokenizerFile(const std::string& path, Env* env) {
  if (!env->IsDirectory(path)) return path;
  for (const char* name : {kHfTokenizerFileName, kTokenizerFileName}) {
    if (env->IsRegularFile(path + "/" + name)) return path + "/" + name;
  }
  return Status::NotFound(path + ": the directory holds neither " + kHfTokenizerFileName + " nor " +
                          kTokenizerFileName + "; give the tokenizer file itself");
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path, Env* env) {
  FT_ASSIGN_OR_RETURN(std::string file, ResolveTokenizerFile(path, env));
  size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
  FT_ASSIGN_OR_RETURN(std::string bytes, ReadWhole(file, "tokenizer", env));
  std::string config;
  if (LooksLikeJson(bytes) && env->IsRegularFile(dir + "/" + kHfTokenizerConfigFileName)) {
    FT_ASSIGN_OR_RETURN(config,
                        ReadWhole(dir + "/" + kHfTokenizerConfigFileName, "tokenizer config", env));
  }
  return FromBytes(std::move(bytes), file, std::move(config));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBytes(std::string model,
                                                          const std::string& where,
                                                          std::string config) {
  if (LooksLikeJson(model)) return LoadHfTokenizer(std::move(model), where, std::move(config));
  return SentencePieceTokenizer::Make(std::move(model), where);
}

}  // namespace ftrain::data
