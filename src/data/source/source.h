// Where a packed directory's files come from: a local/shared file system path, an http(s)
// base URL or an s3:// prefix. Readers see only this interface, so tests can wrap it to inject
// faults. Reads are whole small files (index.json, tokenizer.model) or byte ranges of shards.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::data {

struct HttpOptions {
  int max_retries = 5;         // transient failures retried this many times per request
  int backoff_ms = 200;        // first retry delay; doubles each time
  int max_backoff_ms = 10000;  // cap on one delay
  int connect_timeout_ms = 5000;
  int stall_timeout_ms = 15000;  // no byte received for this long: the attempt fails
  int request_timeout_ms = 600000;

  Status Validate() const;
};

class Source {
 public:
  virtual ~Source() = default;
  // A whole file (small ones: index.json, tokenizer.model).
  virtual StatusOr<std::string> ReadFile(const std::string& name) = 0;
  // Exactly `len` bytes at `offset` of file `name` into out; a short file is Corruption
  // naming the path/URL and offset.
  virtual Status ReadRange(const std::string& name, uint64_t offset, uint64_t len,
                           uint8_t* out) = 0;
  // The bytes will be read soon: start fetching them (page-cache readahead). Only a hint.
  virtual void Hint(const std::string& name, uint64_t offset, uint64_t len) {
    (void)name, (void)offset, (void)len;
  }
  // The path or URL of `name`, for messages.
  virtual std::string Where(const std::string& name) const = 0;
  // Whether a checksum mismatch may be transient (a network source) and worth a re-read.
  virtual bool RetryCorruptReads() const { return false; }
  // Seconds each completed ReadRange took since the last call (retries included), for the
  // read latency in the metrics; a network source keeps its newest few thousand. Files: none.
  virtual std::vector<float> TakeReadLatencies() { return {}; }
  // Makes in-flight and later reads fail fast with Aborted (reader shutdown).
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
};

// "http://..." or "https://..." -> HTTP source; "s3://bucket/prefix" -> S3 source (data/s3.h);
// anything else is a directory path.
bool IsUrl(const std::string& spec);
// `env` reads a directory's files (a URL's do not pass there).
StatusOr<std::unique_ptr<Source>> OpenSource(const std::string& spec, const HttpOptions& http,
                                             Env* env);

std::unique_ptr<Source> NewFileSource(const std::string& dir, Env* env);
std::unique_ptr<Source> NewHttpSource(const std::string& base_url, const HttpOptions& http);

}  // namespace ftrain::data
