// Reads and validates the ckpt.mirror* and ckpt.s3_* keys (mirror_config.h).
#include "train/config/mirror_config.h"

namespace ftrain::train {
namespace {

Status Bad(const Config& c, const std::string& key, const std::string& what) {
  const std::string where = c.Has(key) ? c.entries().at(key).origin + ": " : "";
  const std::string value = c.Has(key) ? c.entries().at(key).value : "";
  return Status::InvalidArgument(where + key + " " + what + ", got '" + value + "'");
}

// The upload knobs `PREFIX` part_mb, threads and max_mb_s, each within S3's limits.
Status ParseUpload(const Config& c, const std::string& prefix, int* part_mb, int* threads,
                   double* max_mb_s) {
  int64_t part = *part_mb, n = *threads;
  FT_RETURN_IF_ERROR(c.GetInt(prefix + "part_mb", &part));
  FT_RETURN_IF_ERROR(c.GetInt(prefix + "threads", &n));
  FT_RETURN_IF_ERROR(c.GetDouble(prefix + "max_mb_s", max_mb_s));
  if (part < 5 || part > 5120) {
    return Bad(c, prefix + "part_mb", "must be in [5, 5120] MiB (S3's part sizes)");
  }
  if (n < 1 || n > 64) return Bad(c, prefix + "threads", "must be in [1, 64]");
  if (!(*max_mb_s >= 0 && *max_mb_s <= 1e6)) {
    return Bad(c, prefix + "max_mb_s", "must be in [0, 1e6] MB/s (0 = no cap)");
  }
  *part_mb = static_cast<int>(part);
  *threads = static_cast<int>(n);
  return Status::Ok();
}

}  // namespace

StatusOr<MirrorConfig> ParseMirrorConfig(const Config& c) {
  MirrorConfig m;
  int64_t keep = m.keep;
  FT_RETURN_IF_ERROR(c.GetString("ckpt.mirror", &m.url));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.mirror_keep", &keep));
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.mirror_every_s", &m.every_s));
  if (!m.url.empty()) {
    const size_t slash = m.url.find('/', 5);
    if (m.url.rfind("s3://", 0) != 0 || slash == 5 || m.url.size() <= 5) {
      return Bad(c, "ckpt.mirror", "must be s3://BUCKET/PREFIX (or empty: no mirror)");
    }
  }
  if (keep < 1 || keep > 100000) return Bad(c, "ckpt.mirror_keep", "must be in [1, 100000]");
  if (!(m.every_s >= 0 && m.every_s <= 1e7)) {
    return Bad(c, "ckpt.mirror_every_s", "must be in [0, 1e7] seconds");
  }
  FT_RETURN_IF_ERROR(ParseUpload(c, "ckpt.mirror_", &m.part_mb, &m.threads, &m.max_mb_s));
  m.keep = static_cast<int>(keep);
  return m;
}

StatusOr<S3UploadConfig> ParseS3UploadConfig(const Config& c) {
  S3UploadConfig u;
  FT_RETURN_IF_ERROR(ParseUpload(c, "ckpt.s3_", &u.part_mb, &u.threads, &u.max_mb_s));
  return u;
}

}  // namespace ftrain::train
