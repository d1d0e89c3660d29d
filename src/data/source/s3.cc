// S3 over libcurl: configuration from the environment, URLs (path-style for custom endpoints),
// SigV4 by libcurl, ListObjectsV2 with continuation tokens, and the Source over a bucket prefix.
#include "data/source/s3.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "core/strings.h"
#include "data/source/http_fetch.h"

namespace ftrain::data {
namespace {

// SHA-256 of the empty payload: every request here is a GET. S3 wants the hash in
// x-amz-content-sha256; libcurl puts the same value in the canonical request.
constexpr const char* kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// SigV4's URI encoding: unreserved characters stay, every other byte is %XX (upper case);
// '/' stays in object keys (S3 paths), not in query values.
std::string UriEncode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string XmlUnescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string::npos) {
      out += s[i];
      continue;
    }
    std::string ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      unsigned long cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                             ? std::strtoul(ent.c_str() + 2, nullptr, 16)
                             : std::strtoul(ent.c_str() + 1, nullptr, 10);
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// The text of the first <tag>...</tag> at or after *pos; advances *pos past it.
bool NextXml(const std::string& xml, const std::string& tag, size_t* pos, std::string* text) {
  size_t a = xml.find("<" + tag + ">", *pos);
  if (a == std::string::npos) return false;
  a += tag.size() + 2;
  size_t b = xml.find("</" + tag + ">", a);
  if (b == std::string::npos) return false;
  *text = xml.substr(a, b - a);
  *pos = b + tag.size() + 3;
  return true;
}

// The [profile] section of an AWS credentials file: key -> value.
StatusOr<std::map<std::string, std::string>> ReadProfile(const std::string& file,
                                                         const std::string& profile,
                                                         bool* file_exists) {
  std::ifstream in(file);
  *file_exists = static_cast<bool>(in);
  std::map<std::string, std::string> kv;
  if (!in) return kv;
  std::string line, section;
  bool found = false;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = Trim(line.substr(1, line.size() - 2));
      found = found || section == profile;
      continue;
    }
    size_t eq = line.find('=');
    if (section == profile && eq != std::string::npos) {
      kv[Trim(line.substr(0, eq))] = Trim(line.substr(eq + 1));
    }
  }
  if (!found) {
    return Status::InvalidArgument("AWS_PROFILE: no profile [" + profile + "] in " + file);
  }
  return kv;
}

Status LoadCredentials(S3Config* c) {
  c->access_key = Env("AWS_ACCESS_KEY_ID");
  c->secret_key = Env("AWS_SECRET_ACCESS_KEY");
  if (!c->access_key.empty() || !c->secret_key.empty()) {
    if (c->access_key.empty() || c->secret_key.empty()) {
      return Status::InvalidArgument(
          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (one is empty)");
    }
    c->session_token = Env("AWS_SESSION_TOKEN");
    c->credentials_from = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY";
    return Status::Ok();
  }
  std::string file = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) file = Env("HOME") + "/.aws/credentials";
  const std::string named = Env("AWS_PROFILE");
  const std::string profile = named.empty() ? "default" : named;
  bool exists = false;
  auto kv = ReadProfile(file, profile, &exists);
  if (!exists) {
    if (!named.empty()) {
      return Status::InvalidArgument("AWS_PROFILE=" + named + " but " + file + " does not exist");
    }
    return Status::Ok();  // no credentials: unsigned requests
  }
  if (!kv.ok()) {
    if (named.empty()) return Status::Ok();  // a file without [default]
    return kv.status();
  }
  c->access_key = (*kv)["aws_access_key_id"];
  c->secret_key = (*kv)["aws_secret_access_key"];
  c->session_token = (*kv)["aws_session_token"];
  if (c->access_key.empty() || c->secret_key.empty()) {
    return Status::InvalidArgument("profile [" + profile + "] in " + file +
                                   " lacks aws_access_key_id or aws_secret_access_key");
  }
  c->credentials_from = "profile [" + profile + "] in " + file;
  return Status::Ok();
}

}  // namespace

bool IsS3Url(const std::string& spec) { return spec.rfind("s3://", 0) == 0; }

StatusOr<S3Url> S3Url::Parse(const std::string& url) {
  if (!IsS3Url(url)) return Status::InvalidArgument(url + ": not an s3://bucket/key URL");
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  S3Url u;
  u.bucket = rest.substr(0, slash);
  u.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  bool ok = !u.bucket.empty();
  for (char c : u.bucket)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_');
  if (!ok) {
    return Status::InvalidArgument(url + ": bad bucket name '" + u.bucket +
                                   "' (expected s3://BUCKET/KEY)");
  }
  return u;
}

