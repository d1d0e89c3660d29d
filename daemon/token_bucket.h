// The replication sender's bandwidth cap (--replication-mbps, FTRAIN_REPLICATION_MBPS): a
// token bucket, so that streaming a snapshot to the buddy leaves the network to the training's
// collectives. Tokens are bytes; they accrue at `rate` bytes per second up to `burst` bytes.
// Pure: the caller passes the time (seconds on any monotonic clock), so tests drive it with a
// fake one. Not thread-safe (the one replication thread owns it).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ftrain::ckptd {

class TokenBucket {
 public:
  // rate <= 0: unlimited (Reserve always answers 0). The bucket starts full.
  TokenBucket(double rate_bytes_per_s, double burst_bytes)
      : rate_(rate_bytes_per_s), burst_(std::max(burst_bytes, 1.0)), tokens_(burst_) {}

  bool limited() const { return rate_ > 0; }

  // Takes `bytes` at time `now_s` and returns how long the caller must wait before sending
  // them (0 when the bucket held enough). The tokens may go negative: a chunk larger than
  // the burst is paid for by the wait, and the next caller waits for the debt too, so the
  // long-run rate never exceeds `rate` however the chunks are sized.
  double Reserve(uint64_t bytes, double now_s) {
    if (!limited()) return 0;
    if (!started_) {
      last_s_ = now_s;
      started_ = true;
    }
    if (now_s > last_s_) {
      tokens_ = std::min(burst_, tokens_ + (now_s - last_s_) * rate_);
      last_s_ = now_s;
    }
    tokens_ -= static_cast<double>(bytes);
    return tokens_ >= 0 ? 0 : -tokens_ / rate_;
  }

 private:
  double rate_;
  double burst_;
  double tokens_;
  double last_s_ = 0;
  bool started_ = false;
};

}  // namespace ftrain::ckptd
