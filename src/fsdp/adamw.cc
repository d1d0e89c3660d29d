// AdamW update on flat shards.
#include "fsdp/adamw.h"

#include <cmath>

namespace ftrain::fsdp {

void AdamWStep(const AdamWConfig& cfg, int64_t step, double lr, std::vector<torch::Tensor>& params,
               std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& exp_avgs,
               std::vector<torch::Tensor>& exp_avg_sqs) {
  torch::NoGradGuard no_grad;
  if (params.empty()) return;
  // The kernel reads the step count from a tensor on the shards' device (PyTorch's
  // state['step']); filling it is a device kernel, not a host synchronisation.
  const torch::Tensor step_t = torch::full({}, static_cast<double>(step), params[0].options());
  const std::vector<torch::Tensor> steps(params.size(), step_t);
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr,
                    cfg.beta1, cfg.beta2, cfg.weight_decay, cfg.eps, /*amsgrad=*/false,
                    /*maximize=*/false);
}

void AdamWStepElementwise(const AdamWConfig& cfg, int64_t step, double lr,
                          std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                          std::vector<torch::Tensor>& exp_avgs,
                          std::vector<torch::Tensor>& exp_avg_sqs) {
  torch::NoGradGuard no_grad;
  if (params.empty()) return;
  const double bias1 = 1 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bias2_sqrt = std::sqrt(1 - std::pow(cfg.beta2, static_cast<double>(step)));
  // Decoupled weight decay, then the moments, then the step: one basic operation at a time.
  at::_foreach_mul_(params, 1 - lr * cfg.weight_decay);
  at::_foreach_mul_(exp_avgs, cfg.beta1);
  at::_foreach_add_(exp_avgs, at::_foreach_mul(grads, 1 - cfg.beta1));
  at::_foreach_mul_(exp_avg_sqs, cfg.beta2);
  std::vector<torch::Tensor> g2 = at::_foreach_mul(grads, grads);
  at::_foreach_mul_(g2, 1 - cfg.beta2);
  at::_foreach_add_(exp_avg_sqs, g2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denom, bias2_sqrt);
  at::_foreach_add_(denom, cfg.eps);
  std::vector<torch::Tensor> update = at::_foreach_div(exp_avgs, denom);
  at::_foreach_mul_(update, -lr / bias1);
  at::_foreach_add_(params, update);
}

void AdamWUpdate(const AdamWConfig& cfg, int64_t step, double lr, torch::Tensor& param,
                 const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq) {
  if (param.numel() == 0) return;
  std::vector<torch::Tensor> p{param}, g{grad}, m{exp_avg}, v{exp_avg_sq};
  AdamWStep(cfg, step, lr, p, g, m, v);
}

double ClipCoefficient(double total_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 ? c : 1.0;
}

}  // namespace ftrain::fsdp
