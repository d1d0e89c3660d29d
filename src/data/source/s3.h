// Object storage: s3://bucket/key URLs over the S3 REST API with libcurl, signed with SigV4 by
// libcurl itself (CURLOPT_AWS_SIGV4). Credentials, region and endpoint come from the standard
// AWS variables or ~/.aws/credentials; see docs/data.md "Object storage (S3)".
#pragma once

#include <cstdint>
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

  const S3Config& config() const { return config_; }

 private:
  struct Impl;
  Status Explain(const Status& s) const;
  S3Config config_;
  std::unique_ptr<Impl> impl_;
};

// Source over s3://bucket/prefix (a packed directory in a bucket).
StatusOr<std::unique_ptr<Source>> NewS3Source(const std::string& url, const HttpOptions& http);

}  // namespace ftrain::data
