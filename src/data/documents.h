// Documents from input files, as pieces of text for the tokenizer. A plain-text file is one
// document (cut into pieces of whole lines, ~64 KiB each, so huge files stream); each line of a
// JSON Lines file is one document (the string field --text-field). Every line is checked to be
// UTF-8; errors name file:line and the byte. Pieces carry whether a BOS goes before them and
// an EOS after them. Single-threaded; the packer runs it on its reader thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/index.h"
#include "data/input.h"

namespace ftrain::data {

struct DocOptions {
  std::string text_field = "text";
  bool skip_invalid_utf8 = false;  // drop bad lines (counted, first few logged) instead of failing
  bool log_skipped = true;
  size_t max_piece_bytes = 64 << 10;
};

struct Piece {
  std::string text;
  bool bos = false;  // the first piece of a document
  bool eos = false;  // the last piece of a document
};

class DocumentReader {
 public:
  DocumentReader(std::vector<InputFile> files, DocOptions opts);
  ~DocumentReader();

  // The next piece; false after the last one.
  StatusOr<bool> Next(Piece* piece);

  // Stored bytes consumed so far over all files (progress).
  uint64_t raw_bytes_done() const;
  // Files fully read so far, with hashes of their stored bytes.
  const std::vector<InputEntry>& finished_inputs() const { return finished_; }
  const PackStats& stats() const { return stats_; }

 private:
  Status OpenNext(bool* any);
  StatusOr<bool> NextText(Piece* piece);
  StatusOr<bool> NextJson(Piece* piece);
  bool Emit(Piece* piece, bool eos);
  Status CheckUtf8(const std::string& line, bool* skip);
  void FinishFile();

  std::vector<InputFile> files_;
  DocOptions opts_;
  size_t file_index_ = 0;
  std::unique_ptr<InputStream> stream_;
  std::unique_ptr<LineReader> lines_;
  bool doc_started_ = false;  // text files: a piece with bos was emitted
  bool text_eof_ = false;     // text files: the last piece was emitted
  bool file_done_ = true;
  uint64_t raw_done_ = 0;  // stored bytes of finished files
  std::vector<InputEntry> finished_;
  PackStats stats_;
  std::string line_;
};

}  // namespace ftrain::data
