// Documents from input files, as pieces of text for the tokenizer. A plain-text file is one
// document (cut into pieces of whole lines, ~64 KiB each, so huge files stream); each line of a
// JSON Lines file is one document (the string field --text-field). Every line is checked to be
// UTF-8; errors name file:line and the byte. Pieces carry whether a BOS goes before them and
// an EOS after them. A bad record (malformed JSON, a missing or non-string field, invalid
// UTF-8, an undecodable compressed block) fails the read naming file:line and the reason, or
// with skip_bad_records is counted by reason and listed (file, line, reason; never the text);
// an undecodable block drops the rest of its file. Single-threaded: the packer's reader thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/format/index.h"
#include "data/pack/file_slice.h"
#include "data/pack/input_files.h"

namespace ftrain::data {

// The reasons a record is bad, as counted in index.json and written to bad-records.jsonl.
inline constexpr char kBadJson[] = "malformed_json";  // not JSON, or not a JSON object
inline constexpr char kBadMissingField[] = "missing_field";
inline constexpr char kBadNonStringField[] = "non_string_field";
inline constexpr char kBadUtf8[] = "invalid_utf8";
inline constexpr char kBadCompressed[] = "undecodable_compressed_block";

struct BadRecord {
  std::string file;
  uint64_t line = 0;  // 1-based; for a compressed block, the line being read when it failed
  std::string reason;
  std::string detail;  // a byte offset or a JSON type: never text from the record
};

struct DocOptions {
  std::string text_field = "text";
  bool skip_bad_records = false;   // --on-bad-record=skip: count and list instead of failing
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
  // slices[i], when given, is the part of files[i] to read (ftrain pack --part).
  DocumentReader(std::vector<InputFile> files, DocOptions opts, std::vector<FileSlice> slices = {});
  ~DocumentReader();

  // The next piece; false after the last one.
  StatusOr<bool> Next(Piece* piece);

  // Stored bytes consumed so far over all files (progress).
  uint64_t raw_bytes_done() const;
  // Files fully read so far, with hashes of their stored bytes.
  const std::vector<InputEntry>& finished_inputs() const { return finished_; }
  const PackStats& stats() const { return stats_; }
  // Skipped records in input order (the first kMaxListedBadRecords; stats() counts them all).
  const std::vector<BadRecord>& bad_records() const { return bad_; }
  static constexpr size_t kMaxListedBadRecords = 1000000;

 private:
  Status OpenNext(bool* any);
  StatusOr<bool> NextText(Piece* piece);
  StatusOr<bool> NextJson(Piece* piece);
  bool Emit(Piece* piece, bool eos);
  Status CheckUtf8(const std::string& line, bool* skip);
  StatusOr<bool> ReadLine();
  // Fails with `message` (fail mode) or records the record as skipped.
  Status BadRecordOr(const char* reason, uint64_t line, const std::string& detail,
                     const std::string& message);
  void FinishFile();

  std::vector<InputFile> files_;
  DocOptions opts_;
  std::vector<FileSlice> slices_;
  size_t file_index_ = 0;
  std::unique_ptr<InputStream> stream_;
  std::unique_ptr<LineReader> lines_;
  bool doc_started_ = false;  // text files: a piece with bos was emitted
  bool text_eof_ = false;     // text files: the last piece was emitted
  bool file_done_ = true;
  uint64_t raw_done_ = 0;  // stored bytes of finished files
  std::vector<InputEntry> finished_;
  PackStats stats_;
  std::vector<BadRecord> bad_;
  std::string line_;
};

}  // namespace ftrain::data
