// `ftrain pack --train-tokenizer`: trains a SentencePiece model on a deterministic sample of
// the packer's inputs, through SentencePieceTrainer with our own sentence iterator so the sample
// is ours and nothing is written to disk. Loading and running tokenizers is data/tokenize/.
#include "data/pack/train_tokenizer.h"

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <unordered_map>

#include "core/log.h"
#include "data/format/hash.h"

namespace ftrain::data {

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
