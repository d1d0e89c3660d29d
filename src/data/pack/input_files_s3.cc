// `ftrain pack` inputs in object storage: an s3:// argument is one object, or a prefix read
// like a directory (same name filter, same order), and an object is read front to back with
// Range GETs (8 MiB parts), the next part fetched while the current one is decoded.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <future>
#include <map>
#include <utility>

#include "data/pack/input_files.h"
#include "data/source/s3.h"

namespace ftrain::data {
namespace {

// Bytes per Range GET: 8 MiB, or FTRAIN_S3_PART_BYTES (>= 4 KiB) for stores with more latency.
uint64_t PartBytes() {
  static const uint64_t bytes = [] {
    const char* v = std::getenv("FTRAIN_S3_PART_BYTES");
    uint64_t b = v == nullptr ? 0 : std::strtoull(v, nullptr, 10);
    return b >= 4096 ? b : uint64_t{8} << 20;
  }();
  return bytes;
}

// The order of a directory walk (input_files.cc sorts each directory's names): keys compared
// path component by path component, so "a/b" comes before "a.txt" as it does on disk.
bool WalkOrder(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  for (;;) {
    size_t ei = a.find('/', i), ej = b.find('/', j);
    std::string ca = a.substr(i, ei == std::string::npos ? std::string::npos : ei - i);
    std::string cb = b.substr(j, ej == std::string::npos ? std::string::npos : ej - j);
    if (ca != cb) return ca < cb;
    if (ei == std::string::npos || ej == std::string::npos)
      return ei != ej && ei == std::string::npos;
    i = ei + 1;
    j = ej + 1;
  }
}

// Whether a key below the prefix is hidden (a component starts with '.'), as Walk skips them.
bool Hidden(const std::string& relative) {
  for (size_t i = 0; i < relative.size(); i = relative.find('/', i) + 1) {
    if (relative[i] == '.') return true;
    if (relative.find('/', i) == std::string::npos) break;
  }
  return false;
}

// How a skipped name is counted: its extension without a compression suffix, as Walk does.
std::string SkippedExtension(const std::string& relative) {
  std::string name = relative.substr(relative.rfind('/') + 1);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* c : {".gz", ".zst", ".zstd"}) {
    const std::string suffix = c;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      name.resize(name.size() - suffix.size());
      break;
    }
  }
  size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? "." : name.substr(dot);
}

void Add(const std::string& bucket, const S3Object& o, InputScan* scan) {
  InputFile f;
  f.path = "s3://" + bucket + "/" + o.key;
  f.bytes = o.size;
  ClassifyName(o.key, &f.format, &f.compression);
  scan->total_bytes += f.bytes;
  scan->files.push_back(std::move(f));
}

class S3Input : public RawInput {
 public:
  S3Input(S3Client* client, S3Url object, uint64_t size)
      : client_(client), object_(std::move(object)), size_(size) {}
  ~S3Input() override {
    if (next_.valid()) next_.wait();
  }

  StatusOr<size_t> Read(char* buf, size_t cap) override {
    if (pos_ == part_.size()) {
      if (!next_.valid()) {
        if (fetched_ >= size_) return size_t{0};
        Start();
      }
      std::pair<Status, std::string> got = next_.get();
      FT_RETURN_IF_ERROR(got.first);
      part_ = std::move(got.second);
      pos_ = 0;
      if (fetched_ < size_) Start();  // the next part comes while this one is consumed
    }
    size_t n = std::min(cap, part_.size() - pos_);
    std::copy(part_.data() + pos_, part_.data() + pos_ + n, buf);
    pos_ += n;
    return n;
  }

 private:
  void Start() {
    uint64_t off = fetched_, len = std::min<uint64_t>(PartBytes(), size_ - fetched_);
    fetched_ += len;
    next_ = std::async(std::launch::async, Fetch, client_, object_, off, len);
  }
  static std::pair<Status, std::string> Fetch(S3Client* c, S3Url u, uint64_t off, uint64_t len) {
    std::string out(len, '\0');
    Status s = c->GetRange(u, off, len, reinterpret_cast<uint8_t*>(out.data()));
    return {s, std::move(out)};
  }

  S3Client* client_;
  S3Url object_;
  uint64_t size_;
  uint64_t fetched_ = 0;  // bytes requested so far (in part_ or next_)
  std::string part_;
  size_t pos_ = 0;
  std::future<std::pair<Status, std::string>> next_;
};

}  // namespace

Status ScanS3Input(const std::string& url, InputScan* scan) {
  FT_ASSIGN_OR_RETURN(S3Url u, S3Url::Parse(url));
  FT_ASSIGN_OR_RETURN(S3Client * client, S3Client::Shared());
  if (!u.key.empty() && u.key.back() != '/') {
    // One object named exactly (any name is taken), else the prefix as a directory.
    FT_ASSIGN_OR_RETURN(auto first, client->List(u, /*first_page_only=*/true));
    if (!first.empty() && first.front().key == u.key) {
      Add(u.bucket, first.front(), scan);
      return Status::Ok();
    }
    u.key += "/";
  }
  FT_ASSIGN_OR_RETURN(std::vector<S3Object> objects, client->List(u));
  std::sort(objects.begin(), objects.end(),
            [](const S3Object& a, const S3Object& b) { return WalkOrder(a.key, b.key); });
  std::map<std::string, uint64_t> skipped;
  size_t taken = 0;
  for (const S3Object& o : objects) {
    const std::string rel = o.key.substr(u.key.size());
    if (rel.empty() || rel.back() == '/' || Hidden(rel)) continue;  // folder markers, dot files
    if (!LooksLikeText(rel)) {
      ++skipped[SkippedExtension(rel)];
      continue;
    }
    Add(u.bucket, o, scan);
    ++taken;
  }
  for (const auto& [ext, n] : skipped) scan->skipped[ext] += n;
  if (taken == 0) {
    std::string what;
    for (const auto& [ext, n] : skipped) {
      what += (what.empty() ? "" : ", ") + std::to_string(n) + " " + ext;
    }
    return Status::NotFound(url + ": no text objects under this prefix" +
                            (what.empty() ? std::string(" (it is empty)")
                                          : " (skipped by name: " + what +
                                                "; name such objects explicitly to pack them)"));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<RawInput>> OpenS3Input(const InputFile& file) {
  FT_ASSIGN_OR_RETURN(S3Url u, S3Url::Parse(file.path));
  FT_ASSIGN_OR_RETURN(S3Client * client, S3Client::Shared());
  return std::unique_ptr<RawInput>(new S3Input(client, std::move(u), file.bytes));
}

}  // namespace ftrain::data
