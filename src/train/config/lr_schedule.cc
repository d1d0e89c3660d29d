// Warm-up + cosine schedule.
#include "train/config/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ftrain::train {

double LrSchedule::At(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) {
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double ScaleLrLinearly(double peak_lr, int64_t effective_batch, int64_t base_batch) {
  if (base_batch <= 0) return peak_lr;
  return peak_lr * static_cast<double>(effective_batch) / static_cast<double>(base_batch);
}

}  // namespace ftrain::train
