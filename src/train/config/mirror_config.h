// [ckpt] object-store settings: the mirror tier behind the file-system checkpoints
// (ckpt.mirror = s3://BUCKET/PREFIX and its interval, retention and upload knobs) and the
// upload knobs of a checkpoint root on S3 (ckpt.s3_part_mb, ...). Parsed from
// the raw config so that TrainConfig's header (included by every LibTorch file) stays as it
// is; TrainConfig::Parse validates them once at start-up (exit 2 naming the key).
#pragma once

#include <string>

#include "core/config.h"
#include "core/status.h"

namespace ftrain::train {

struct MirrorConfig {
  std::string url;       // ckpt.mirror: "" = no mirror
  int keep = 3;          // ckpt.mirror_keep: newest committed checkpoints kept there (>= 1)
  double every_s = 300;  // ckpt.mirror_every_s: look for a newer checkpoint this often
  int part_mb = 8;       // ckpt.mirror_part_mb: multipart part size (5..5120)
  int threads = 4;       // ckpt.mirror_threads: parts in flight (1..64)
  double max_mb_s = 0;   // ckpt.mirror_max_mb_s: upload bandwidth cap (0 = none)
  bool enabled() const { return !url.empty(); }
};

StatusOr<MirrorConfig> ParseMirrorConfig(const Config& c);

// ckpt.root = s3://...: how each committed step is uploaded (ckpt/s3_staging.h). Own keys,
// not the mirror's: the two tiers never run together, and a config that moves from one to
// the other should not carry tuning meant for a background copy to the durability path.
struct S3UploadConfig {
  int part_mb = 8;      // ckpt.s3_part_mb: multipart part size (5..5120)
  int threads = 4;      // ckpt.s3_threads: parts in flight (1..64)
  double max_mb_s = 0;  // ckpt.s3_max_mb_s: upload bandwidth cap (0 = none)
};

StatusOr<S3UploadConfig> ParseS3UploadConfig(const Config& c);

}  // namespace ftrain::train
