// Input files for `ftrain pack`: expanding directories (recursively, sorted, so the order is
// reproducible), recognising formats by name, and reading a file as a decompressed byte stream
// (plain, .gz, .zst) split into lines, while hashing the stored bytes for index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace ftrain::data {

enum class InputFormat { kText, kJsonl };
enum class Compression { kNone, kGzip, kZstd };

struct InputFile {
  std::string path;
  uint64_t bytes = 0;  // as stored
  InputFormat format = InputFormat::kText;
  Compression compression = Compression::kNone;
};

struct InputScan {
  std::vector<InputFile> files;
  uint64_t total_bytes = 0;
  std::map<std::string, uint64_t> skipped;  // extension -> files skipped under directories
};

// s3://bucket/prefix arguments are listed by data/s3_input.cc (ScanS3Input below).
// Files named explicitly are always taken (.jsonl/.ndjson/.json[.gz|.zst] as JSON Lines, any
// other name as plain text). Under a directory only names that look like text are taken:
// .txt .text .md .markdown .rst .jsonl .ndjson, files without an extension, and those with
// .gz/.zst added; hidden entries and symlinked directories are skipped. A directory that
// yields no file is an error naming it and what was skipped.
Status ScanInputs(const std::vector<std::string>& args, InputScan* scan);

// Format and compression from a file name.
void ClassifyName(const std::string& name, InputFormat* format, Compression* compression);
// Whether a file found under a directory (or an S3 prefix) is taken by its name.
bool LooksLikeText(const std::string& name);

// The stored bytes of one input, front to back: a local file, or an S3 object.
class RawInput {
 public:
  virtual ~RawInput() = default;
  // Up to cap bytes; 0 at the end. Errors name the file and the offset.
  virtual StatusOr<size_t> Read(char* buf, size_t cap) = 0;
};
// data/s3_input.cc: an s3:// argument as directory-like prefix (or one object), and an
// object's bytes by Range GETs.
Status ScanS3Input(const std::string& url, InputScan* scan);
StatusOr<std::unique_ptr<RawInput>> OpenS3Input(const InputFile& file);

// Decompressed bytes of one input file; hashes the stored bytes as it goes.
class InputStream {
 public:
  static StatusOr<std::unique_ptr<InputStream>> Open(const InputFile& file);
  virtual ~InputStream() = default;
  // Up to cap bytes; 0 at the end. Errors name the file and the stored byte offset.
  virtual StatusOr<size_t> Read(char* buf, size_t cap) = 0;
  // Stored (compressed) bytes consumed so far, and their XXH3-64 once the end was reached.
  virtual uint64_t raw_bytes() const = 0;
  virtual uint64_t raw_xxh3() const = 0;
  // Reads the remaining stored bytes into the hash without decoding them (after a decoding
  // error, so raw_xxh3() still covers the whole file).
  virtual Status DrainRaw() = 0;
};

// Lines (without the '\n', and without a trailing '\r') of an InputStream.
class LineReader {
 public:
  // first_offset and lines_before: where the stream starts in its file (a FileSlice).
  explicit LineReader(InputStream* in, uint64_t first_offset = 0, uint64_t lines_before = 0)
      : in_(in), consumed_(first_offset), line_no_(lines_before) {}
  // False at the end of the stream.
  StatusOr<bool> Next(std::string* line);
  uint64_t line_number() const { return line_no_; }     // 1-based number of the last line
  uint64_t line_offset() const { return line_start_; }  // decompressed offset of its first byte

 private:
  InputStream* in_;
  std::string buf_;
  size_t pos_ = 0;
  size_t searched_ = 0;  // buf_[pos_, searched_) holds no '\n'
  bool eof_ = false;
  uint64_t consumed_ = 0;  // decompressed bytes before buf_[0]
  uint64_t line_no_ = 0;
  uint64_t line_start_ = 0;
};

}  // namespace ftrain::data
