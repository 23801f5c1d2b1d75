// PyTorch 2.11's optimizers as Python's torch.optim runs them, op for op: SGD (plain and
// momentum), Adam and AdamW, each as a for-loop (`_single_tensor_*`), foreach
// (`_multi_tensor_*`, whole-model `_foreach_*` ops) and fused (`_fused_*_`) implementation.
//
// Why C++: tch binds none of the `_foreach_*` / `_fused_*` ops, and the memory of a step is the
// temporaries' sizes *and lifetimes*. Python frees a temporary when its last name is rebound, so
// a for-loop's `denom` of one parameter lives until the next parameter's is made; the locals
// below are declared outside the loops for that reason, and expressions are split where Python
// frees an intermediate before the next call. Each function names the Python it mirrors.
//
// Not mirrored, as they change no tensor in this model: maximize, amsgrad, nesterov,
// dampening, capturable, differentiable, complex parameters, tensor lr. Parameters are one
// device and dtype, so `_group_tensors_by_device_and_dtype` makes one group.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "guarded.h"
#include "log.h"

#include <cmath>
#include <optional>
#include <vector>

namespace {

enum Kind { SGD = 0, ADAM = 1, ADAMW = 2 };
enum Impl { FOR_LOOP = 0, FOREACH = 1, FUSED = 2 };

struct Optim {
  Kind kind;
  Impl impl;
  double lr, momentum, weight_decay;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::vector<at::Tensor> params;
  // Parameters without a gradient at the first step (frozen, or unused by the forward):
  // torch.optim skips them (`if p.grad is not None`) and so makes them no state.
  std::vector<at::Tensor> idle;
  bool sorted = false;
  // Adam's state, made for every parameter at the first step (`_init_group`).
  std::vector<at::Tensor> steps, exp_avgs, exp_avg_sqs;
  // SGD's momentum buffers; empty until the first step makes them.
  std::vector<at::Tensor> bufs;
};

using oomlab::guarded;
// torch.optim keeps a step counter on the host unless fused (log.h).
using oomlab::OnHost;

// ---- Adam and AdamW (torch/optim/adam.py; AdamW is Adam with decoupled_weight_decay) ----

// `Adam._init_group`: lazily, parameter by parameter, `step` (a 0-d float32, on the CPU unless
// fused), then `exp_avg` and `exp_avg_sq` as zeros_like.
void adam_init(Optim& o) {
  if (!o.steps.empty()) return;
  for (const auto& p : o.params) {
    if (o.impl == FUSED) {
      o.steps.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
    } else {
      OnHost host;
      o.steps.push_back(at::zeros({}, at::TensorOptions().dtype(at::kFloat)));
    }
    o.exp_avgs.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    o.exp_avg_sqs.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
  }
}

// `_single_tensor_adam`, not capturable.
void adam_for_loop(Optim& o, const std::vector<at::Tensor>& grads) {
  const bool decoupled = o.kind == ADAMW;
  at::Tensor grad, denom;  // Python's locals: each lives until it is rebound
  for (size_t i = 0; i < o.params.size(); ++i) {
    auto& param = o.params[i];
    grad = grads[i];
    {
      OnHost host;
      o.steps[i].add_(1);
    }
    if (o.weight_decay != 0) {
      if (decoupled) {
        param.mul_(1 - o.lr * o.weight_decay);
      } else {
        grad = grad.add(param, o.weight_decay);
      }
    }
    o.exp_avgs[i].lerp_(grad, 1 - o.beta1);
    o.exp_avg_sqs[i].mul_(o.beta2).addcmul_(grad, grad, 1 - o.beta2);
    const double step = o.steps[i].item<double>();
    const double bias_correction1 = 1 - std::pow(o.beta1, step);
    const double bias_correction2 = 1 - std::pow(o.beta2, step);
    const double step_size = o.lr / bias_correction1;
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
    at::Tensor quotient;
    {
      // `exp_avg_sq.sqrt() / bias_correction2_sqrt`: the sqrt goes before `.add_(eps)`.
      at::Tensor root = o.exp_avg_sqs[i].sqrt();
      quotient = root / bias_correction2_sqrt;
    }
    quotient.add_(o.eps);
    denom = std::move(quotient);  // the previous parameter's denom goes only now
    param.addcdiv_(o.exp_avgs[i], denom, -step_size);
  }
}

// `_multi_tensor_adam`, not capturable, state steps on the CPU.
void adam_foreach(Optim& o, const std::vector<at::Tensor>& grads) {
  const bool decoupled = o.kind == ADAMW;
  {
    OnHost host;
    at::Tensor one = at::scalar_tensor(1.0, at::TensorOptions().dtype(at::kFloat));
    at::_foreach_add_(o.steps, one, 1.0);
  }
  std::vector<at::Tensor> device_grads = grads;
  if (o.weight_decay != 0) {
    if (decoupled) {
      at::_foreach_mul_(o.params, 1 - o.lr * o.weight_decay);
    } else {
      device_grads = at::_foreach_add(device_grads, o.params, o.weight_decay);
    }
  }
  at::_foreach_lerp_(o.exp_avgs, device_grads, 1 - o.beta1);
  at::_foreach_mul_(o.exp_avg_sqs, o.beta2);
  at::_foreach_addcmul_(o.exp_avg_sqs, device_grads, device_grads, 1 - o.beta2);
  device_grads.clear();  // `del device_grads`
  std::vector<at::Scalar> step_size, bias_correction2_sqrt;
  for (const auto& s : o.steps) {
    const double step = s.item<double>();
    const double bc1 = 1 - std::pow(o.beta1, step);
    const double bc2 = 1 - std::pow(o.beta2, step);
    step_size.emplace_back((o.lr / bc1) * -1);
    bias_correction2_sqrt.emplace_back(std::pow(bc2, 0.5));
  }
  std::vector<at::Tensor> exp_avg_sq_sqrt = at::_foreach_sqrt(o.exp_avg_sqs);
  at::_foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt);
  at::_foreach_add_(exp_avg_sq_sqrt, o.eps);
  at::_foreach_addcdiv_(o.params, o.exp_avgs, exp_avg_sq_sqrt, step_size);
}

