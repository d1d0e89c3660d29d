// Every name in a checkpoint root is built and parsed here, and nowhere else:
//   step-00000120/            a complete checkpoint (the only kind ever chosen for resume)
//   step-00000120.partial/    being written; never chosen
//   step-00000120.deleting/   being removed by rotation; never chosen
//   step-00000120.restore/    being restored from the S3 mirror (s3_store.h); never chosen
//   step-00000120.corrupt/    failed verification at resume, moved aside as evidence; never
//                             chosen, never deleted by rotation (ckptctl prune --corrupt)
//   LATEST                    "step-00000120\n": a hint, written temp + fsync + rename
//   MEMORY_TIER.json          the newest step restorable from the daemons' memory
//                             (memory_manifest.h), written temp + fsync + rename
//   S3_ROOT                   "s3://B/P\n" then "key=value\n" upload settings: this root stages
//                             checkpoints for ckpt.root = s3://B/P (s3_staging.h); a step
//                             counts as committed once S3 holds it
//   S3_LATEST                 "step-00000120\n": the newest step committed on S3 from here
//   inside a checkpoint: manifest.json, shard-00003.h5, shard-00003.json (receipt), COMMIT
#pragma once

#include <cstdint>
#include <string>

namespace ftrain::ckpt {

enum class EntryKind { kComplete, kPartial, kDeleting, kCorrupt, kOther };

struct RootEntry {
  EntryKind kind = EntryKind::kOther;
  int64_t step = -1;
};

constexpr int64_t kMaxStep = 99999999;  // 8 digits
constexpr int kMaxWorldSize = 99999;    // 5 digits

std::string StepDirName(int64_t step);      // step-00000120
std::string PartialDirName(int64_t step);   // step-00000120.partial
std::string DeletingDirName(int64_t step);  // step-00000120.deleting
// step-00000120.restore: being downloaded from the S3 mirror at a start (ckpt/s3_store.h);
// never chosen, removed by the next restore
std::string RestoreDirName(int64_t step);
// step-00000120.corrupt, or step-00000120.corrupt-N for the Nth time that step was set aside
std::string CorruptDirName(int64_t step, int n = 1);
RootEntry ParseRootEntry(const std::string& name);

std::string ShardFileName(int rank);  // shard-00003.h5
// shard-00003.h5.tmp.<pid>.<n>: unique per writer, so two writers of one rank (a late daemon,
// a trainer that fell back to a synchronous save) never write into each other's file.
std::string ShardTempName(int rank);
std::string ReceiptFileName(int rank);  // shard-00003.json
// Parses "shard-00003.h5"; -1 if it is not a shard file name.
int ParseShardFileName(const std::string& name);

constexpr char kManifestName[] = "manifest.json";
constexpr char kLatestName[] = "LATEST";
constexpr char kMemoryManifestName[] = "MEMORY_TIER.json";
constexpr char kCommitMarkerName[] = "COMMIT";
constexpr char kS3RootName[] = "S3_ROOT";
constexpr char kS3LatestName[] = "S3_LATEST";
// In step-N.partial/: the generation (job start) whose writers own it; see store.h.
constexpr char kGenerationName[] = "GENERATION";

// A path read from a manifest: relative, no "..", no "/", no empty or hidden components.
bool IsSafeRelativeName(const std::string& name);

}  // namespace ftrain::ckpt
