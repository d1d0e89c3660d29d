// The memory tier's manifest, ROOT/MEMORY_TIER.json: the newest step whose snapshot every
// rank holds in two places (its own ckptd and that daemon's buddy), with each rank's snapshot
// digest (proto::SnapshotDigest) so that a restore checks every byte it takes from memory.
// One small file on the shared file system; it survives the node that died. Written only
// after the replicas were acknowledged, temp + fsync + rename + fsync of the root, and
// generation-fenced: a writer of an older job start never replaces a newer start's file.
// It names no files; the checkpoint directories (store.h) stay the disk tier's truth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"

namespace ftrain::ckpt {

struct MemoryManifest {
  int64_t step = -1;
  std::string generation;         // the job start that recorded it (store.h's generation ids)
  int world_size = 0;             // digests.size()
  std::string config_hash;        // of the run that took the snapshots
  std::vector<uint64_t> digests;  // per rank

  std::string ToJson() const;
  // Validates everything (format, version, step range, one digest per rank); `path` names
  // the file in the Corruption message.
  static StatusOr<MemoryManifest> FromJson(const std::string& text, const std::string& path);
};

// Reads ROOT/MEMORY_TIER.json: nullopt when absent; Corruption when unreadable.
StatusOr<std::optional<MemoryManifest>> ReadMemoryManifest(Env* env, const std::string& root);

// Records `m` durably. FailedPrecondition (nothing written) when the file holds a newer
// generation's record (a stale writer), or this generation's record of a newer step.
Status WriteMemoryManifest(Env* env, const std::string& root, const MemoryManifest& m);

// Drops the record when it names a step newer than `checked_step` (removes the file, then
// syncs the root): after silent data corruption was found, a snapshot that no passed replica
// check covers must not be restored (train/sdc_check.h). Returns the dropped step, or -1 when
// there is no record, it is not newer, or it cannot be parsed (resume ignores such a file).
// Errors: the removal or the sync failed (IOError naming the path).
StatusOr<int64_t> DropMemoryManifestNewerThan(Env* env, const std::string& root,
                                              int64_t checked_step);

}  // namespace ftrain::ckpt