// `_fused_adam`: state steps on the device; with a grad scaler the kernel unscales the
// gradients itself and skips the update where found_inf is set, and the steps are taken back.
void adam_fused(Optim& o, const std::vector<at::Tensor>& grads,
                const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  at::_foreach_add_(o.steps, 1);
  const std::vector<at::Tensor> none;
  if (o.kind == ADAMW) {
    at::_fused_adamw_(o.params, grads, o.exp_avgs, o.exp_avg_sqs, none, o.steps, o.lr, o.beta1,
                      o.beta2, o.weight_decay, o.eps, false, false, grad_scale, found_inf);
  } else {
    at::_fused_adam_(o.params, grads, o.exp_avgs, o.exp_avg_sqs, none, o.steps, o.lr, o.beta1,
                     o.beta2, o.weight_decay, o.eps, false, false, grad_scale, found_inf);
  }
  if (found_inf.has_value()) {
    std::vector<at::Tensor> infs(o.steps.size(), *found_inf);
    at::_foreach_sub_(o.steps, infs);
  }
}

// ---- SGD (torch/optim/sgd.py), dampening 0, no nesterov ----

// `_single_tensor_sgd`.
void sgd_for_loop(Optim& o, const std::vector<at::Tensor>& grads) {
  const bool first = o.bufs.empty();
  std::vector<at::Tensor> made;
  at::Tensor grad;
  for (size_t i = 0; i < o.params.size(); ++i) {
    grad = grads[i];
    if (o.weight_decay != 0) grad = grad.add(o.params[i], o.weight_decay);
    if (o.momentum != 0) {
      if (first) {
        made.push_back(grad.detach().clone());
        grad = made.back();
      } else {
        o.bufs[i].mul_(o.momentum).add_(grad, 1.0);
        grad = o.bufs[i];
      }
    }
    o.params[i].add_(grad, -o.lr);
  }
  if (first && o.momentum != 0) o.bufs = std::move(made);
}

// `_multi_tensor_sgd`.
void sgd_foreach(Optim& o, const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> device_grads = grads;
  if (o.weight_decay != 0) device_grads = at::_foreach_add(device_grads, o.params, o.weight_decay);
  if (o.momentum != 0) {
    if (!o.bufs.empty()) {
      at::_foreach_mul_(o.bufs, o.momentum);
      at::_foreach_add_(o.bufs, device_grads, 1.0);
    } else {
      for (const auto& g : device_grads) o.bufs.push_back(g.detach().clone());
    }
    device_grads = o.bufs;
  }
  at::_foreach_add_(o.params, device_grads, -o.lr);
}

// `_fused_sgd`: the first step with momentum makes the buffers with empty_like and the kernel
// fills them.
void sgd_fused(Optim& o, const std::vector<at::Tensor>& grads,
               const std::optional<at::Tensor>& grad_scale,
               const std::optional<at::Tensor>& found_inf) {
  const bool no_buffer = o.momentum == 0;
  const bool first = o.bufs.empty() && !no_buffer;
  if (first) {
    for (const auto& g : grads) o.bufs.push_back(at::empty_like(g));
  }
  const std::vector<at::Tensor> none;
  at::_fused_sgd_(o.params, grads, no_buffer ? none : o.bufs, o.weight_decay, o.momentum, o.lr,
                  0.0, false, false, first, grad_scale, found_inf);
}

}  // namespace

