// Input scanning and decompressing readers (zlib for gzip, libzstd for zstd).
#include "data/pack/input_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/strings.h"
#include "data/format/hash.h"

namespace ftrain::data {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The name without a compression suffix, and its extension ("" when none).
std::string StripCompression(const std::string& name, Compression* c) {
  std::string lower = Lower(name);
  *c = Compression::kNone;
  for (const auto& [suffix, kind] : {std::pair<const char*, Compression>{".gz", Compression::kGzip},
                                     {".zst", Compression::kZstd},
                                     {".zstd", Compression::kZstd}}) {
    if (EndsWith(lower, suffix)) {
      *c = kind;
      return lower.substr(0, lower.size() - std::strlen(suffix));
    }
  }
  return lower;
}

std::string Extension(const std::string& base) {
  size_t slash = base.rfind('/');
  std::string name = slash == std::string::npos ? base : base.substr(slash + 1);
  size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? "" : name.substr(dot + 1);
}

}  // namespace

bool LooksLikeText(const std::string& name) {
  static const std::set<std::string> kText = {"txt", "text",  "md",     "markdown",
                                              "rst", "jsonl", "ndjson", ""};
  Compression c;
  return kText.count(Extension(StripCompression(name, &c))) > 0;
}

namespace {

Status AddFile(const std::string& path, const struct stat& st, InputScan* scan) {
  InputFile f;
  f.path = path;
  f.bytes = static_cast<uint64_t>(st.st_size);
  ClassifyName(path, &f.format, &f.compression);
  scan->total_bytes += f.bytes;
  scan->files.push_back(std::move(f));
  return Status::Ok();
}

Status Walk(const std::string& dir, InputScan* scan) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::IOError("open directory " + dir + ": " + std::strerror(errno));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;  // ".", "..", hidden files and directories
    names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());  // byte order: the same on every machine
  for (const auto& name : names) {
    std::string path = dir + "/" + name;
    struct stat lst, st;
    if (::lstat(path.c_str(), &lst) != 0 || ::stat(path.c_str(), &st) != 0) {
      continue;  // vanished or a dangling symlink: nothing to read
    }
    if (S_ISDIR(st.st_mode)) {
      if (S_ISLNK(lst.st_mode)) continue;  // symlinked directories could loop
      FT_RETURN_IF_ERROR(Walk(path, scan));
    } else if (S_ISREG(st.st_mode)) {
      if (LooksLikeText(name)) {
        FT_RETURN_IF_ERROR(AddFile(path, st, scan));
      } else {
        Compression c;
        std::string ext = Extension(StripCompression(name, &c));
        ++scan->skipped["." + ext];
      }
    }
  }
  return Status::Ok();
}