StatusOr<S3Config> S3Config::FromEnvironment() {
  S3Config c;
  FT_RETURN_IF_ERROR(LoadCredentials(&c));
  for (const char* v : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (!Env(v).empty()) {
      c.region = Env(v);
      break;
    }
  }
  for (const char* v : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    std::string e = Env(v);
    if (e.empty()) continue;
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0) {
      return Status::InvalidArgument(std::string(v) + "='" + e +
                                     "': expected http://HOST[:PORT] or https://HOST[:PORT]");
    }
    while (!e.empty() && e.back() == '/') e.pop_back();
    c.endpoint = e;
    break;
  }
  c.path_style = !c.endpoint.empty();
  return c;
}

struct S3Client::Impl {
  Impl(const HttpOptions& http, const Source* owner) : fetch(http, owner) {}
  HttpFetcher fetch;
  FetchSigning signing;
  bool signed_requests = false;
};

S3Client::S3Client(S3Config config, const HttpOptions& http, const Source* owner)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(http, owner)) {
  if (!config_.access_key.empty()) {
    impl_->signed_requests = true;
    impl_->signing.sigv4 = "aws:amz:" + config_.region + ":s3";
    impl_->signing.access_key = config_.access_key;
    impl_->signing.secret_key = config_.secret_key;
    impl_->signing.headers.push_back(std::string("x-amz-content-sha256: ") + kEmptySha256);
    if (!config_.session_token.empty()) {
      impl_->signing.headers.push_back("x-amz-security-token: " + config_.session_token);
    }
  }
}

S3Client::~S3Client() = default;

StatusOr<S3Client*> S3Client::Shared() {
  static std::mutex mu;
  static std::unique_ptr<S3Client> client;
  std::lock_guard<std::mutex> lock(mu);
  if (client == nullptr) {
    FT_ASSIGN_OR_RETURN(S3Config c, S3Config::FromEnvironment());
    client = std::make_unique<S3Client>(std::move(c), HttpOptions());
  }
  return client.get();
}

namespace {

// The request for `key` in `bucket` (and `query`, already canonical: sorted and encoded).
FetchRequest MakeRequest(const S3Config& c, const FetchSigning* signing, const S3Url& u,
                         const std::string& query = "") {
  FetchRequest r;
  const std::string path = UriEncode(u.key, /*keep_slash=*/true);
  const std::string aws = "https://s3." + c.region + ".amazonaws.com";
  if (c.path_style) {
    r.url = c.endpoint + "/" + u.bucket + "/" + path;
  } else if (u.bucket.find('.') != std::string::npos) {  // would not match the TLS certificate
    r.url = aws + "/" + u.bucket + "/" + path;
  } else {
    r.url = "https://" + u.bucket + ".s3." + c.region + ".amazonaws.com/" + path;
  }
  if (!query.empty()) r.url += "?" + query;
  r.name = u.ToString();
  r.signing = signing;
  return r;
}

}  // namespace

// Adds what to check to the S3 errors a user can fix.
Status S3Client::Explain(const Status& s) const {
  if (s.ok()) return s;
  const std::string& m = s.message();
  const std::string from = config_.credentials_from.empty()
                               ? std::string("no credentials were found, so requests were unsigned")
                               : "credentials from " + config_.credentials_from;
  std::string hint;
  if (m.find("SignatureDoesNotMatch") != std::string::npos) {
    hint = "the secret key does not match the access key (" + from + ")";
  } else if (m.find("InvalidAccessKeyId") != std::string::npos) {
    hint = "the access key is unknown to " +
           (config_.endpoint.empty() ? std::string("AWS") : config_.endpoint) + " (" + from + ")";
  } else if (m.find("ExpiredToken") != std::string::npos ||
             m.find("InvalidToken") != std::string::npos) {
    hint = "the session token is expired or invalid (" + from + ")";
  } else if (m.find("AccessDenied") != std::string::npos ||
             m.find("HTTP 403") != std::string::npos) {
    hint = "access denied (" + from +
           "); check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and AWS_ENDPOINT_URL";
  } else if (m.find("NoSuchBucket") != std::string::npos) {
    hint = "check the bucket name" + (config_.endpoint.empty()
                                          ? std::string(" and AWS_REGION")
                                          : " and AWS_ENDPOINT_URL=" + config_.endpoint);
  } else if (m.find("Couldn't connect") != std::string::npos ||
             m.find("resolve host") != std::string::npos) {
    hint = "is the endpoint " +
           (config_.endpoint.empty() ? std::string("(AWS)") : config_.endpoint) + " reachable?";
  }
  return hint.empty() ? s : Status(s.code(), m + "; " + hint);
}

