// HttpFetcher::Send: PUT/POST/DELETE/HEAD with a body from memory, for the S3 writer. Shares
// the GET path's handle pool, retry policy (backoff with jitter on 5xx/408/429, connection
// errors and stalls) and its rule that a signed request's secret never reaches a message.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/log.h"
#include "data/source/http_fetch.h"

namespace ftrain::data {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxReplyBody = 1 << 20;

struct SendState {
  const SendRequest* req = nullptr;
  SendReply* reply = nullptr;
  uint64_t sent = 0;
  const Source* owner = nullptr;
  Clock::time_point last_change;
  curl_off_t last_total = -1;
  int stall_ms = 0;
  bool stalled = false;
  bool cancelled = false;
};

size_t OnRead(char* buf, size_t size, size_t n, void* user) {
  SendState* s = static_cast<SendState*>(user);
  const uint64_t left = s->req->body_len - s->sent;
  const size_t k = static_cast<size_t>(std::min<uint64_t>(left, size * n));
  if (k > 0) std::memcpy(buf, s->req->body + s->sent, k);
  s->sent += k;
  return k;
}

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  SendState* s = static_cast<SendState*>(user);
  const size_t bytes = size * n;
  if (s->reply->body.size() < kMaxReplyBody) s->reply->body.append(data, bytes);
  return bytes;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  SendState* s = static_cast<SendState*>(user);
  std::string line(data, size * n);
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string value = line.substr(colon + 1);
  const size_t a = value.find_first_not_of(" \t");
  const size_t b = value.find_last_not_of(" \t\r\n");
  value = a == std::string::npos ? "" : value.substr(a, b - a + 1);
  s->reply->headers.emplace_back(std::move(name), std::move(value));
  return size * n;
}

int OnProgress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t ulnow) {
  SendState* s = static_cast<SendState*>(user);
  if (s->owner != nullptr && s->owner->cancelled()) {
    s->cancelled = true;
    return 1;
  }
  const auto now = Clock::now();
  if (dlnow + ulnow != s->last_total) {
    s->last_total = dlnow + ulnow;
    s->last_change = now;
  } else if (now - s->last_change > std::chrono::milliseconds(s->stall_ms)) {
    s->stalled = true;
    return 1;
  }
  return 0;
}

}  // namespace

std::string SendReply::Header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return "";
}

Status HttpFetcher::Send(const SendRequest& r, SendReply* reply) {
  Status last;
  for (int attempt = 0;; ++attempt) {
    if (cancelled()) return Status::Aborted(r.name + ": cancelled");
    *reply = SendReply();
    CURL* h = static_cast<CURL*>(AcquireHandle());
    if (h == nullptr) return Status::Internal(r.name + ": curl_easy_init failed");
    SendState st;
    st.req = &r;
    st.reply = reply;
    st.owner = owner_;
    st.last_change = Clock::now();
    st.stall_ms = opts_.stall_timeout_ms;
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = curl_slist_append(nullptr, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(h, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWrite);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &st);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &st);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts_.connect_timeout_ms));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.request_timeout_ms));
    if (r.max_bytes_per_s > 0) {
      curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, static_cast<curl_off_t>(r.max_bytes_per_s));
    }
    if (r.method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, OnRead);
      curl_easy_setopt(h, CURLOPT_READDATA, &st);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body_len));
      // Bigger reads than the 64 KiB default: fewer callbacks and syscalls per part.
      curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 2L << 20);
    } else if (r.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body == nullptr ? "" : (const char*)r.body);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body_len));
      headers = curl_slist_append(headers, "Content-Type: application/xml");
    } else if (r.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    if (r.signing != nullptr) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, r.signing->sigv4.c_str());
      curl_easy_setopt(h, CURLOPT_USERNAME, r.signing->access_key.c_str());
      curl_easy_setopt(h, CURLOPT_PASSWORD, r.signing->secret_key.c_str());
      // The payload is not hashed into the signature (it may be GBs); its integrity rides on
      // the checksum header each upload sends (Content-MD5 or x-amz-checksum-*).
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      for (const auto& line : r.signing->headers) {
        if (line.rfind("x-amz-content-sha256", 0) != 0) {
          headers = curl_slist_append(headers, line.c_str());
        }
      }
    }
    for (const auto& line : r.headers) headers = curl_slist_append(headers, line.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply->code);
    ReleaseHandle(h);  // the reset there forgets the credentials
    curl_slist_free_all(headers);

    if (st.cancelled) return Status::Aborted(r.name + ": cancelled");
    bool transient = true;
    if (st.stalled) {
      last = Status::Unavailable("stalled: no progress for " +
                                 std::to_string(opts_.stall_timeout_ms) + " ms");
    } else if (rc != CURLE_OK) {
      last = Status::Unavailable(std::string(curl_easy_strerror(rc)) + (errbuf[0] ? ": " : "") +
                                 errbuf);
      transient = rc != CURLE_URL_MALFORMAT && rc != CURLE_UNSUPPORTED_PROTOCOL;
    } else if (reply->code >= 500 || reply->code == 408 || reply->code == 429) {
      last = Status::Unavailable(HttpErrorText(reply->code, reply->body));
    } else {
      if (attempt > 0) FT_LOG(Info) << r.name << ": succeeded on attempt " << attempt + 1;
      return Status::Ok();
    }
    if (!transient) return last.Annotate(r.name);
    if (attempt >= opts_.max_retries) break;
    const int64_t delay = RetryBackoffMs(opts_, attempt);
    FT_LOG(Warning) << r.name << ": " << last.message() << " (attempt " << attempt + 1 << " of "
                    << opts_.max_retries + 1 << "); retrying in " << delay << " ms";
    const auto until = Clock::now() + std::chrono::milliseconds(delay);
    while (Clock::now() < until) {
      if (cancelled()) return Status::Aborted(r.name + ": cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(delay, 20)));
    }
  }
  return Status::Unavailable(r.name + ": failed after " + std::to_string(opts_.max_retries + 1) +
                             " attempts; last error: " + last.message() +
                             " (check the server, or raise the HTTP retry settings)");
}

}  // namespace ftrain::data
