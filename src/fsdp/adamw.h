// AdamW with decoupled weight decay on flat fp32 shards (PyTorch's torch.optim.AdamW update,
// non-amsgrad), and the global gradient-norm clip coefficient. Pure tensor math: no
// communication, no parameters other than what is passed in.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace ftrain::fsdp {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// One AdamW step over lists of shards (same lengths, fp32, one device): PyTorch's fused
// kernel (at::_fused_adamw_: one pass over each shard on a GPU, vectorised on the CPU).
// `step` is the optimizer step count after this update (1 for the first).
void AdamWStep(const AdamWConfig& cfg, int64_t step, double lr, std::vector<torch::Tensor>& params,
               std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& exp_avgs,
               std::vector<torch::Tensor>& exp_avg_sqs);

// The same update, element by element with one rounding per basic operation (mul, add, div,
// sqrt: each correctly rounded, so a vectorised lane and a scalar tail agree). The fused CPU
// kernel is not independent of where a shard starts: its scalar tail contracts
// beta2 v + (1 - beta2) g^2 differently from its vector body, so one element's bits depend on
// the shard boundaries. dist.reduce = exact uses this one. Not bit-identical to AdamWStep.
void AdamWStepElementwise(const AdamWConfig& cfg, int64_t step, double lr,
                          std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                          std::vector<torch::Tensor>& exp_avgs,
                          std::vector<torch::Tensor>& exp_avg_sqs);

// One AdamW step for one shard. `step` is the optimizer step count after this update (1 for
// the first). All tensors fp32, same length; param/exp_avg/exp_avg_sq are updated in place.
void AdamWUpdate(const AdamWConfig& cfg, int64_t step, double lr, torch::Tensor& param,
                 const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq);

// min(1, max_norm / (total_norm + 1e-6)), PyTorch's clip_grad_norm_ rule; 1 when max_norm<=0.
double ClipCoefficient(double total_norm, double max_norm);

}  // namespace ftrain::fsdp
