// Reads and validates the ckpt.mirror* keys (mirror_config.h).
#include "train/config/mirror_config.h"

namespace ftrain::train {
namespace {

Status Bad(const Config& c, const std::string& key, const std::string& what) {
  const std::string where = c.Has(key) ? c.entries().at(key).origin + ": " : "";
  const std::string value = c.Has(key) ? c.entries().at(key).value : "";
  return Status::InvalidArgument(where + key + " " + what + ", got '" + value + "'");
}

}  // namespace

StatusOr<MirrorConfig> ParseMirrorConfig(const Config& c) {
  MirrorConfig m;
  int64_t keep = m.keep, part_mb = m.part_mb, threads = m.threads;
  FT_RETURN_IF_ERROR(c.GetString("ckpt.mirror", &m.url));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.mirror_keep", &keep));
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.mirror_every_s", &m.every_s));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.mirror_part_mb", &part_mb));
  FT_RETURN_IF_ERROR(c.GetInt("ckpt.mirror_threads", &threads));
  FT_RETURN_IF_ERROR(c.GetDouble("ckpt.mirror_max_mb_s", &m.max_mb_s));
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
  if (part_mb < 5 || part_mb > 5120) {
    return Bad(c, "ckpt.mirror_part_mb", "must be in [5, 5120] MiB (S3's part sizes)");
  }
  if (threads < 1 || threads > 64) return Bad(c, "ckpt.mirror_threads", "must be in [1, 64]");
  if (!(m.max_mb_s >= 0 && m.max_mb_s <= 1e6)) {
    return Bad(c, "ckpt.mirror_max_mb_s", "must be in [0, 1e6] MB/s (0 = no cap)");
  }
  m.keep = static_cast<int>(keep);
  m.part_mb = static_cast<int>(part_mb);
  m.threads = static_cast<int>(threads);
  return m;
}

}  // namespace ftrain::train
