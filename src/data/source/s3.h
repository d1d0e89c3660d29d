// Object storage: s3://bucket/key URLs over the S3 REST API with libcurl, signed with SigV4 by
// libcurl itself (CURLOPT_AWS_SIGV4). Credentials, region and endpoint come from the standard
// AWS variables or ~/.aws/credentials; see docs/data.md "Object storage (S3)".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/source/source.h"

namespace ftrain::data {

bool IsS3Url(const std::string& spec);

// s3://BUCKET[/KEY]; KEY may be empty or a prefix.
struct S3Url {
  std::string bucket;
  std::string key;
  static StatusOr<S3Url> Parse(const std::string& url);
  std::string ToString() const { return "s3://" + bucket + (key.empty() ? "" : "/" + key); }
};

// Where and as whom requests go. The secret and the token are never logged or put in
// messages; `credentials_from` says where they came from.
struct S3Config {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string credentials_from;  // "AWS_ACCESS_KEY_ID", "profile 'p' in FILE", "" (none)
  std::string region = "us-east-1";
  std::string endpoint;  // scheme://host[:port]; empty: AWS
  // ENDPOINT/BUCKET/KEY (a custom endpoint); else AWS's virtual-hosted
  // https://BUCKET.s3.REGION.amazonaws.com/KEY (path-style for bucket names with dots).
  bool path_style = true;

  // AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], else the profile
  // AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (default
  // ~/.aws/credentials); AWS_REGION/AWS_DEFAULT_REGION; AWS_ENDPOINT_URL_S3/AWS_ENDPOINT_URL.
  // Without credentials requests go unsigned (public buckets).
  static StatusOr<S3Config> FromEnvironment();
};

struct S3Object {
  std::string key;
  uint64_t size = 0;
};

// An unfinished multipart upload (ListMultipartUploads).
struct S3Upload {
  std::string key;
  std::string upload_id;
};

// How a multipart upload goes: parts of `part_bytes` (the last one shorter), `threads` at a
// time, each sent with its CRC32C (x-amz-checksum-crc32c, which S3 checks on arrival), and
// at most `max_bytes_per_s` in all (0: no cap; split evenly over the threads).
struct UploadOptions {
  uint64_t part_bytes = 8ull << 20;  // S3's minimum is 5 MiB for every part but the last
  int threads = 4;
  int64_t max_bytes_per_s = 0;
  bool if_none_match = false;  // the completion is refused when the key exists
};

class HttpFetcher;
struct FetchSigning;

class S3Client {
 public:
  // `owner`, when given, cancels requests (Source::Cancel).
  S3Client(S3Config config, const HttpOptions& http, const Source* owner = nullptr);
  ~S3Client();
  // A process-wide client configured from the environment (for `ftrain pack` inputs).
  static StatusOr<S3Client*> Shared();

  Status Get(const S3Url& object, std::string* out);
  Status GetRange(const S3Url& object, uint64_t offset, uint64_t len, uint8_t* out);
  // Seconds each successful GetRange took since the last call.
  std::vector<float> TakeRangeLatencies();
  // Every object whose key starts with url.key, sorted by key (ListObjectsV2, all pages).
  StatusOr<std::vector<S3Object>> List(const S3Url& url, bool first_page_only = false);

  // Writing (s3_write.cc). Conditional writes (`If-None-Match: *`) answer false, not an
  // error, when the key already exists (HTTP 412 PreconditionFailed).
  StatusOr<bool> Put(const S3Url& object, const std::string& data, bool if_none_match = false);
  // A multipart upload of data[0, len): create, parts in parallel, complete (conditional when
  // options.if_none_match: false when the key exists). Any failure aborts the upload.
  StatusOr<bool> Upload(const S3Url& object, const uint8_t* data, uint64_t len,
                        const UploadOptions& options);
  // The same with the bytes read part by part: read(offset, n, out) fills out[0, n) (called
  // concurrently from the upload threads), so at most `threads` parts are in memory at once.
  using PartReader = std::function<Status(uint64_t offset, uint64_t n, uint8_t* out)>;
  StatusOr<bool> Upload(const S3Url& object, uint64_t len, const PartReader& read,
                        const UploadOptions& options);
  Status AbortUpload(const S3Url& object, const std::string& upload_id);
  // Unfinished multipart uploads whose key starts with prefix.key.
  StatusOr<std::vector<S3Upload>> ListUploads(const S3Url& prefix);
  Status Delete(const S3Url& object);  // no error when absent
  // The object's size; NotFound when absent.
  StatusOr<uint64_t> Head(const S3Url& object);
  // The bucket exists and these credentials may use it.
  Status HeadBucket(const std::string& bucket);

  const S3Config& config() const { return config_; }
  // Plumbing for s3_write.cc.
  std::string UrlOf(const S3Url& u, const std::string& query = "") const;
  const FetchSigning* signing() const;
  HttpFetcher* fetcher();

 private:
  struct Impl;
  Status Explain(const Status& s) const;
  S3Config config_;
  std::unique_ptr<Impl> impl_;
};

// SigV4's URI encoding and the tiny XML reader the client uses (shared with s3_write.cc).
std::string S3UriEncode(const std::string& s, bool keep_slash);
bool S3NextXml(const std::string& xml, const std::string& tag, size_t* pos, std::string* text);
std::string S3XmlUnescape(const std::string& s);

// Source over s3://bucket/prefix (a packed directory in a bucket).
StatusOr<std::unique_ptr<Source>> NewS3Source(const std::string& url, const HttpOptions& http);

}  // namespace ftrain::data
