// The S3 client's writes: PutObject (optionally `If-None-Match: *`), multipart uploads with
// parts in parallel and a CRC32C per part, abort and listing of unfinished uploads, delete,
// HEAD. Every request goes through HttpFetcher::Send (retries with backoff and jitter on
// 5xx/SlowDown/429/timeouts). The checkpoint layout on top of this is ckpt/s3_store.h.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "data/source/http_fetch.h"
#include "data/source/s3.h"

namespace ftrain::data {
namespace {

uint32_t Crc32cTable(const uint8_t* p, uint64_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (uint64_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes CRC32C: ~20x the table, so the checksum of each part
// costs little next to sending it.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const uint8_t* p, uint64_t n) {
  uint64_t c = 0xFFFFFFFFu;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; i < n; ++i) c32 = __builtin_ia32_crc32qi(c32, p[i]);
  return c32 ^ 0xFFFFFFFFu;
}
#endif

uint32_t Crc32c(const uint8_t* p, uint64_t n) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return Crc32cSse42(p, n);
#endif
  return Crc32cTable(p, n);
}

std::string Base64(const uint8_t* p, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (i + 1 < n) v |= uint32_t{p[i + 1]} << 8;
    if (i + 2 < n) v |= p[i + 2];
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < n ? k[(v >> 6) & 63] : '=';
    out += i + 2 < n ? k[v & 63] : '=';
  }
  return out;
}

// x-amz-checksum-crc32c's value: the big-endian CRC32C, base64.
std::string Crc32cHeader(const uint8_t* p, uint64_t n) {
  const uint32_t c = Crc32c(p, n);
  const uint8_t be[4] = {uint8_t(c >> 24), uint8_t(c >> 16), uint8_t(c >> 8), uint8_t(c)};
  return Base64(be, 4);
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

std::string XmlText(const std::string& xml, const std::string& tag) {
  size_t pos = 0;
  std::string t;
  return S3NextXml(xml, tag, &pos, &t) ? S3XmlUnescape(t) : "";
}

struct Part {
  int number = 0;
  std::string etag;
  std::string crc;
};

}  // namespace

// A request with this client's signing, named "METHOD s3://bucket/key" (+ `what`).
static SendRequest MakeSend(const S3Client& c, const std::string& method, const S3Url& u,
                            const std::string& query, const std::string& what) {
  SendRequest r;
  r.method = method;
  r.url = c.UrlOf(u, query);
  r.name = method + " " + u.ToString() + (what.empty() ? "" : " (" + what + ")");
  r.signing = c.signing();
  return r;
}

// The answer judged: 2xx Ok; 404 NotFound; 403 an access error naming what to check;
// anything else FailedPrecondition with S3's code and message.
static Status Judge(const SendRequest& r, const SendReply& reply) {
  if (reply.code >= 200 && reply.code < 300) return Status::Ok();
  const std::string e = r.name + ": " + HttpErrorText(reply.code, reply.body);
  if (reply.code == 404) return Status::NotFound(e + " (not found)");
  return Status::FailedPrecondition(e);
}

StatusOr<bool> S3Client::Put(const S3Url& object, const std::string& data, bool if_none_match) {
  SendRequest r = MakeSend(*this, "PUT", object, "", if_none_match ? "if absent" : "");
  r.body = reinterpret_cast<const uint8_t*>(data.data());
  r.body_len = data.size();
  r.headers.push_back("x-amz-sdk-checksum-algorithm: CRC32C");
  r.headers.push_back("x-amz-checksum-crc32c: " + Crc32cHeader(r.body, r.body_len));
  if (if_none_match) r.headers.push_back("If-None-Match: *");
  SendReply reply;
  FT_RETURN_IF_ERROR(Explain(fetcher()->Send(r, &reply)));
  if (if_none_match && reply.code == 412) return false;
  FT_RETURN_IF_ERROR(Explain(Judge(r, reply)));
  return true;
}

