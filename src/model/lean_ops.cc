#include "model/lean_ops.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace ftrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd's MulBackward0 for a product a * b that broadcast: the gradient of `self` in its
// dtype, summed to its shape (what the engine's validate_outputs does).
torch::Tensor MulGrad(const torch::Tensor& grad, const torch::Tensor& other,
                      const torch::Tensor& self) {
  torch::Tensor g = (grad * other).to(self.scalar_type());
  return g.sizes() == self.sizes() ? g : at::sum_to(g, self.sizes());
}

class RmsNormFn : public torch::autograd::Function<RmsNormFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    const torch::Tensor xf = x.to(at::kFloat);
    const torch::Tensor r = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    ctx->save_for_backward({x, weight, r});
    return weight * (xf * r).to(x.scalar_type());
  }

  // The eager chain's derivatives, each as derivatives.yaml states it: mul, the cast, mul by r,
  // rsqrt (-0.5 * grad * r^3), mean (expand / n) and pow (grad * 2 x); the two paths into the
  // float32 x add as autograd's input buffer adds them.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &r = saved[2];
    const torch::Tensor& g = grad_out[0];
    const torch::Tensor xf = x.to(at::kFloat);
    const torch::Tensor normed = (xf * r).to(x.scalar_type());
    torch::Tensor grad_weight;
    if (weight.requires_grad()) grad_weight = MulGrad(g, normed, weight);
    const torch::Tensor grad_normed = MulGrad(g, weight, normed).to(at::kFloat);
    const torch::Tensor via_product = MulGrad(grad_normed, r, xf);
    const torch::Tensor grad_r = MulGrad(grad_normed, xf, r);
    const torch::Tensor grad_mean = -0.5 * grad_r * r.pow(3);
    const torch::Tensor grad_square =
        grad_mean.expand(xf.sizes()) / static_cast<double>(xf.size(-1));
    const torch::Tensor via_square = grad_square * (xf * 2);
    return {(via_product + via_square).to(x.scalar_type()), grad_weight, torch::Tensor()};
  }
};

class SwiGluFn : public torch::autograd::Function<SwiGluFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return at::silu(gate) * up;
  }

  // MulBackward0 for both factors, then SiluBackward0 (at::silu_backward) for the gate.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &gate = saved[0], &up = saved[1];
    const torch::Tensor& g = grad_out[0];
    const torch::Tensor activated = at::silu(gate);
    const torch::Tensor grad_up = MulGrad(g, activated, up);
    const torch::Tensor grad_activated = MulGrad(g, up, activated);
    return {at::silu_backward(grad_activated, gate), grad_up};
  }
};

}  // namespace

torch::Tensor LeanRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFn::apply(x, weight, eps);
}

torch::Tensor LeanSwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  return SwiGluFn::apply(gate, up);
}

}  // namespace ftrain::model
