// HttpFetcher (libcurl GETs with retries) and the Source over an http(s) base URL built on it:
// GET for small files, Range GET for shard bytes.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "core/log.h"
#include "data/source/http_fetch.h"
#include "data/source/source.h"

namespace ftrain::data {
namespace {

using Clock = std::chrono::steady_clock;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Progress {
  const Source* source = nullptr;
  Clock::time_point last_change;
  curl_off_t last_now = -1;
  int stall_ms = 0;
  bool stalled = false;
  bool cancelled = false;
};

int OnProgress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  Progress* p = static_cast<Progress*>(user);
  if (p->source != nullptr && p->source->cancelled()) {
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

}  // namespace

// The text between <tag> and </tag> in an error body ("" when absent).
static std::string XmlField(const std::string& xml, const std::string& tag) {
  size_t a = xml.find("<" + tag + ">");
  if (a == std::string::npos) return "";
  a += tag.size() + 2;
  size_t b = xml.find("</" + tag + ">", a);
  return b == std::string::npos ? "" : xml.substr(a, std::min<size_t>(b - a, 300));
}

// "HTTP 403" plus an S3-style error body's Code and Message when there is one.
std::string HttpErrorText(long code, const std::string& error_body) {
  std::string s = "HTTP " + std::to_string(code);
  std::string c = XmlField(error_body, "Code");
  if (!c.empty()) {
    s += " " + c;
    std::string m = XmlField(error_body, "Message");
    if (!m.empty()) s += " (" + m + ")";
  }
  return s;
}

// Delay before retry `attempt` (0-based): exponential, capped, with jitter in [d/2, d] so
// many readers throttled at once do not come back in step.
int64_t RetryBackoffMs(const HttpOptions& o, int attempt) {
  int64_t d = std::min<int64_t>(o.max_backoff_ms, int64_t{o.backoff_ms} << std::min(attempt, 20));
  if (d <= 1) return d;
  thread_local std::minstd_rand rng(std::random_device{}());
  return d / 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(d - d / 2 + 1));
}

// What one request produced.
struct HttpFetcher::Body {
  CURL* handle = nullptr;
  uint8_t* fixed = nullptr;  // GetRange: exactly `cap` bytes go here
  uint64_t cap = 0;
  std::string* grow = nullptr;  // Get
  uint64_t got = 0;
  bool overflow = false;
  std::string content_range;
  std::string error_body;  // the body of a >= 300 answer (an S3 error document), capped

