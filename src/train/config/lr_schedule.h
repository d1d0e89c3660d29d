// Learning-rate schedule: linear warm-up from 0 to the peak, then cosine decay to min_lr at
// the last step. A pure function of the optimizer step, so a resumed run needs no state
// beyond the step count. The linear scaling rule (peak x effective batch / base batch) is
// applied by the caller when train.lr_scale_with_batch is on.
#pragma once

#include <cstdint>

namespace ftrain::train {

struct LrSchedule {
  double peak_lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // Learning rate used for optimizer step `step` (0-based: the first update is step 0).
  double At(int64_t step) const;
};

// peak x (effective_batch / base_batch); base_batch <= 0 leaves the peak unchanged.
double ScaleLrLinearly(double peak_lr, int64_t effective_batch, int64_t base_batch);

}  // namespace ftrain::train
