// The replica check's verdict (sdc_verdict.h).
#include "train/verdicts/sdc_verdict.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace ftrain::train {

namespace {

// The hash held by a strict majority of `group`, if any.
bool MajorityHash(const std::vector<ReplicaHash>& group, uint64_t* out) {
  std::map<uint64_t, size_t> count;
  for (const ReplicaHash& h : group) ++count[h.hash];
  for (const auto& [hash, n] : count) {
    if (2 * n > group.size()) {
      *out = hash;
      return true;
    }
  }
  return false;
}

SdcSuspect SuspectOf(const ReplicaHash& h, const std::vector<std::string>& hosts) {
  SdcSuspect s;
  s.rank = h.rank;
  s.node = h.node;
  s.shard = h.shard;
  s.host = h.rank >= 0 && static_cast<size_t>(h.rank) < hosts.size()
               ? hosts[static_cast<size_t>(h.rank)]
               : "?";
  return s;
}

}  // namespace

SdcVerdict JudgeReplicas(const std::vector<ReplicaHash>& hashes,
                         const std::vector<std::string>& hosts) {
  std::map<int, std::vector<ReplicaHash>> by_shard;
  for (const ReplicaHash& h : hashes) by_shard[h.shard].push_back(h);
  SdcVerdict v;
  std::ostringstream why;
  for (const auto& [shard, group] : by_shard) {
    v.replicas = std::max(v.replicas, static_cast<int>(group.size()));
    if (group.size() < 2) continue;
    const bool agree = std::all_of(group.begin(), group.end(),
                                   [&](const ReplicaHash& h) { return h.hash == group[0].hash; });
    if (agree) continue;
    v.ok = false;
    uint64_t right = 0;
    const bool majority = MajorityHash(group, &right);
    v.by_majority = v.by_majority && majority;
    for (const ReplicaHash& h : group) {
      if (majority && h.hash == right) continue;
      const SdcSuspect s = SuspectOf(h, hosts);
      if (!why.str().empty()) why << "; ";
      why << "rank " << s.rank << " (node " << s.node << ", host " << s.host << ") "
          << (majority ? "disagrees with the majority of " : "cannot be told from ") << group.size()
          << " replicas of shard " << shard;
      v.suspects.push_back(s);
    }
  }
  std::sort(v.suspects.begin(), v.suspects.end(),
            [](const SdcSuspect& a, const SdcSuspect& b) { return a.rank < b.rank; });
  if (v.ok) v.by_majority = false;
  v.summary = why.str();
  return v;
}

bool SdcCheckDue(int64_t step, int64_t every, bool snapshot_due) {
  if (every <= 0) return false;
  return snapshot_due || step % every == 0;
}

}  // namespace ftrain::train