Status S3Client::Get(const S3Url& object, std::string* out) {
  const FetchSigning* sg = impl_->signed_requests ? &impl_->signing : nullptr;
  return Explain(impl_->fetch.Get(MakeRequest(config_, sg, object), out));
}

Status S3Client::GetRange(const S3Url& object, uint64_t offset, uint64_t len, uint8_t* out) {
  const FetchSigning* sg = impl_->signed_requests ? &impl_->signing : nullptr;
  FetchRequest r = MakeRequest(config_, sg, object);
  r.offset = offset;
  r.len = len;
  return Explain(impl_->fetch.GetRange(r, out));
}

std::string S3Client::UrlOf(const S3Url& u, const std::string& query) const {
  return MakeRequest(config_, nullptr, u, query).url;
}

const FetchSigning* S3Client::signing() const {
  return impl_->signed_requests ? &impl_->signing : nullptr;
}

HttpFetcher* S3Client::fetcher() { return &impl_->fetch; }

std::string S3UriEncode(const std::string& s, bool keep_slash) { return UriEncode(s, keep_slash); }
bool S3NextXml(const std::string& xml, const std::string& tag, size_t* pos, std::string* text) {
  return NextXml(xml, tag, pos, text);
}
std::string S3XmlUnescape(const std::string& s) { return XmlUnescape(s); }

std::vector<float> S3Client::TakeRangeLatencies() { return impl_->fetch.TakeRangeLatencies(); }

StatusOr<std::vector<S3Object>> S3Client::List(const S3Url& url, bool first_page_only) {
  const FetchSigning* sg = impl_->signed_requests ? &impl_->signing : nullptr;
  std::vector<S3Object> objects;
  std::string token;
  S3Url bucket{url.bucket, ""};
  for (int page = 0;; ++page) {
    // The canonical query: parameters sorted by name, values encoded as SigV4 wants them.
    std::string query =
        (token.empty() ? "" : "continuation-token=" + UriEncode(token, false) + "&") +
        "list-type=2&prefix=" + UriEncode(url.key, false);
    FetchRequest r = MakeRequest(config_, sg, bucket, query);
    r.name = url.ToString() + " (listing, page " + std::to_string(page + 1) + ")";
    std::string xml;
    FT_RETURN_IF_ERROR(Explain(impl_->fetch.Get(r, &xml)));
    size_t pos = 0;
    std::string block;
    while (NextXml(xml, "Contents", &pos, &block)) {
      size_t p = 0;
      std::string key, size;
      if (!NextXml(block, "Key", &p, &key)) continue;
      p = 0;
      NextXml(block, "Size", &p, &size);
      objects.push_back({XmlUnescape(key), std::strtoull(size.c_str(), nullptr, 10)});
    }
    std::string truncated;
    pos = 0;
    if (first_page_only || !NextXml(xml, "IsTruncated", &pos, &truncated) || truncated != "true") {
      break;
    }
    pos = 0;
    if (!NextXml(xml, "NextContinuationToken", &pos, &token) || token.empty()) {
      return Status::Corruption(r.name + ": a truncated listing without NextContinuationToken");
    }
    token = XmlUnescape(token);
  }
  std::sort(objects.begin(), objects.end(),
            [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
  return objects;
}

namespace {

class S3Source : public Source {
 public:
  S3Source(S3Url base, S3Config config, const HttpOptions& http)
      : base_(std::move(base)), client_(std::move(config), http, this) {
    while (!base_.key.empty() && base_.key.back() == '/') base_.key.pop_back();
  }
  std::string Where(const std::string& name) const override { return Object(name).ToString(); }
  bool RetryCorruptReads() const override { return true; }
  StatusOr<std::string> ReadFile(const std::string& name) override {
    std::string out;
    FT_RETURN_IF_ERROR(client_.Get(Object(name), &out));
    return out;
  }
  Status ReadRange(const std::string& name, uint64_t offset, uint64_t len, uint8_t* out) override {
    return client_.GetRange(Object(name), offset, len, out);
  }
  std::vector<float> TakeReadLatencies() override { return client_.TakeRangeLatencies(); }

 private:
  S3Url Object(const std::string& name) const {
    return {base_.bucket, base_.key.empty() ? name : base_.key + "/" + name};
  }
  S3Url base_;
  S3Client client_;
};

}  // namespace

StatusOr<std::unique_ptr<Source>> NewS3Source(const std::string& url, const HttpOptions& http) {
  FT_ASSIGN_OR_RETURN(S3Url u, S3Url::Parse(url));
  FT_ASSIGN_OR_RETURN(S3Config c, S3Config::FromEnvironment());
  return std::unique_ptr<Source>(new S3Source(std::move(u), std::move(c), http));
}

}  // namespace ftrain::data
