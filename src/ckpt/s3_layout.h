// Every object key of a checkpoint root on S3 (s3://BUCKET/PREFIX) is built and parsed here:
//   PREFIX/FENCE                               the newest job generation that claimed the root
//   PREFIX/step-00000120/manifest.json         the commit: written last, If-None-Match: *
//   PREFIX/step-00000120/data-<G>/shard-00003.h5  the files, under the generation G that wrote
//                                              the manifest (meta.generation, "none" if empty)
//   PREFIX/PROBE-<random>                      the start-up check of conditional writes
//   PREFIX/CORRUPT-step-00000120.json          the manifest of a step a resume found damaged,
//                                              set aside (ckpt.root = s3://, s3_staging.h)
// A step whose manifest is absent is invisible to readers (a half-uploaded or killed upload).
#pragma once

#include <cstdint>
#include <string>

namespace ftrain::ckpt {

constexpr char kS3FenceName[] = "FENCE";

// `prefix` is the root's key prefix without a trailing '/' ("" for a bucket's top).
std::string S3Key(const std::string& prefix, const std::string& name);
std::string S3StepPrefix(const std::string& prefix, int64_t step);  // PREFIX/step-00000120/
std::string S3ManifestKey(const std::string& prefix, int64_t step);
std::string S3DataDir(const std::string& generation);  // data-<G>
std::string S3FileKey(const std::string& prefix, int64_t step, const std::string& generation,
                      const std::string& file);
std::string S3ProbeKey(const std::string& prefix, const std::string& nonce);
std::string S3CorruptKey(const std::string& prefix, int64_t step);

// A key under PREFIX/: its step (-1 if not under a step-N/ prefix) and whether it is that
// step's manifest.
struct S3KeyInfo {
  int64_t step = -1;
  bool is_manifest = false;
  std::string data_dir;  // "data-<G>" for a file key, else ""
};
S3KeyInfo ParseS3Key(const std::string& prefix, const std::string& key);

}  // namespace ftrain::ckpt
