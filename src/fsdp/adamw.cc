// AdamW update on flat shards.
#include "fsdp/adamw.h"

#include <cmath>

namespace ftrain::fsdp {

void AdamWUpdate(const AdamWConfig& cfg, int64_t step, double lr, torch::Tensor& param,
                 const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  if (param.numel() == 0) return;
  param.mul_(1.0 - lr * cfg.weight_decay);
  exp_avg.mul_(cfg.beta1).add_(grad, 1.0 - cfg.beta1);
  exp_avg_sq.mul_(cfg.beta2).addcmul_(grad, grad, 1.0 - cfg.beta2);
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  const double step_size = lr / bc1;
  auto denom = (exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(cfg.eps);
  param.addcdiv_(exp_avg, denom, -step_size);
}

double ClipCoefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

}  // namespace ftrain::fsdp
