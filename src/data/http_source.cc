// Source over an http(s) base URL with libcurl: GET for small files, Range GET for shard bytes.
// Transient failures (connection errors, 5xx/408/429, stalls, truncated bodies) are retried
// with exponential backoff and logged; 404 and other permanent answers fail at once.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"
#include "data/source.h"

namespace ftrain::data {
namespace {

using Clock = std::chrono::steady_clock;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// What one attempt produced.
struct Body {
  uint8_t* fixed = nullptr;  // ReadRange: exactly `cap` bytes go here
  uint64_t cap = 0;
  std::string* grow = nullptr;  // ReadFile
  uint64_t got = 0;
  bool overflow = false;
  std::string content_range;
};

struct Progress {
  const Source* source = nullptr;
  Clock::time_point last_change;
  curl_off_t last_now = -1;
  int stall_ms = 0;
  bool stalled = false;
  bool cancelled = false;
};

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  Body* b = static_cast<Body*>(user);
  size_t bytes = size * n;
  if (b->fixed != nullptr) {
    if (b->got + bytes > b->cap) {
      b->overflow = true;
      return 0;  // makes curl fail the transfer with CURLE_WRITE_ERROR
    }
    std::copy(data, data + bytes, b->fixed + b->got);
  } else {
    b->grow->append(data, bytes);
  }
  b->got += bytes;
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  Body* b = static_cast<Body*>(user);
  std::string line(data, size * n);
  std::string lower = line;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.rfind("content-range:", 0) == 0) {
    b->content_range = line.substr(14);
    while (!b->content_range.empty() &&
           (b->content_range.back() == '\r' || b->content_range.back() == '\n')) {
      b->content_range.pop_back();
    }
    size_t start = b->content_range.find_first_not_of(' ');
    b->content_range = start == std::string::npos ? "" : b->content_range.substr(start);
  }
  return size * n;
}

int OnProgress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  Progress* p = static_cast<Progress*>(user);
  if (p->source->cancelled()) {
    p->cancelled = true;
    return 1;
  }
  auto now = Clock::now();
  if (dlnow != p->last_now) {
    p->last_now = dlnow;
    p->last_change = now;
  } else if (now - p->last_change > std::chrono::milliseconds(p->stall_ms)) {
    p->stalled = true;
    return 1;
  }
  return 0;
}