Status S3Client::AbortUpload(const S3Url& object, const std::string& upload_id) {
  SendRequest r = MakeSend(*this, "DELETE", object, "uploadId=" + S3UriEncode(upload_id, false),
                           "abort multipart upload");
  SendReply reply;
  FT_RETURN_IF_ERROR(Explain(fetcher()->Send(r, &reply)));
  if (reply.code == 404) return Status::Ok();  // already gone (aborted or completed)
  return Explain(Judge(r, reply));
}

StatusOr<bool> S3Client::Upload(const S3Url& object, const uint8_t* data, uint64_t len,
                                const UploadOptions& o) {
  return Upload(
      object, len,
      [data](uint64_t off, uint64_t n, uint8_t* out) {
        std::memcpy(out, data + off, n);
        return Status::Ok();
      },
      o);
}

StatusOr<bool> S3Client::Upload(const S3Url& object, uint64_t len, const PartReader& read,
                                const UploadOptions& o) {
  if (o.part_bytes == 0 || o.threads < 1) {
    return Status::InvalidArgument("upload of " + object.ToString() +
                                   ": part_bytes and threads must be positive");
  }
  SendRequest create = MakeSend(*this, "POST", object, "uploads=", "create multipart upload");
  create.headers.push_back("x-amz-checksum-algorithm: CRC32C");
  SendReply reply;
  FT_RETURN_IF_ERROR(Explain(fetcher()->Send(create, &reply)));
  FT_RETURN_IF_ERROR(Explain(Judge(create, reply)));
  const std::string id = XmlText(reply.body, "UploadId");
  if (id.empty()) return Status::Corruption(create.name + ": no UploadId in the answer");

  const int n_parts =
      static_cast<int>(std::max<uint64_t>(1, (len + o.part_bytes - 1) / o.part_bytes));
  std::vector<Part> parts(n_parts);
  std::atomic<int> next{0};
  std::mutex mu;
  Status first_error;  // guarded by mu
  const int threads = std::min(o.threads, n_parts);
  auto worker = [&] {
    std::vector<uint8_t> buf;  // this thread's part
    for (int i = next++; i < n_parts; i = next++) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error.ok()) return;
      }
      const uint64_t off = uint64_t(i) * o.part_bytes;
      SendRequest r =
          MakeSend(*this, "PUT", object,
                   "partNumber=" + std::to_string(i + 1) + "&uploadId=" + S3UriEncode(id, false),
                   "part " + std::to_string(i + 1) + " of " + std::to_string(n_parts));
      r.body_len = std::min<uint64_t>(o.part_bytes, len - off);
      buf.resize(r.body_len);
      Status rs = read(off, r.body_len, buf.data());
      if (!rs.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = rs.Annotate("reading part " + std::to_string(i + 1));
        return;
      }
      r.body = buf.data();
      r.max_bytes_per_s =
          o.max_bytes_per_s > 0 ? std::max<int64_t>(1, o.max_bytes_per_s / threads) : 0;
      parts[i].number = i + 1;
      parts[i].crc = Crc32cHeader(r.body, r.body_len);
      r.headers.push_back("x-amz-sdk-checksum-algorithm: CRC32C");
      r.headers.push_back("x-amz-checksum-crc32c: " + parts[i].crc);
      SendReply rep;
      Status s = fetcher()->Send(r, &rep);
      if (s.ok()) s = Judge(r, rep);
      if (s.ok()) {
        parts[i].etag = rep.Header("etag");
        if (parts[i].etag.empty()) s = Status::Corruption(r.name + ": no ETag in the answer");
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = Explain(s);
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();

  bool written = true;
  if (first_error.ok()) {
    std::string xml = "<CompleteMultipartUpload>";
    for (const Part& p : parts) {
      xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" +
             XmlEscape(p.etag) + "</ETag><ChecksumCRC32C>" + p.crc + "</ChecksumCRC32C></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    SendRequest r = MakeSend(*this, "POST", object, "uploadId=" + S3UriEncode(id, false),
                             "complete multipart upload");
    r.body = reinterpret_cast<const uint8_t*>(xml.data());
    r.body_len = xml.size();
    if (o.if_none_match) r.headers.push_back("If-None-Match: *");
    SendReply rep;
    Status s = fetcher()->Send(r, &rep);
    // S3 may answer 200 with an <Error> document for a completion that failed late.
    if (s.ok() && rep.code == 200 && rep.body.find("<Error>") != std::string::npos) rep.code = 500;
    if (s.ok() && o.if_none_match && rep.code == 412) {
      written = false;
    } else if (s.ok()) {
      s = Judge(r, rep);
    }
    if (!s.ok()) first_error = Explain(s);
    if (s.ok() && written) return true;
  }
  // Leaves no parts billed for ever (a refused conditional completion keeps its upload open
  // on S3); an abort that fails too is left to prune (ListUploads).
  Status a = AbortUpload(object, id);
  (void)a;  // the upload's own error is the one to report; prune retries the abort
  if (!first_error.ok()) return first_error;
  return written;
}

