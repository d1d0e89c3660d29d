// DocumentReader: plain text and JSON Lines into tokenizer pieces.
#include "data/pack/documents.h"

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "data/pack/utf8.h"

namespace ftrain::data {
namespace {

bool AllSpace(const std::string& s) {
  for (unsigned char c : s) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') return false;
  }
  return true;
}

const char* JsonTypeName(const nlohmann::json& v) { return v.type_name(); }

}  // namespace

DocumentReader::DocumentReader(std::vector<InputFile> files, DocOptions opts,
                               std::vector<FileSlice> slices)
    : files_(std::move(files)), opts_(std::move(opts)), slices_(std::move(slices)) {}
DocumentReader::~DocumentReader() = default;

uint64_t DocumentReader::raw_bytes_done() const {
  return raw_done_ + (stream_ ? stream_->raw_bytes() : 0);
}

void DocumentReader::FinishFile() {
  InputEntry e;
  e.path = files_[file_index_].path;
  e.bytes = stream_->raw_bytes();
  e.xxh3 = stream_->raw_xxh3();
  raw_done_ += e.bytes;
  finished_.push_back(e);
  lines_.reset();
  stream_.reset();
  ++file_index_;
  file_done_ = true;
}

Status DocumentReader::OpenNext(bool* any) {
  *any = file_index_ < files_.size();
  if (!*any) return Status::Ok();
  const FileSlice slice = file_index_ < slices_.size() ? slices_[file_index_] : FileSlice();
  if (slice.whole()) {
    FT_ASSIGN_OR_RETURN(stream_, InputStream::Open(files_[file_index_]));
  } else {
    FT_ASSIGN_OR_RETURN(stream_, OpenFileSlice(files_[file_index_], slice));
  }
  lines_ = std::make_unique<LineReader>(stream_.get(), slice.begin, slice.lines_before);
  doc_started_ = false;
  text_eof_ = false;
  file_done_ = false;
  return Status::Ok();
}

Status DocumentReader::BadRecordOr(const char* reason, uint64_t line, const std::string& detail,
                                   const std::string& message) {
  if (!opts_.skip_bad_records) {
    return Status::Corruption(message + "; fix or drop the input, or pass --on-bad-record=skip");
  }
  const uint64_t n = ++stats_.bad_records[reason];
  if (bad_.size() < kMaxListedBadRecords) {
    bad_.push_back({files_[file_index_].path, line, reason, detail});
  }
  if (n <= 3 && opts_.log_skipped) FT_LOG(Warning) << message << "; skipped (" << reason << ")";
  return Status::Ok();
}

Status DocumentReader::CheckUtf8(const std::string& line, bool* skip) {
  *skip = false;
  size_t bad = 0;
  const size_t skip_bom =
      (lines_->line_number() == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) ? 3 : 0;
  if (ValidUtf8(line.data() + skip_bom, line.size() - skip_bom, &bad)) return Status::Ok();
  bad += skip_bom;
  const std::string where = files_[file_index_].path + ":" + std::to_string(lines_->line_number()) +
                            ": invalid UTF-8 at byte " + std::to_string(bad + 1) +
                            " of the line (byte offset " +
                            std::to_string(lines_->line_offset() + bad) +
                            (files_[file_index_].compression == Compression::kNone
                                 ? std::string(" in the file)")
                                 : std::string(" in the decompressed stream)"));
  *skip = true;
  if (opts_.skip_invalid_utf8 && !opts_.skip_bad_records) {
    if (++stats_.skipped_invalid_lines <= 5 && opts_.log_skipped) {
      FT_LOG(Warning) << where << "; line skipped";
    }
    return Status::Ok();
  }
  FT_RETURN_IF_ERROR(
      BadRecordOr(kBadUtf8, lines_->line_number(), "byte " + std::to_string(bad + 1), where));
  ++stats_.skipped_invalid_lines;
  return Status::Ok();
}