  void Reset() {
    got = 0;
    overflow = false;
    content_range.clear();
    error_body.clear();
    if (grow != nullptr) grow->clear();
  }
  static size_t OnWrite(char* data, size_t size, size_t n, void* user);
  static size_t OnHeader(char* data, size_t size, size_t n, void* user);
};

// One attempt's outcome: ok, or a Status plus whether retrying may help.
struct HttpFetcher::Outcome {
  Status status;
  bool transient = false;
};

size_t HttpFetcher::Body::OnWrite(char* data, size_t size, size_t n, void* user) {
  Body* b = static_cast<Body*>(user);
  size_t bytes = size * n;
  long code = 0;
  curl_easy_getinfo(b->handle, CURLINFO_RESPONSE_CODE, &code);
  if (code >= 300) {  // an error document: kept for the message, never as data
    if (b->error_body.size() < 16384) b->error_body.append(data, std::min<size_t>(bytes, 16384));
    return bytes;
  }
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

size_t HttpFetcher::Body::OnHeader(char* data, size_t size, size_t n, void* user) {
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

HttpFetcher::HttpFetcher(HttpOptions opts, const Source* owner) : opts_(opts), owner_(owner) {
  GlobalInitOnce();
}

HttpFetcher::~HttpFetcher() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

Status HttpFetcher::Get(const FetchRequest& r, std::string* out) {
  FetchRequest whole = r;
  whole.ranged = false;
  Body body;
  body.grow = out;
  return Run(whole, &body);
}

Status HttpFetcher::GetRange(const FetchRequest& r, uint8_t* out) {
  FetchRequest ranged = r;
  ranged.ranged = true;
  Body body;
  body.fixed = out;
  body.cap = r.len;
  const auto t0 = Clock::now();
  Status st = Run(ranged, &body);
  if (st.ok()) {
    const float s = std::chrono::duration<float>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mu_);
    if (latencies_.size() < kMaxLatencies) {
      latencies_.push_back(s);
    } else {
      latencies_[latency_next_++ % kMaxLatencies] = s;
    }
  }
  return st;
}

std::vector<float> HttpFetcher::TakeRangeLatencies() {
  std::lock_guard<std::mutex> lock(mu_);
  latency_next_ = 0;
  return std::exchange(latencies_, {});
}

Status HttpFetcher::Run(const FetchRequest& r, Body* body) {
  const std::string what =
      "GET " + r.name +
      (r.ranged ? " bytes=" + std::to_string(r.offset) + "-" + std::to_string(r.offset + r.len - 1)
                : "");
  Outcome last;
  for (int attempt = 0;; ++attempt) {
    if (cancelled()) return Status::Aborted(what + ": cancelled");
    body->Reset();
    last = Attempt(r, body);
    if (last.status.ok()) {
      if (attempt > 0) {
        FT_LOG(Info) << what << ": succeeded on attempt " << attempt + 1;
      }
      return Status::Ok();
    }
    if (!last.transient) return last.status.Annotate(what);
    if (attempt >= opts_.max_retries) break;
    int64_t delay = RetryBackoffMs(opts_, attempt);
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

namespace {

// The answer of a completed transfer with HTTP status `code`, judged.
Status CheckAnswer(const FetchRequest& r, long code, const std::string& content_range, uint64_t got,
                   const std::string& error_body, bool* transient) {
  *transient = false;
  if (code >= 500 || code == 408 || code == 429) {
    *transient = true;
    return Status::Unavailable(HttpErrorText(code, error_body));
  }
  if (code == 404 || code == 410) {
    return Status::NotFound(HttpErrorText(code, error_body) + " (not found)");
  }
  if (code == 416) {
    return Status::Corruption(
        "HTTP 416: the range is beyond the end of the file "
        "(truncated shard?)");
  }
  if (code == 401 || code == 403) {
    return Status::FailedPrecondition(HttpErrorText(code, error_body) + " (access denied)");
  }
  if (!r.ranged) {
    return code == 200 ? Status::Ok()
                       : Status::Unavailable("unexpected " + HttpErrorText(code, error_body));
  }
  const std::string range = std::to_string(r.offset) + "-" + std::to_string(r.offset + r.len - 1);
  if (code != 206) {
    return Status::FailedPrecondition(HttpErrorText(code, error_body) +
                                      " to a Range request; the server must support byte "
                                      "ranges (expected 206)");
  }
  std::string want = "bytes " + range + "/";
  if (content_range.rfind(want, 0) != 0) {
    unsigned long long a = 0, b = 0, total = 0;
    if (std::sscanf(content_range.c_str(), "bytes %llu-%llu/%llu", &a, &b, &total) == 3 &&
        a == r.offset && b < r.offset + r.len - 1) {
      return Status::Corruption("the file is " + std::to_string(total) + " bytes long, but bytes " +
                                range + " were expected (truncated file?)");
    }
    return Status::Corruption("Content-Range '" + content_range + "' does not match '" + want +
                              "...'");
  }
  if (got != r.len) {
    *transient = true;
    return Status::Unavailable("truncated body: " + std::to_string(got) + " of " +
                               std::to_string(r.len) + " bytes");
  }
  return Status::Ok();
}

}  // namespace

HttpFetcher::Outcome HttpFetcher::Attempt(const FetchRequest& r, Body* body) {
  CURL* h = static_cast<CURL*>(AcquireHandle());
  if (h == nullptr) return {Status::Internal("curl_easy_init failed"), false};
  body->handle = h;
  Progress progress;
  progress.source = owner_;
  progress.last_change = Clock::now();
  progress.stall_ms = opts_.stall_timeout_ms;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::string range;
  curl_slist* headers = nullptr;
  curl_easy_setopt(h, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, Body::OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, Body::OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, body);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &progress);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts_.connect_timeout_ms));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.request_timeout_ms));
  // Identity encoding: a compressing proxy would break byte ranges.
  curl_easy_setopt(h, CURLOPT_HTTP_CONTENT_DECODING, 0L);
  if (r.signing != nullptr) {
    // A signed request is not followed to another host (the signature names this one).
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, r.signing->sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, r.signing->access_key.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, r.signing->secret_key.c_str());
    for (const auto& line : r.signing->headers) headers = curl_slist_append(headers, line.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  } else {
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  }
  if (r.ranged) {
    range = std::to_string(r.offset) + "-" + std::to_string(r.offset + r.len - 1);
    curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
  }
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  // The handle goes back to the pool; the reset there forgets the credentials.
  ReleaseHandle(h);
  curl_slist_free_all(headers);

  if (progress.cancelled) return {Status::Aborted("cancelled"), false};
  if (progress.stalled) {
    return {Status::Unavailable("stalled: no data for " + std::to_string(opts_.stall_timeout_ms) +
                                " ms after " + std::to_string(body->got) + " bytes"),
            true};
  }
  if (body->overflow) {
    return {Status::Corruption("server sent more than the " + std::to_string(r.len) +
                               " bytes requested (HTTP " + std::to_string(code) + ")"),
            false};
  }
  if (rc != CURLE_OK) {
    std::string msg = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? ": " : "") + errbuf;
    bool transient = rc != CURLE_URL_MALFORMAT && rc != CURLE_UNSUPPORTED_PROTOCOL;
    return {Status::Unavailable(msg + " after " + std::to_string(body->got) + " bytes"), transient};
  }
  Outcome o;
  o.status = CheckAnswer(r, code, body->content_range, body->got, body->error_body, &o.transient);
  return o;
}

