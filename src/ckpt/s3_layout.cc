// Builds and parses the object keys of an S3 checkpoint root (s3_layout.h); the step names
// themselves come from filename.cc so both tiers spell a step the same way.
#include "ckpt/s3_layout.h"

#include "ckpt/filename.h"

namespace ftrain::ckpt {

std::string S3Key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

std::string S3StepPrefix(const std::string& prefix, int64_t step) {
  return S3Key(prefix, StepDirName(step)) + "/";
}

std::string S3ManifestKey(const std::string& prefix, int64_t step) {
  return S3StepPrefix(prefix, step) + kManifestName;
}

std::string S3DataDir(const std::string& generation) {
  return "data-" + (generation.empty() ? std::string("none") : generation);
}

std::string S3FileKey(const std::string& prefix, int64_t step, const std::string& generation,
                      const std::string& file) {
  return S3StepPrefix(prefix, step) + S3DataDir(generation) + "/" + file;
}

std::string S3ProbeKey(const std::string& prefix, const std::string& nonce) {
  return S3Key(prefix, "PROBE-" + nonce);
}

std::string S3CorruptKey(const std::string& prefix, int64_t step) {
  return S3Key(prefix, "CORRUPT-" + StepDirName(step) + ".json");
}

S3KeyInfo ParseS3Key(const std::string& prefix, const std::string& key) {
  S3KeyInfo info;
  const std::string head = prefix.empty() ? "" : prefix + "/";
  if (key.compare(0, head.size(), head) != 0) return info;
  const std::string rest = key.substr(head.size());
  const size_t slash = rest.find('/');
  if (slash == std::string::npos) return info;
  const RootEntry e = ParseRootEntry(rest.substr(0, slash));
  if (e.kind != EntryKind::kComplete) return info;
  info.step = e.step;
  const std::string inner = rest.substr(slash + 1);
  info.is_manifest = inner == kManifestName;
  const size_t s2 = inner.find('/');
  if (!info.is_manifest && inner.rfind("data-", 0) == 0 && s2 != std::string::npos) {
    info.data_dir = inner.substr(0, s2);
  }
  return info;
}

}  // namespace ftrain::ckpt