// The next line; a compressed stream that cannot be decoded is a bad record: the rest of the
// file is dropped (false: the end of this file) when skipping.
StatusOr<bool> DocumentReader::ReadLine() {
  StatusOr<bool> more = lines_->Next(&line_);
  if (more.ok() || !more.status().IsCorruption() ||
      files_[file_index_].compression == Compression::kNone) {
    return more;
  }
  const uint64_t line = lines_->line_number() + 1;
  FT_RETURN_IF_ERROR(BadRecordOr(kBadCompressed, line, "",
                                 files_[file_index_].path + ":" + std::to_string(line) +
                                     ": undecodable compressed data (" + more.status().message() +
                                     "); the rest of the file is unreadable"));
  FT_RETURN_IF_ERROR(stream_->DrainRaw());  // the stored bytes still go into the input's hash
  return false;
}

StatusOr<bool> DocumentReader::Next(Piece* piece) {
  for (;;) {
    if (file_done_) {
      bool any = false;
      FT_RETURN_IF_ERROR(OpenNext(&any));
      if (!any) return false;
    }
    StatusOr<bool> got =
        files_[file_index_].format == InputFormat::kJsonl ? NextJson(piece) : NextText(piece);
    if (!got.ok() || *got) return got;
    FinishFile();
  }
}

bool DocumentReader::Emit(Piece* piece, bool eos) {
  piece->bos = !doc_started_;
  piece->eos = eos;
  if (piece->bos) ++stats_.documents;
  doc_started_ = true;
  stats_.text_bytes += piece->text.size();
  return true;
}

StatusOr<bool> DocumentReader::NextText(Piece* piece) {
  if (text_eof_) return false;
  piece->text.clear();
  for (;;) {
    FT_ASSIGN_OR_RETURN(bool more, ReadLine());
    if (!more) {
      text_eof_ = true;  // the next call reports the end of this file
      if (!doc_started_ && AllSpace(piece->text)) {
        ++stats_.skipped_empty_documents;
        return false;
      }
      return Emit(piece, /*eos=*/true);
    }
    bool skip = false;
    FT_RETURN_IF_ERROR(CheckUtf8(line_, &skip));
    if (skip) continue;
    if (lines_->line_number() == 1 && line_.rfind("\xEF\xBB\xBF", 0) == 0) line_.erase(0, 3);
    piece->text += line_;
    piece->text += '\n';
    if (piece->text.size() >= opts_.max_piece_bytes) {
      if (!doc_started_ && AllSpace(piece->text)) {
        piece->text.clear();  // leading blank lines carry nothing
        continue;
      }
      return Emit(piece, /*eos=*/false);
    }
  }
}

StatusOr<bool> DocumentReader::NextJson(Piece* piece) {
  const std::string& path = files_[file_index_].path;
  for (;;) {
    FT_ASSIGN_OR_RETURN(bool more, ReadLine());
    if (!more) return false;
    bool skip = false;
    FT_RETURN_IF_ERROR(CheckUtf8(line_, &skip));
    if (skip) continue;
    if (AllSpace(line_)) continue;
    const uint64_t no = lines_->line_number();
    const std::string where = path + ":" + std::to_string(no);
    nlohmann::json j = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      FT_RETURN_IF_ERROR(BadRecordOr(
          kBadJson, no, "", where + ": not valid JSON (JSON Lines needs one object per line)"));
      continue;
    }
    if (!j.is_object()) {
      FT_RETURN_IF_ERROR(
          BadRecordOr(kBadJson, no, JsonTypeName(j),
                      where + ": expected a JSON object, got " + std::string(JsonTypeName(j))));
      continue;
    }
    auto it = j.find(opts_.text_field);
    if (it == j.end()) {
      FT_RETURN_IF_ERROR(BadRecordOr(
          kBadMissingField, no, "",
          where + ": no field '" + opts_.text_field + "' (pick the field with --text-field)"));
      continue;
    }
    if (!it->is_string()) {
      FT_RETURN_IF_ERROR(BadRecordOr(
          kBadNonStringField, no, JsonTypeName(*it),
          where + ": field '" + opts_.text_field + "' is " + JsonTypeName(*it) + ", not a string"));
      continue;
    }
    piece->text = it->get<std::string>();
    if (AllSpace(piece->text)) {
      ++stats_.skipped_empty_documents;
      continue;
    }
    piece->bos = piece->eos = true;
    ++stats_.documents;
    stats_.text_bytes += piece->text.size();
    return true;
  }
}

}  // namespace ftrain::data
