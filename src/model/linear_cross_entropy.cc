// LinearCrossEntropy (see linear_cross_entropy.h): chunked head + loss whose gradients are
// computed in the forward, as a custom autograd function.
#include "model/linear_cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

namespace ftrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// acc (float32 [V, H]) += dl^T @ hc, the products accumulated in float32: on a GPU straight
// from the compute dtype (cuBLAS's float32 output), on the CPU (which has no such kernel) from
// float32 copies of the chunk.
void AddWeightGrad(torch::Tensor& acc, const torch::Tensor& dl, const torch::Tensor& hc) {
  if (dl.scalar_type() == at::kFloat) {
    acc.addmm_(dl.t(), hc);
  } else if (dl.is_cuda()) {
    at::addmm_out(acc, acc, dl.t(), hc, at::kFloat);
  } else {
    acc.addmm_(dl.t().to(at::kFloat), hc.to(at::kFloat));
  }
}

// One chunk: its summed loss (float32 scalar) and, when `dl` is wanted, d(mean loss)/d logits
// (softmax - one-hot, over n_total) in the compute dtype.
torch::Tensor ChunkLoss(const torch::Tensor& hc, const torch::Tensor& w, const torch::Tensor& tc,
                        int64_t n_total, torch::Tensor* dl) {
  torch::Tensor logits = at::linear(hc, w).to(at::kFloat);  // [n, V], as Head computes them
  const torch::Tensor lse = at::logsumexp(logits, 1);
  const torch::Tensor t1 = tc.unsqueeze(1);
  const torch::Tensor picked = logits.gather(1, t1).squeeze(1);
  torch::Tensor loss = (lse - picked).sum();
  if (dl == nullptr) return loss;
  torch::Tensor p = logits.sub_(lse.unsqueeze(1)).exp_();  // softmax, in the logits' memory
  const int64_t n = hc.size(0), v = w.size(0);
  // The one-hot: one index per row, so a plain (deterministic) index_put.
  const torch::Tensor flat = at::arange(n, tc.options()) * v + tc;
  p.view({-1}).index_put_({flat}, p.view({-1}).index({flat}) - 1.0);
  *dl = p.div_(static_cast<double>(n_total)).to(hc.scalar_type());
  return loss;
}

class LinearCrossEntropyFn : public torch::autograd::Function<LinearCrossEntropyFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& w,
                               const torch::Tensor& targets, int64_t chunk) {
    const int64_t n = h.size(0);
    torch::Tensor loss = at::zeros({}, h.options().dtype(at::kFloat));
    torch::Tensor grad_h = at::empty_like(h);
    torch::Tensor grad_w = at::zeros(w.sizes(), w.options().dtype(at::kFloat));
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t len = std::min(chunk, n - s);
      const torch::Tensor hc = h.narrow(0, s, len);
      torch::Tensor dl;
      loss.add_(ChunkLoss(hc, w, targets.narrow(0, s, len), n, &dl));
      grad_h.narrow(0, s, len).copy_(at::mm(dl, w));
      AddWeightGrad(grad_w, dl, hc);
    }
    ctx->saved_data["grad_h"] = grad_h;
    ctx->saved_data["grad_w"] = grad_w;
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return loss.div_(static_cast<double>(n));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const torch::Tensor g = grad_out[0];
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    // Scaled in place: the saved gradients are this backward's alone (no retain_graph).
    torch::Tensor grad_h = ctx->saved_data["grad_h"].toTensor().mul_(g);
    torch::Tensor grad_w = ctx->saved_data["grad_w"].toTensor().mul_(g).to(w_dtype);
    ctx->saved_data.clear();
    return {grad_h, grad_w, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LinearCrossEntropy(const torch::Tensor& h, const torch::Tensor& weight,
                                 const torch::Tensor& targets, int64_t chunk_tokens) {
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens : LossChunkTokens(weight.size(0));
  const bool grads = torch::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
  if (grads) return LinearCrossEntropyFn::apply(h, weight, targets, chunk);
  torch::NoGradGuard no_grad;
  torch::Tensor loss = at::zeros({}, h.options().dtype(at::kFloat));
  const int64_t n = h.size(0);
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t len = std::min(chunk, n - s);
    loss.add_(ChunkLoss(h.narrow(0, s, len), weight, targets.narrow(0, s, len), n, nullptr));
  }
  return loss.div_(static_cast<double>(n));
}

}  // namespace ftrain::model
