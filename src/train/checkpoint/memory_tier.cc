// The memory tier (memory_tier.h): due rule, hand-over, the restorable rule and its record.
#include "train/checkpoint/memory_tier.h"

#include <algorithm>

#include "ckpt/memory_manifest.h"
#include "core/env.h"
#include "core/log.h"
#include "train/checkpoint/sink.h"

namespace ftrain::train {
namespace {

// Whether to log the nth occurrence of a repeated warning: the first ten, then every 100th.
bool Loggable(int64_t n) { return n <= 10 || n % 100 == 0; }

}  // namespace

MemoryTier::MemoryTier(MemoryTierOptions options, CheckpointSink* sink)
    : options_(std::move(options)), sink_(sink) {}

double MemoryTier::Take(const ckpt::CheckpointMeta& meta, const ckpt::ShardContents& contents) {
  // Every rank remembers the step, taken or not, so that Confirm stays the same collective
  // everywhere; a rank that skipped it says "not held" there.
  pending_.push_back(meta.step);
  if (pending_.size() > kMaxPending) {
    Forget(pending_.front(), "newer snapshots came first");
    pending_.erase(pending_.begin());
  }
  auto out = sink_->SaveMemory(meta, contents);
  if (!out.ok()) {
    ++skipped_;
    if (Loggable(skipped_)) {
      FT_LOG(Warning) << "memory tier: rank " << options_.rank << " SKIPPED the memory snapshot of "
                      << "step " << meta.step << ": " << out.status().message()
                      << " (training goes on; the disk tier is unaffected; " << skipped_
                      << " skipped so far)";
    }
    return 0;
  }
  return out->stall_s;
}

void MemoryTier::Forget(int64_t step, const std::string& why) {
  ++unconfirmed_;
  if (options_.leader && Loggable(unconfirmed_)) {
    FT_LOG(Warning) << "memory tier: step " << step << " never became restorable from memory ("
                    << why << "; it was not held by every rank's daemon and its buddy in time); "
                    << "the newest restorable step stays " << restorable_step_ << " ("
                    << unconfirmed_ << " so far; see `ckptctl status` for slow buddies)";
  }
}

bool MemoryTier::PassForPending(int64_t step) {
  if (!ShouldPass(pending_.size(), restorable_step_, passed_)) {
    passed_ = 0;
    return false;
  }
  ++passed_;
  ++passed_total_;
  if (options_.leader && Loggable(passed_total_)) {
    FT_LOG(Warning) << "memory tier: passed the snapshot of step " << step << ": step "
                    << pending_.back() << " is not yet held by every buddy, and a new snapshot "
                    << "would evict step " << restorable_step_ << ", the newest restorable from "
                    << "memory (" << passed_total_ << " passed so far; replication is slower than "
                    << "the memory interval: raise ckpt.memory_every_steps or "
                    << "FTRAIN_REPLICATION_MBPS)";
  }
  return true;
}

Status MemoryTier::Confirm(const ckpt::CheckpointMeta& identity, int64_t step, bool force) {
  if (pending_.empty()) return Status::Ok();
  const int64_t since = step - pending_.back();
  if (since <= 0) return Status::Ok();
  if (!force && (since & (since - 1)) != 0) return Status::Ok();  // 1, 2, 4, 8, ...
  const std::map<int64_t, uint64_t> held = sink_->MemoryHeldTwice();
  // Per pending step: [missing ranks, then each rank's digest as two exact 32-bit halves].
  const int w = options_.world;
  const size_t stride = 1 + 2 * static_cast<size_t>(w);
  std::vector<double> v(pending_.size() * stride, 0.0);
  for (size_t i = 0; i < pending_.size(); ++i) {
    const auto it = held.find(pending_[i]);
    double* row = v.data() + i * stride;
    if (it == held.end()) {
      row[0] = 1;
      continue;
    }
    row[1 + 2 * options_.rank] = static_cast<double>(it->second & 0xffffffffu);
    row[2 + 2 * options_.rank] = static_cast<double>(it->second >> 32);
  }
  FT_RETURN_IF_ERROR(sink_->ReduceSum(v.data(), static_cast<int>(v.size())));
  for (size_t i = pending_.size(); i-- > 0;) {
    const double* row = v.data() + i * stride;
    if (row[0] != 0) continue;
    ckpt::MemoryManifest m;
    m.step = pending_[i];
    m.generation = identity.generation;
    m.world_size = w;
    m.config_hash = identity.config_hash;
    for (int r = 0; r < w; ++r) {
      m.digests.push_back(static_cast<uint64_t>(row[1 + 2 * r]) |
                          (static_cast<uint64_t>(row[2 + 2 * r]) << 32));
    }
    if (options_.leader) {
      Status s = ckpt::WriteMemoryManifest(sink_->env(), options_.root, m);
      if (!s.ok()) {
        FT_LOG(Error) << "memory tier: cannot record step " << m.step
                      << " as restorable from memory: " << s.message()
                      << " (recovery falls back to the previous record or the disk)";
      } else {
        FT_LOG(Debug) << "memory tier: step " << m.step << " restorable from memory";
      }
    }
    restorable_step_ = m.step;
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    break;
  }
  return Status::Ok();
}

}  // namespace ftrain::train
