// GET requests over libcurl with the retry policy of the network sources: transient failures
// (connection errors, 5xx/408/429, stalls, truncated bodies) are retried with exponential
// backoff and jitter, and logged; 404 and other permanent answers fail at once. Shared by the
// http(s) source and the S3 client (which adds SigV4 signing, done by libcurl).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/source/source.h"

namespace ftrain::data {

// SigV4 request signing by libcurl (CURLOPT_AWS_SIGV4). Holds the secret: never log it.
struct FetchSigning {
  std::string sigv4;  // "aws:amz:REGION:s3"
  std::string access_key;
  std::string secret_key;
  std::vector<std::string> headers;  // x-amz-content-sha256, x-amz-security-token
};

struct FetchRequest {
  std::string url;   // what is fetched
  std::string name;  // what messages call it (the URL itself, or s3://bucket/key)
  bool ranged = false;
  uint64_t offset = 0;
  uint64_t len = 0;
  const FetchSigning* signing = nullptr;  // nullptr: an anonymous request
};

// "HTTP 403" plus an S3-style error body's Code and Message when there is one.
std::string HttpErrorText(long code, const std::string& error_body);
// Delay before retry `attempt` (0-based): exponential, capped, with jitter in [d/2, d].
int64_t RetryBackoffMs(const HttpOptions& o, int attempt);

// A request with a method other than GET (PUT, POST, DELETE, HEAD) and a body from memory:
// the S3 writer's calls (s3_write.cc).
struct SendRequest {
  std::string method;  // "PUT", "POST", "DELETE", "HEAD"
  std::string url;
  std::string name;  // what messages call it: "PUT s3://bucket/key (part 3)"
  const FetchSigning* signing = nullptr;
  std::vector<std::string> headers;  // extra "Name: value" lines
  const uint8_t* body = nullptr;
  uint64_t body_len = 0;
  int64_t max_bytes_per_s = 0;  // upload speed cap of this request (0: none)
};

struct SendReply {
  long code = 0;
  std::string body;                                          // capped at 1 MiB
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string Header(const std::string& lower_name) const;   // "" when absent
};

class HttpFetcher {
 public:
  // `owner`, when given, cancels in-flight and later requests (Source::Cancel).
  HttpFetcher(HttpOptions opts, const Source* owner);
  ~HttpFetcher();
  HttpFetcher(const HttpFetcher&) = delete;
  HttpFetcher& operator=(const HttpFetcher&) = delete;

  // The whole body into *out (200 expected).
  Status Get(const FetchRequest& r, std::string* out);
  // Exactly r.len bytes at r.offset into out (206 expected, Content-Range checked).
  Status GetRange(const FetchRequest& r, uint8_t* out);

  // Sends r, retrying what a GET retries (connection errors, 5xx/408/429, stalls) with the
  // same backoff and jitter; any other answer (2xx, 3xx, 4xx) comes back in *reply for the
  // caller to judge. Unavailable once the retries are spent.
  Status Send(const SendRequest& r, SendReply* reply);

  const HttpOptions& options() const { return opts_; }
  // Seconds each successful GetRange took since the last call (Source::TakeReadLatencies).
  std::vector<float> TakeRangeLatencies();

 private:
  struct Body;
  struct Outcome;
  Status Run(const FetchRequest& r, Body* body);
  Outcome Attempt(const FetchRequest& r, Body* body);
  bool cancelled() const { return owner_ != nullptr && owner_->cancelled(); }
  void* AcquireHandle();
  void ReleaseHandle(void* h);

  HttpOptions opts_;
  const Source* owner_;
  std::mutex mu_;
  std::vector<void*> idle_;  // CURL handles, guarded by mu_
  // GetRange latencies: a ring of the newest kMaxLatencies, guarded by mu_ (one lock per
  // request, which takes milliseconds anyway).
  static constexpr size_t kMaxLatencies = 4096;
  std::vector<float> latencies_;
  size_t latency_next_ = 0;
};

}  // namespace ftrain::data