void* HttpFetcher::AcquireHandle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      CURL* h = static_cast<CURL*>(idle_.back());
      idle_.pop_back();
      curl_easy_reset(h);  // keeps the connection cache: keep-alive across requests
      return h;
    }
  }
  return curl_easy_init();
}

void HttpFetcher::ReleaseHandle(void* h) {
  curl_easy_setopt(static_cast<CURL*>(h), CURLOPT_USERNAME, nullptr);
  curl_easy_setopt(static_cast<CURL*>(h), CURLOPT_PASSWORD, nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(h);
}

namespace {

class HttpSource : public Source {
 public:
  HttpSource(std::string base, HttpOptions opts) : base_(std::move(base)), fetch_(opts, this) {
    while (!base_.empty() && base_.back() == '/') base_.pop_back();
  }

  std::string Where(const std::string& name) const override { return base_ + "/" + name; }
  bool RetryCorruptReads() const override { return true; }

  StatusOr<std::string> ReadFile(const std::string& name) override {
    std::string out;
    FT_RETURN_IF_ERROR(fetch_.Get(Request(name, 0, 0), &out));
    return out;
  }

  Status ReadRange(const std::string& name, uint64_t offset, uint64_t len, uint8_t* out) override {
    return fetch_.GetRange(Request(name, offset, len), out);
  }
  std::vector<float> TakeReadLatencies() override { return fetch_.TakeRangeLatencies(); }

 private:
  FetchRequest Request(const std::string& name, uint64_t offset, uint64_t len) const {
    FetchRequest r;
    r.url = r.name = Where(name);
    r.offset = offset;
    r.len = len;
    return r;
  }

  std::string base_;
  HttpFetcher fetch_;
};

}  // namespace

std::unique_ptr<Source> NewHttpSource(const std::string& base_url, const HttpOptions& http) {
  return std::make_unique<HttpSource>(base_url, http);
}

}  // namespace ftrain::data