class FdInput : public RawInput {
 public:
  FdInput(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FdInput() override { ::close(fd_); }
  StatusOr<size_t> Read(char* buf, size_t cap) override {
    for (;;) {
      ssize_t n = ::read(fd_, buf, cap);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return Status::IOError("read " + path_ + " at offset " + std::to_string(offset_) + ": " +
                               std::strerror(errno));
      }
      offset_ += static_cast<uint64_t>(n);
      return static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  std::string path_;
  uint64_t offset_ = 0;
};

class PlainStream : public InputStream {
 public:
  PlainStream(std::unique_ptr<RawInput> in, std::string path)
      : in_file_(std::move(in)), path_(std::move(path)) {}
  StatusOr<size_t> Read(char* buf, size_t cap) override {
    FT_ASSIGN_OR_RETURN(size_t n, in_file_->Read(buf, cap));
    hash_.Update(buf, n);
    raw_ += static_cast<uint64_t>(n);
    return n;
  }
  uint64_t raw_bytes() const override { return raw_; }
  uint64_t raw_xxh3() const override { return hash_.Digest(); }
  Status DrainRaw() override {
    std::vector<char> buf(1 << 20);
    for (;;) {
      FT_ASSIGN_OR_RETURN(size_t n, PlainStream::Read(buf.data(), buf.size()));
      if (n == 0) return Status::Ok();
    }
  }

 protected:
  std::unique_ptr<RawInput> in_file_;
  std::string path_;
  uint64_t raw_ = 0;
  Hash64Stream hash_;
};

// Shared loop of the two decompressors: refill stored bytes, inflate into the caller's buffer.
class CompressedStream : public PlainStream {
 public:
  using PlainStream::PlainStream;
  StatusOr<size_t> Read(char* buf, size_t cap) override {
    for (;;) {
      if (in_pos_ == in_.size() && !in_eof_) {
        in_.resize(1 << 20);
        FT_ASSIGN_OR_RETURN(size_t n, PlainStream::Read(in_.data(), in_.size()));
        in_.resize(n);
        in_pos_ = 0;
        if (n == 0) in_eof_ = true;
      }
      size_t produced = 0;
      FT_RETURN_IF_ERROR(Inflate(buf, cap, &produced));
      if (produced > 0) return produced;
      if (in_eof_ && in_pos_ == in_.size()) {
        if (!at_frame_end_ && !flushed_once_) {
          flushed_once_ = true;  // one more call may flush output the decoder still holds
          continue;
        }
        if (!at_frame_end_) {
          return Status::Corruption(path_ + ": compressed stream ends early (truncated file, " +
                                    std::to_string(raw_) + " bytes)");
        }
        return size_t{0};
      }
    }
  }

 protected:
  virtual Status Inflate(char* out, size_t cap, size_t* produced) = 0;
  std::vector<char> in_;
  size_t in_pos_ = 0;
  bool in_eof_ = false;
  bool at_frame_end_ = true;  // no partial frame/member pending
  bool flushed_once_ = false;
};

class GzipStream : public CompressedStream {
 public:
  GzipStream(std::unique_ptr<RawInput> in, std::string path)
      : CompressedStream(std::move(in), std::move(path)) {
    std::memset(&z_, 0, sizeof(z_));
    inflateInit2(&z_, 15 + 32);  // gzip or zlib header, auto-detected
  }
  ~GzipStream() override { inflateEnd(&z_); }

 protected:
  Status Inflate(char* out, size_t cap, size_t* produced) override {
    if (in_pos_ == in_.size() && at_frame_end_) return Status::Ok();
    const size_t before = in_pos_;
    z_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
    z_.avail_in = static_cast<uInt>(in_.size() - in_pos_);
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(cap, 1u << 30));
    int rc = inflate(&z_, Z_NO_FLUSH);
    in_pos_ = in_.size() - z_.avail_in;
    *produced = static_cast<size_t>(reinterpret_cast<char*>(z_.next_out) - out);
    if (rc == Z_STREAM_END) {
      at_frame_end_ = true;
      inflateReset(&z_);  // concatenated gzip members continue
    } else if (*produced > 0 || in_pos_ > before) {
      at_frame_end_ = false;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR && rc != Z_STREAM_END) {
      return Status::Corruption(path_ + ": gzip data error near stored byte " +
                                std::to_string(raw_ - (in_.size() - in_pos_)) + ": " +
                                (z_.msg ? z_.msg : "unknown"));
    }
    return Status::Ok();
  }

 private:
  z_stream z_;
};

class ZstdStream : public CompressedStream {
 public:
  ZstdStream(std::unique_ptr<RawInput> in, std::string path)
      : CompressedStream(std::move(in), std::move(path)), z_(ZSTD_createDStream()) {
    ZSTD_initDStream(z_);
  }
  ~ZstdStream() override { ZSTD_freeDStream(z_); }

 protected:
  Status Inflate(char* out, size_t cap, size_t* produced) override {
    if (in_pos_ == in_.size() && at_frame_end_) return Status::Ok();
    ZSTD_inBuffer in = {in_.data(), in_.size(), in_pos_};
    ZSTD_outBuffer o = {out, cap, 0};
    size_t rc = ZSTD_decompressStream(z_, &o, &in);
    in_pos_ = in.pos;
    *produced = o.pos;
    if (ZSTD_isError(rc)) {
      return Status::Corruption(path_ + ": zstd data error near stored byte " +
                                std::to_string(raw_ - (in_.size() - in_pos_)) + ": " +
                                ZSTD_getErrorName(rc));
    }
    at_frame_end_ = rc == 0;
    return Status::Ok();
  }

