// DocumentReader: plain text and JSON Lines into tokenizer pieces.
#include "data/documents.h"

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "data/utf8.h"

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

DocumentReader::DocumentReader(std::vector<InputFile> files, DocOptions opts)
    : files_(std::move(files)), opts_(std::move(opts)) {}
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
  FT_ASSIGN_OR_RETURN(stream_, InputStream::Open(files_[file_index_]));
  lines_ = std::make_unique<LineReader>(stream_.get());
  doc_started_ = false;
  text_eof_ = false;
  file_done_ = false;
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
  if (!opts_.skip_invalid_utf8) {
    return Status::Corruption(where + "; fix or drop the input, or pass --skip-invalid-utf8");
  }
  if (++stats_.skipped_invalid_lines <= 5 && opts_.log_skipped) {
    FT_LOG(Warning) << where << "; line skipped";
  }
  *skip = true;
  return Status::Ok();
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
    FT_ASSIGN_OR_RETURN(bool more, lines_->Next(&line_));
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
    FT_ASSIGN_OR_RETURN(bool more, lines_->Next(&line_));
    if (!more) return false;
    bool skip = false;
    FT_RETURN_IF_ERROR(CheckUtf8(line_, &skip));
    if (skip) continue;
    if (AllSpace(line_)) continue;
    const std::string where = path + ":" + std::to_string(lines_->line_number());
    nlohmann::json j = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return Status::Corruption(where + ": not valid JSON (JSON Lines needs one object per line)");
    }
    if (!j.is_object()) {
      return Status::Corruption(where + ": expected a JSON object, got " +
                                std::string(JsonTypeName(j)));
    }
    auto it = j.find(opts_.text_field);
    if (it == j.end()) {
      return Status::Corruption(where + ": no field '" + opts_.text_field +
                                "' (pick the field with --text-field)");
    }
    if (!it->is_string()) {
      return Status::Corruption(where + ": field '" + opts_.text_field + "' is " +
                                JsonTypeName(*it) + ", not a string");
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