StatusOr<std::vector<S3Upload>> S3Client::ListUploads(const S3Url& prefix) {
  std::vector<S3Upload> out;
  std::string key_marker, id_marker;
  for (int page = 0;; ++page) {
    std::string q =
        (key_marker.empty() ? "" : "key-marker=" + S3UriEncode(key_marker, false) + "&") +
        "prefix=" + S3UriEncode(prefix.key, false) +
        (id_marker.empty() ? "" : "&upload-id-marker=" + S3UriEncode(id_marker, false)) +
        "&uploads=";
    SendRequest r = MakeSend(*this, "GET", S3Url{prefix.bucket, ""}, q,
                             "list multipart uploads under " + prefix.ToString());
    SendReply reply;
    FT_RETURN_IF_ERROR(Explain(fetcher()->Send(r, &reply)));
    FT_RETURN_IF_ERROR(Explain(Judge(r, reply)));
    size_t pos = 0;
    std::string block;
    while (S3NextXml(reply.body, "Upload", &pos, &block)) {
      out.push_back({XmlText(block, "Key"), XmlText(block, "UploadId")});
    }
    if (XmlText(reply.body, "IsTruncated") != "true") break;
    key_marker = XmlText(reply.body, "NextKeyMarker");
    id_marker = XmlText(reply.body, "NextUploadIdMarker");
    if (key_marker.empty()) break;
  }
  return out;
}

Status S3Client::Delete(const S3Url& object) {
  SendRequest r = MakeSend(*this, "DELETE", object, "", "");
  SendReply reply;
  FT_RETURN_IF_ERROR(Explain(fetcher()->Send(r, &reply)));
  if (reply.code == 404) return Status::Ok();
  return Explain(Judge(r, reply));
}

StatusOr<uint64_t> S3Client::Head(const S3Url& object) {
  SendRequest r = MakeSend(*this, "HEAD", object, "", "");
  SendReply reply;
  FT_RETURN_IF_ERROR(Explain(fetcher()->Send(r, &reply)));
  FT_RETURN_IF_ERROR(Explain(Judge(r, reply)));
  return std::strtoull(reply.Header("content-length").c_str(), nullptr, 10);
}

Status S3Client::HeadBucket(const std::string& bucket) {
  SendRequest r = MakeSend(*this, "HEAD", S3Url{bucket, ""}, "", "does the bucket exist?");
  SendReply reply;
  FT_RETURN_IF_ERROR(Explain(fetcher()->Send(r, &reply)));
  if (reply.code == 404) {
    return Explain(Status::FailedPrecondition(r.name + ": HTTP 404 NoSuchBucket: the bucket '" +
                                              bucket + "' does not exist"));
  }
  if (reply.code == 403) {
    return Explain(Status::FailedPrecondition(r.name + ": HTTP 403 AccessDenied"));
  }
  return Explain(Judge(r, reply));
}

}  // namespace ftrain::data