 private:
  ZSTD_DStream* z_;
};

}  // namespace

void ClassifyName(const std::string& name, InputFormat* format, Compression* compression) {
  std::string ext = Extension(StripCompression(name, compression));
  *format = (ext == "jsonl" || ext == "ndjson" || ext == "json") ? InputFormat::kJsonl
                                                                 : InputFormat::kText;
}

Status ScanInputs(const std::vector<std::string>& args, InputScan* scan) {
  if (args.empty()) return Status::InvalidArgument("no inputs: give files or directories");
  for (const auto& arg : args) {
    if (arg.rfind("s3://", 0) == 0) {
      FT_RETURN_IF_ERROR(ScanS3Input(arg, scan));
      continue;
    }
    struct stat st;
    if (::stat(arg.c_str(), &st) != 0) {
      return Status::NotFound(arg + ": no such file or directory");
    }
    if (S_ISDIR(st.st_mode)) {
      size_t before = scan->files.size();
      InputScan sub;
      FT_RETURN_IF_ERROR(Walk(arg, &sub));
      for (auto& f : sub.files) scan->files.push_back(std::move(f));
      scan->total_bytes += sub.total_bytes;
      for (const auto& [ext, n] : sub.skipped) scan->skipped[ext] += n;
      if (scan->files.size() == before) {
        std::string what;
        for (const auto& [ext, n] : sub.skipped) {
          what += (what.empty() ? "" : ", ") + std::to_string(n) + " " + ext;
        }
        return Status::NotFound(arg + ": directory holds no text files" +
                                (what.empty() ? std::string(" (it is empty)")
                                              : " (skipped by name: " + what +
                                                    "; name such files explicitly to pack them)"));
      }
    } else if (S_ISREG(st.st_mode)) {
      FT_RETURN_IF_ERROR(AddFile(arg, st, scan));
    } else {
      return Status::InvalidArgument(arg + ": not a regular file or directory");
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<InputStream>> InputStream::Open(const InputFile& file) {
  std::unique_ptr<RawInput> in;
  if (file.path.rfind("s3://", 0) == 0) {
    FT_ASSIGN_OR_RETURN(in, OpenS3Input(file));
  } else {
    int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::NotFound(file.path + ": no such file");
      return Status::IOError("open " + file.path + ": " + std::strerror(errno));
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint; failure changes nothing
    in = std::make_unique<FdInput>(fd, file.path);
  }
  switch (file.compression) {
    case Compression::kGzip:
      return std::unique_ptr<InputStream>(new GzipStream(std::move(in), file.path));
    case Compression::kZstd:
      return std::unique_ptr<InputStream>(new ZstdStream(std::move(in), file.path));
    case Compression::kNone:
      break;
  }
  return std::unique_ptr<InputStream>(new PlainStream(std::move(in), file.path));
}

StatusOr<bool> LineReader::Next(std::string* line) {
  for (;;) {
    size_t nl = buf_.find('\n', std::max(pos_, searched_));
    if (nl != std::string::npos || (eof_ && pos_ < buf_.size())) {
      size_t end = nl == std::string::npos ? buf_.size() : nl;
      line->assign(buf_, pos_, end - pos_);
      if (!line->empty() && line->back() == '\r') line->pop_back();
      line_start_ = consumed_ + pos_;
      ++line_no_;
      pos_ = nl == std::string::npos ? buf_.size() : nl + 1;
      return true;
    }
    if (eof_) return false;
    // Keep the partial line, read more.
    consumed_ += pos_;
    buf_.erase(0, pos_);
    pos_ = 0;
    searched_ = buf_.size();  // no '\n' in what is left
    size_t old = buf_.size();
    buf_.resize(old + (1 << 20));
    FT_ASSIGN_OR_RETURN(size_t n, in_->Read(&buf_[old], 1 << 20));
    buf_.resize(old + n);
    if (n == 0) eof_ = true;
  }
}

}  // namespace ftrain::data