extern "C" {

// params: `n` pointers to at::Tensor (tch's C_tensor). Returns an owned optimizer or null.
void* oomlab_optim_new(int kind, int impl, void* const* params, size_t n, double lr,
                       double momentum, double weight_decay, char* err, size_t len) noexcept {
  Optim* out = nullptr;
  guarded(err, len, [&] {
    TORCH_CHECK(kind >= SGD && kind <= ADAMW, "unknown optimizer kind ", kind);
    TORCH_CHECK(impl >= FOR_LOOP && impl <= FUSED, "unknown optimizer implementation ", impl);
    auto o = new Optim{static_cast<Kind>(kind), static_cast<Impl>(impl), lr, momentum,
                       weight_decay};
    for (size_t i = 0; i < n; ++i) o->params.push_back(*static_cast<at::Tensor*>(params[i]));
    out = o;
  });
  return out;
}

void oomlab_optim_free(void* o) noexcept { delete static_cast<Optim*>(o); }

// One step. grad_scale and found_inf (0-d tensors, or null) are the grad scaler's, for fused
// implementations only (PyTorch's `_step_supports_amp_scaling`).
int oomlab_optim_step(void* raw, void* grad_scale, void* found_inf, char* err,
                      size_t len) noexcept {
  return guarded(err, len, [&] {
    auto& o = *static_cast<Optim*>(raw);
    at::NoGradGuard no_grad;
    // A ZeRO rank that owns no parameter (a world larger than the model's parameters): its
    // local optimizer steps over nothing, as torch.optim's do (the multi-tensor and fused
    // implementations return before making anything).
    if (o.params.empty() && o.idle.empty()) return;
    if (!o.sorted) {
      std::vector<at::Tensor> with_grad;
      for (const auto& p : o.params) (p.grad().defined() ? with_grad : o.idle).push_back(p);
      TORCH_CHECK(!with_grad.empty(),
                  "no parameter has a gradient after the backward: the model trains nothing "
                  "(every parameter frozen with requires_grad = False, or the output detached)");
      o.params = std::move(with_grad);
      o.sorted = true;
    }
    // The set is kept from the first step on: torch.optim would follow one that changes (a
    // branch taken at some steps only), with state made at a parameter's first gradient,
    // which oomlab does not model.
    for (const auto& p : o.idle)
      TORCH_CHECK(!p.grad().defined(),
                  "a parameter without a gradient at the first step has one now: oomlab's "
                  "optimizers keep the first step's set of parameters (a forward whose branches "
                  "use other parameters at other steps is not supported)");
    std::vector<at::Tensor> grads;
    for (const auto& p : o.params) {
      TORCH_CHECK(p.grad().defined(),
                  "a parameter with a gradient at the first step has none now: oomlab's "
                  "optimizers keep the first step's set of parameters (a forward whose branches "
                  "use other parameters at other steps is not supported)");
      grads.push_back(p.grad());
    }
    std::optional<at::Tensor> scale, inf;
    if (grad_scale != nullptr) scale = *static_cast<at::Tensor*>(grad_scale);
    if (found_inf != nullptr) inf = *static_cast<at::Tensor*>(found_inf);
    TORCH_CHECK(o.impl == FUSED || !scale.has_value(), "only a fused step takes the grad scale");
    if (o.kind == SGD) {
      switch (o.impl) {
        case FOR_LOOP: sgd_for_loop(o, grads); break;
        case FOREACH: sgd_foreach(o, grads); break;
        case FUSED: sgd_fused(o, grads, scale, inf); break;
      }
    } else {
      adam_init(o);
      switch (o.impl) {
        case FOR_LOOP: adam_for_loop(o, grads); break;
        case FOREACH: adam_foreach(o, grads); break;
        case FUSED: adam_fused(o, grads, scale, inf); break;
      }
    }
  });
}

// `zero_grad(set_to_none=True)`: every gradient goes, in parameter order.
void oomlab_optim_zero_grad(void* raw) noexcept {
  for (auto& p : static_cast<Optim*>(raw)->params) p.mutable_grad().reset();
}

// ZeroRedundancyOptimizer.zero_grad() (Optimizer's, over every parameter, where the local
// optimizer holds the rank's shard only): each gradient set to none, in the order given.
void oomlab_grads_reset(void* const* params, size_t n) noexcept {
  for (size_t i = 0; i < n; ++i) static_cast<at::Tensor*>(params[i])->mutable_grad().reset();
}

}  // extern "C"