class HttpSource : public Source {
 public:
  HttpSource(std::string base, HttpOptions opts) : base_(std::move(base)), opts_(opts) {
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
    GlobalInitOnce();
  }
  ~HttpSource() override {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  std::string Where(const std::string& name) const override { return base_ + "/" + name; }
  bool RetryCorruptReads() const override { return true; }

  StatusOr<std::string> ReadFile(const std::string& name) override {
    std::string out;
    Body body;
    body.grow = &out;
    FT_RETURN_IF_ERROR(Get(Where(name), false, 0, 0, &body));
    return out;
  }

  Status ReadRange(const std::string& name, uint64_t offset, uint64_t len, uint8_t* out) override {
    Body body;
    body.fixed = out;
    body.cap = len;
    return Get(Where(name), true, offset, len, &body);
  }

 private:
  // One attempt's outcome: ok, or a Status plus whether retrying may help.
  struct Outcome {
    Status status;
    bool transient = false;
  };

  Status Get(const std::string& url, bool ranged, uint64_t offset, uint64_t len, Body* body) {
    const std::string what =
        "GET " + url +
        (ranged ? " bytes=" + std::to_string(offset) + "-" + std::to_string(offset + len - 1) : "");
    Outcome last;
    for (int attempt = 0;; ++attempt) {
      if (cancelled()) return Status::Aborted(what + ": cancelled");
      body->got = 0;
      body->overflow = false;
      body->content_range.clear();
      if (body->grow != nullptr) body->grow->clear();
      last = Attempt(url, ranged, offset, len, body);
      if (last.status.ok()) {
        if (attempt > 0) {
          FT_LOG(Info) << what << ": succeeded on attempt " << attempt + 1;
        }
        return Status::Ok();
      }
      if (!last.transient) return last.status.Annotate(what);
      if (attempt >= opts_.max_retries) break;
      int64_t delay = std::min<int64_t>(opts_.max_backoff_ms,
                                        int64_t{opts_.backoff_ms} << std::min(attempt, 20));
      FT_LOG(Warning) << what << ": " << last.status.message() << " (attempt " << attempt + 1
                      << " of " << opts_.max_retries + 1 << "); retrying in " << delay << " ms";
      auto until = Clock::now() + std::chrono::milliseconds(delay);
      while (Clock::now() < until) {
        if (cancelled()) return Status::Aborted(what + ": cancelled");
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(delay, 20)));
      }
    }
    return Status::Unavailable(what + ": failed after " + std::to_string(opts_.max_retries + 1) +
                               " attempts; last error: " + last.status.message() +
                               " (check the server, or raise the HTTP retry settings)");
  }

  Outcome Attempt(const std::string& url, bool ranged, uint64_t offset, uint64_t len, Body* body) {
    CURL* h = AcquireHandle();
    if (h == nullptr) return {Status::Internal("curl_easy_init failed"), false};
    Progress progress;
    progress.source = this;
    progress.last_change = Clock::now();
    progress.stall_ms = opts_.stall_timeout_ms;
    char errbuf[CURL_ERROR_SIZE] = {0};
    std::string range;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWrite);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, body);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &progress);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts_.connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.request_timeout_ms));
    // Identity encoding: a compressing proxy would break byte ranges.
    curl_easy_setopt(h, CURLOPT_HTTP_CONTENT_DECODING, 0L);
    if (ranged) {
      range = std::to_string(offset) + "-" + std::to_string(offset + len - 1);
      curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
    }
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    ReleaseHandle(h);

    if (progress.cancelled) return {Status::Aborted("cancelled"), false};
    if (progress.stalled) {
      return {Status::Unavailable("stalled: no data for " + std::to_string(opts_.stall_timeout_ms) +
                                  " ms after " + std::to_string(body->got) + " bytes"),
              true};
    }
    if (body->overflow) {
      return {Status::Corruption("server sent more than the " + std::to_string(len) +
                                 " bytes requested (HTTP " + std::to_string(code) + ")"),
              false};
    }
    if (rc != CURLE_OK) {
      std::string msg = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? ": " : "") + errbuf;
      bool transient = rc != CURLE_URL_MALFORMAT && rc != CURLE_UNSUPPORTED_PROTOCOL;
      return {Status::Unavailable(msg + " after " + std::to_string(body->got) + " bytes"),
              transient};
    }
    if (code >= 500 || code == 408 || code == 429) {
      return {Status::Unavailable("HTTP " + std::to_string(code)), true};
    }
    if (code == 404 || code == 410) {
      return {Status::NotFound("HTTP " + std::to_string(code) + " (not found)"), false};
    }
    if (code == 416) {
      return {Status::Corruption("HTTP 416: the range is beyond the end of the file "
                                 "(truncated shard?)"),
              false};
    }
    if (code == 401 || code == 403) {
      return {Status::FailedPrecondition("HTTP " + std::to_string(code) + " (access denied)"),
              false};
    }
    if (ranged) {
      if (code != 206) {
        return {Status::FailedPrecondition("HTTP " + std::to_string(code) +
                                           " to a Range request; the server must support byte "
                                           "ranges (expected 206)"),
                false};
      }
      std::string want = "bytes " + range + "/";
      if (body->content_range.rfind(want, 0) != 0) {
        unsigned long long a = 0, b = 0, total = 0;
        if (std::sscanf(body->content_range.c_str(), "bytes %llu-%llu/%llu", &a, &b, &total) == 3 &&
            a == offset && b < offset + len - 1) {
          return {Status::Corruption("the file is " + std::to_string(total) +
                                     " bytes long, but bytes " + range +
                                     " were expected (truncated file?)"),
                  false};
        }
        return {Status::Corruption("Content-Range '" + body->content_range + "' does not match '" +
                                   want + "...'"),
                false};
      }
      if (body->got != len) {
        return {Status::Unavailable("truncated body: " + std::to_string(body->got) + " of " +
                                    std::to_string(len) + " bytes"),
                true};
      }
    } else if (code != 200) {
      return {Status::Unavailable("unexpected HTTP " + std::to_string(code)), false};
    }
    return {Status::Ok(), false};
  }

  CURL* AcquireHandle() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        curl_easy_reset(h);  // keeps the connection cache: keep-alive across requests
        return h;
      }
    }
    return curl_easy_init();
  }
  void ReleaseHandle(CURL* h) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(h);
  }

  std::string base_;
  HttpOptions opts_;
  std::mutex mu_;
  std::vector<CURL*> idle_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<Source> NewHttpSource(const std::string& base_url, const HttpOptions& http) {
  return std::make_unique<HttpSource>(base_url, http);
}

}  // namespace ftrain::data
