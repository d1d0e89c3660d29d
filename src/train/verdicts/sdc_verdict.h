// The verdict of the replica check for silent data corruption (issue 34, item 3): given
// every rank's hash of its fp32 master shard, which shard it holds and where it runs, which
// ranks hold bits their replicas do not. Replicas of a shard (hybrid_shard: the same local
// rank on every node; no_shard: every rank) are bit-identical after every step by
// construction, so any difference is a fault. With three or more replicas the majority's
// hash is taken as right and the others are named; with two (or no strict majority) every
// replica of that shard is named a suspect. A pure function: train/sdc_check.h gathers the
// inputs. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftrain::train {

// One rank's contribution to a check.
struct ReplicaHash {
  int rank = 0;
  int shard = 0;  // which shard it holds (replicas share it)
  int node = 0;   // its node index in the job
  uint64_t hash = 0;
};

struct SdcSuspect {
  int rank = 0;
  int node = 0;
  std::string host;
  int shard = 0;
};

struct SdcVerdict {
  bool ok = true;  // every shard's replicas agree
  // Every suspect was outvoted by a strict majority of its shard's replicas; false when some
  // shard's replicas split without one (two replicas: both are suspects).
  bool by_majority = true;
  std::vector<SdcSuspect> suspects;  // by rank
  int replicas = 0;                  // the largest replica count of a shard (0: none checked)
  // One line for the log: "rank 3 (node 1, host h2) disagrees with 3 replicas of shard 0".
  std::string summary;
};

// `hashes`: one entry per rank, in any order; `hosts[rank]` the rank's host ("?" when the
// vector is short). Shards with a single holder are not compared (nothing to compare with).
SdcVerdict JudgeReplicas(const std::vector<ReplicaHash>& hashes,
                         const std::vector<std::string>& hosts);

// Whether the replica check runs after step `step`: every `every` steps, and before every
// snapshot that a restart could take (`snapshot_due`: a disk checkpoint or a memory-tier
// snapshot), so that only checked steps are ever restorable (issue 44, hole 7). Never when
// `every` <= 0 (guard.sdc_every_steps off).
bool SdcCheckDue(int64_t step, int64_t every, bool snapshot_due);

}  // namespace ftrain::train
