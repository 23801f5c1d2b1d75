// Meta kernels for libtorch 2.11 ops that PyTorch registers for the meta device only from Python
// (torch/_meta_registrations.py, torch/_decomp), so that a training step of a TorchScript model
// runs on the meta device from plain C++.
//
// Rule for every kernel: allocate the outputs, and only the outputs, with at::empty /
// at::empty_strided / at::empty_like / TensorIterator on the input's options, with the sizes,
// dtypes and strides (memory format) the CPU kernel's outputs have. Temporaries the CPU kernel
// makes (scratch, casts, column buffers) are not allocated. Each kernel names the CPU kernel it
// mirrors (aten/src/ATen/native/...).
//
// One exception, CUDA's memory-efficient attention (below), which the CPU does not have: its
// kernels allocate everything CUDA's do on the device, temporaries included, because no replay
// adds them afterwards.
//
// `oomlab_meta_register` registers them, once: the shape functions for the Meta key, and
// scaled_dot_product_attention's backend choice for AutogradMeta.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/SDPBackend.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <torch/library.h>

#include <atomic>
#include <limits>

namespace oomlab_meta {
using namespace at;

// ---------------------------------------------------------------- convolution
// The meta device takes ConvBackend::Overrideable in at::_convolution (Convolution.cpp), so the
// CPU's backend (mkldnn_convolution, _slow_conv2d_forward, thnn depthwise...) is not reached.
// Mirrors the output of at::_convolution on the CPU: conv_output_size / conv_input_size, in the
// memory format the input suggests (the CPU backends return their output in that format).
Tensor convolution_overrideable(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                                IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                                IntArrayRef output_padding, int64_t groups) {
  std::vector<int64_t> shape;
  if (!transposed) {
    shape = at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
  } else {
    shape = at::native::conv_input_size(input.sizes(), weight.sizes(), padding, output_padding, stride, dilation,
                                        groups);
  }
  return at::empty(shape, input.options().memory_format(input.suggest_memory_format()));
}

// Mirrors at::convolution_backward on the CPU (Convolution.cpp): grad_input like the input,
// grad_weight like the weight, grad_bias [out_channels], each only where output_mask asks.
std::tuple<Tensor, Tensor, Tensor> convolution_backward_overrideable(
    const Tensor& grad, const Tensor& input, const Tensor& weight, IntArrayRef stride, IntArrayRef padding,
    IntArrayRef dilation, bool transposed, IntArrayRef output_padding, int64_t groups, std::array<bool, 3> mask) {
  Tensor gi, gw, gb;
  if (mask[0]) gi = at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  if (mask[1]) gw = at::empty(weight.sizes(), weight.options().memory_format(weight.suggest_memory_format()));
  if (mask[2]) gb = at::empty({transposed ? weight.size(1) * groups : weight.size(0)}, weight.options());
  return {gi, gw, gb};
}

// ---------------------------------------------------------------- indexing
// Mirrors index_select_cpu_ (TensorAdvancedIndexing.cpp): self's sizes with dim = index.numel(),
// contiguous.
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  auto sizes = self.sizes().vec();
  if (sizes.empty()) return at::empty({}, self.options());
  dim = c10::maybe_wrap_dim(dim, self.dim());
  sizes[dim] = index.numel();
  return at::empty(sizes, self.options());
}

// Mirrors embedding_dense_backward_cpu (Embedding.cpp): grad_weight = zeros({num_weights,
// grad.size(-1)}) in grad's options (its sort/count buffers are temporaries).
Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, c10::SymInt num_weights,
                                c10::SymInt padding_idx, bool scale_grad_by_freq) {
  return at::empty({num_weights.expect_int(), grad.size(-1)}, grad.options());
}

// ---------------------------------------------------------------- normalization
// Mirrors batch_norm_cpu (Normalization.cpp): output = empty_like(input, suggested format);
// save_mean / save_invstd are [C] in training and [0] in eval, in float for mixed types
// (a reduced-precision input with float parameters) and in the input's dtype otherwise.
std::tuple<Tensor, Tensor, Tensor> native_batch_norm(const Tensor& input, const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias,
                                                     const std::optional<Tensor>& running_mean,
                                                     const std::optional<Tensor>& running_var, bool training,
                                                     double momentum, double eps) {
  const bool reduced = input.scalar_type() == kHalf || input.scalar_type() == kBFloat16;
  const bool mixed = reduced && weight.has_value() && weight->defined() && weight->scalar_type() == kFloat;
  const auto dtype = mixed ? kFloat : input.scalar_type();
  Tensor out = at::empty_like(input, input.suggest_memory_format());
  const int64_t c = training ? input.size(1) : 0;
  Tensor save_mean = at::empty({c}, input.options().dtype(dtype));
  Tensor save_invstd = at::empty({c}, input.options().dtype(dtype));
  return {out, save_mean, save_invstd};
}

// Mirrors batch_norm_backward_cpu (Normalization.cpp): grad_input = empty_like(input, suggested
// format); grad_weight / grad_bias [C] (like the weight, or in the input's dtype without one).
std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(
    const Tensor& grad_out, const Tensor& input, const std::optional<Tensor>& weight,
    const std::optional<Tensor>& running_mean, const std::optional<Tensor>& running_var,
    const std::optional<Tensor>& save_mean, const std::optional<Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
  Tensor gi, gw, gb;
  const int64_t c = input.size(1);
  auto wopt = (weight.has_value() && weight->defined()) ? weight->options() : input.options();
  if (mask[0]) gi = at::empty_like(input, input.suggest_memory_format());
  if (mask[1]) gw = at::empty({c}, wopt);
  if (mask[2]) gb = at::empty({c}, wopt);
  return {gi, gw, gb};
}

// Mirrors layer_norm_cpu (layer_norm.cpp): Y = empty_like(X, contiguous); mean / rstd made [M]
// (M = the product of the leading, unnormalized dims) in the param dtype (float for a
// reduced-precision input with float weight or bias, else the input's) and viewed as the leading
// dims followed by ones. (On meta the CompositeExplicitAutograd math_native_layer_norm would run
// instead: batch_norm on a reshaped view plus addcmul, one input-sized tensor more.)
std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input, c10::SymIntArrayRef normalized_shape,
                                                     const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias, double eps) {
  const bool reduced = input.scalar_type() == kHalf || input.scalar_type() == kBFloat16;
  auto is_float = [](const std::optional<Tensor>& t) {
    return t.has_value() && t->defined() && t->scalar_type() == kFloat;
  };
  const bool mixed = reduced && (is_float(weight) || is_float(bias));
  const auto dtype = mixed ? kFloat : input.scalar_type();
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  int64_t M = 1;
  std::vector<int64_t> stat_shape;
  for (int64_t i = 0; i < axis; ++i) { M *= input.size(i); stat_shape.push_back(input.size(i)); }
  for (int64_t i = axis; i < input.dim(); ++i) stat_shape.push_back(1);
  Tensor y = at::empty_like(input, at::MemoryFormat::Contiguous);
  Tensor mean = at::empty({M}, input.options().dtype(dtype));
  Tensor rstd = at::empty({M}, input.options().dtype(dtype));
  return {y, mean.view(stat_shape), rstd.view(stat_shape)};
}

// Mirrors layer_norm_backward_cpu (layer_norm.cpp): dX = empty_like(X, contiguous), dgamma /
// dbeta like gamma / beta (contiguous), each only where output_mask asks.
std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(
    const Tensor& grad_out, const Tensor& input, c10::SymIntArrayRef normalized_shape, const Tensor& mean,
    const Tensor& rstd, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
    std::array<bool, 3> mask) {
  Tensor dx, dw, db;
  if (mask[0]) dx = at::empty_like(input, at::MemoryFormat::Contiguous);
  if (mask[1] && weight.has_value() && weight->defined()) dw = at::empty_like(*weight, at::MemoryFormat::Contiguous);
  if (mask[2] && bias.has_value() && bias->defined()) db = at::empty_like(*bias, at::MemoryFormat::Contiguous);
  return {dx, dw, db};
}

// ---------------------------------------------------------------- elementwise
// These build the CPU kernel's TensorIterator without running its stub: TensorIterator computes
// the output's shape, dtype and strides (from the inputs' layout) and allocates it with
// at::empty_strided on the meta device, as it does on the CPU. (On the CPU, TensorIterator also
// casts inputs of another dtype in temporaries; on meta it does not: those are CPU-only.)

// The first operand's device that is not the CPU (TensorCompare.cpp's out_device).
static Device out_device(const Tensor& a, const Tensor& b, const Tensor& c) {
  for (const Tensor* t : {&a, &b, &c}) if (t->device() != at::kCPU) return t->device();
  return at::kCPU;
}

// Mirrors where / where_self_out (TensorCompare.cpp): result dtype = result_type(self, other),
// self / other cast to it, 0-dim CPU operands moved to the device, a TensorIterator over
// (out, condition, self, other).
Tensor& where_self_out(const Tensor& condition, const Tensor& self, const Tensor& other, Tensor& out) {
  const auto rt = at::result_type(self, other);
  Tensor self_ = self.scalar_type() != rt ? self.to(rt) : self;
  Tensor other_ = other.scalar_type() != rt ? other.to(rt) : other;
  Tensor cond_ = condition;
  const auto device = out_device(condition, self_, other_);
  if (device != at::kCPU) {  // 0-dim CPU operands go to the device
    if (cond_.device() != device && cond_.dim() == 0) cond_ = cond_.to(device);
    if (self_.device() != device && self_.dim() == 0) self_ = self_.to(device);
    if (other_.device() != device && other_.dim() == 0) other_ = other_.to(device);
  }
  if (cond_.scalar_type() == kByte) cond_ = cond_.to(kBool);
  TORCH_CHECK(cond_.scalar_type() == kBool, "where expected condition to be a boolean tensor, but got ",
              cond_.scalar_type());
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .add_output(out)
                  .add_const_input(cond_)
                  .add_const_input(self_)
                  .add_const_input(other_)
                  .build();
  return out;
}
Tensor where_self(const Tensor& condition, const Tensor& self, const Tensor& other) {
  const auto rt = at::result_type(self, other);
  // The CPU kernel's out starts empty ({0}, no bytes) on the first non-CPU operand's device.
  Tensor out = at::empty({0}, self.options().dtype(rt).device(out_device(condition, self, other)));
  where_self_out(condition, self, other, out);
  return out;
}

// Mirrors hardtanh / hardtanh_out (Activation.cpp): result = empty_like(self), then clamp_out.
Tensor& hardtanh_out(const Tensor& self, const Scalar& min, const Scalar& max, Tensor& out) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Bool inputs not supported for hardtanh");
  return at::clamp_out(out, self, min, max);
}
Tensor hardtanh(const Tensor& self, const Scalar& min, const Scalar& max) {
  Tensor out = at::empty_like(self);
  return hardtanh_out(self, min, max, out);
}
// Mirrors hardtanh_backward (Activation.cpp): TensorIterator::borrowing_binary_op(result,
// grad_output, self).
Tensor hardtanh_backward(const Tensor& grad_output, const Tensor& self, const Scalar& min, const Scalar& max) {
  Tensor result;
  auto iter = TensorIterator::borrowing_binary_op(result, grad_output, self);
  return iter.output();
}

// Mirrors hardswish_backward and hardsigmoid_backward (Activation.cpp): a binary TensorIterator
// over (grad_output, self), its result made as the CPU's.
Tensor hard_backward(const Tensor& grad_output, const Tensor& self) {
  Tensor result;
  auto iter = TensorIterator::borrowing_binary_op(result, grad_output, self);
  return iter.output();
}

// Mirrors relu (Activation.cpp): at::clamp_min(self, 0).
Tensor relu(const Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::clamp_min(self, 0);
}

// Mirrors abs_out (UnaryOps.cpp, real dtypes): TensorIterator::unary_op(out, self).
Tensor& abs_out(const Tensor& self, Tensor& out) {
  auto iter = TensorIterator::unary_op(out, self);
  return out;
}

// Mirrors floor_divide (BinaryOps.cpp): TensorIterator::binary_op(result, self, other).
Tensor floor_divide(const Tensor& self, const Tensor& other) {
  Tensor result;
  auto iter = TensorIterator::binary_op(result, self, other);
  return iter.output();
}

// ---------------------------------------------------------------- attention
// Mirrors _scaled_dot_product_flash_attention_cpu (transformers/attention.cpp): output is made
// [B, L, H, Ev] and returned transposed to [B, H, L, Ev]; logsumexp is made [B, L, H] in the
// op-math dtype (float for float/half/bfloat16) and returned transposed to [B, H, L]. (Python's
// meta says empty_like(query), which differs when the query is contiguous [B, H, L, E].)
std::tuple<Tensor, Tensor> sdpa_flash_cpu(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                                          bool is_causal, const std::optional<Tensor>& attn_mask,
                                          std::optional<double> scale) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Ev = v.size(3);
  Tensor out = at::empty({B, L, H, Ev}, q.options());
  const auto acc = at::toOpMathType(q.scalar_type());
  Tensor lse = at::empty({B, L, H}, q.options().dtype(acc));
  return {out.transpose(1, 2), lse.transpose(1, 2)};
}

// Mirrors _scaled_dot_product_flash_attention_cpu_backward (transformers/attention.cpp): each
// gradient is zeros of the [B, L, H, E] transposed shape, returned transposed back.
std::tuple<Tensor, Tensor, Tensor> sdpa_flash_cpu_backward(const Tensor& grad_out, const Tensor& q,
                                                           const Tensor& k, const Tensor& v, const Tensor& out,
                                                           const Tensor& lse, double dropout_p, bool is_causal,
                                                           const std::optional<Tensor>& attn_mask,
                                                           std::optional<double> scale) {
  if (!grad_out.defined()) return {};
  auto make = [](const Tensor& t) { return at::empty(t.transpose(1, 2).sizes(), t.options()).transpose(1, 2); };
  return {make(q), make(k), make(v)};
}

// ---------------------------------------------------------------- CUDA's memory-efficient attention
// Whether the step recorded stands for a CUDA step (`oomlab_meta_sdpa_as_cuda`): then an
// attention whose mask needs a gradient (T5's learned position bias) runs as CUDA runs it, where
// the CPU would take its math path, which keeps [L, L] scores and their gradients that no CUDA
// kernel keeps.
std::atomic<bool> g_sdpa_as_cuda{false};

// The case the estimate models (crates/estimate/src/estimate/graph/efficient.rs): float32, query and value heads
// alike, of 32 to 64 and a multiple of 4: the backward kernel `fmha_cutlassB_f32_aligned_64x64`,
// whose workspace is known. Other dtypes and heads keep the math path (and the CUDA estimate
// refuses it, naming why).
bool efficient_modelled(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.scalar_type() != kFloat) return false;
  const int64_t d = q.size(3);
  return d == v.size(3) && d >= 32 && d <= 64 && d % 4 == 0;
}

// Mirrors scaled_dot_product_attention's efficient_attention case on CUDA (attention.cpp):
// preprocess_mask pads a mask whose strides are not multiples of 8 (pad_bias: `pad` by
// 8 - last % 8 columns, then sliced back) and expands it to [B, H, M, N] (a view, whose backward
// sums the bias gradient back to the mask's shape); the logsumexp is kept only when the query,
// key or value needs a gradient (should_compute_logsumexp).
Tensor sdpa_efficient_front(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                            bool is_causal, std::optional<double> scale) {
  Tensor m = mask;
  bool aligned = m.stride(-1) == 1;
  for (int64_t i = 0; i + 1 < m.dim(); ++i) aligned = aligned && m.stride(i) % 8 == 0;
  if (!aligned) {
    const int64_t last = m.size(-1);
    m = at::pad(m, {0, 8 - last % 8}).slice(-1, 0, last);
  }
  m = m.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
  const bool lse = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return std::get<0>(at::_scaled_dot_product_efficient_attention(q, k, v, m, lse, dropout_p, is_causal, scale));
}

// Mirrors _scaled_dot_product_efficient_attention_cuda and _efficient_attention_forward
// (transformers/cuda/attention.cu; torch/_meta_registrations.py agrees): the output made
// [B, M, H, Kv] and returned transposed; the logsumexp [B, H, M rounded up to 32] in float
// (kAlignLSE), without rows when not asked for; dropout's seed and offset on the host, as CUDA
// keeps them outside graph capture (Note [Seed and Offset Device]). float32 needs no output
// accumulator.
std::tuple<Tensor, Tensor, Tensor, Tensor> sdpa_efficient(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const std::optional<Tensor>& attn_bias,
                                                          bool compute_log_sumexp, double dropout_p, bool is_causal,
                                                          std::optional<double> scale) {
  const int64_t B = q.size(0), H = q.size(1), M = q.size(2), Kv = v.size(3);
  Tensor out = at::empty({B, M, H, Kv}, q.options());
  Tensor lse = at::empty({B, H, compute_log_sumexp ? (M + 31) / 32 * 32 : 0}, q.options().dtype(kFloat));
  Tensor seed = at::empty({}, at::dtype(kLong));
  Tensor offset = at::empty({}, at::dtype(kLong));
  return {out.transpose(1, 2), lse, seed, offset};
}

// Mirrors _scaled_dot_product_efficient_attention_backward_cuda and _efficient_attention_backward
// (transformers/cuda/attention_backward.cu), float32, in their order: the incoming gradient
// transposed to [B, M, H, Kv] and made contiguous (a copy unless it is); the three gradients,
// each new [B, _, H, _]; the bias's gradient where asked, its last dimension padded to 16 and
// sliced back; float32's delta computed outside the kernel, (grad_out * out).sum(-1) transposed
// and made contiguous, whose product and sum are freed at once; then the kernel's workspace (the
// query gradient's split-key tiles: crates/estimate/src/estimate/graph/efficient.rs, measured on an H200),
// freed with the delta and the copy when the kernel returns.
std::tuple<Tensor, Tensor, Tensor, Tensor> sdpa_efficient_backward(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_bias,
    const Tensor& out, const Tensor& logsumexp, const Tensor& philox_seed, const Tensor& philox_offset,
    double dropout_p, std::array<bool, 4> grad_input_mask, bool is_causal, std::optional<double> scale) {
  if (!grad_out.defined()) return {};
  const int64_t B = q.size(0), H = q.size(1), M = q.size(2), K = q.size(3), N = k.size(2), Kv = v.size(3);
  Tensor g = grad_out.transpose(1, 2).contiguous();
  Tensor grad_q = at::empty({B, M, H, K}, q.options());
  Tensor grad_k = at::empty({B, N, H, K}, k.options());
  Tensor grad_v = at::empty({B, N, H, Kv}, v.options());
  Tensor grad_bias;
  if (grad_input_mask[3] && attn_bias.defined()) {
    std::vector<int64_t> sizes = attn_bias.sizes().vec();
    const int64_t last = sizes.back();
    sizes.back() = (last + 15) / 16 * 16;
    grad_bias = at::empty(sizes, attn_bias.options()).slice(-1, 0, last);
  }
  Tensor delta = (g * out.transpose(1, 2)).sum(-1).transpose(-2, -1).contiguous();
  const int64_t tile = 4 + 64 * 64;
  const int64_t per_bh = ((M + 63) / 64 * ((K + 63) / 64) * tile + 3) / 4 * 4;
  Tensor workspace = at::empty({B * H * per_bh * 4}, q.options().dtype(kByte));
  return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2), grad_bias};
}

// scaled_dot_product_attention (CompositeImplicitAutograd) picks its backend with
// _fused_sdp_choice_stub (a DispatchStub, attention.cpp), which has no entry for the meta device:
// on meta it always takes the math path, where the CPU takes its flash kernel when it can (no
// dropout, no attn_weights...). A Meta kernel for the `_fused_sdp_choice` op would not be
// called. So this kernel, registered for AutogradMeta (above autograd, where the composite
// runs), asks the CPU's own choice function (_fused_sdp_choice_cpp, which reads only shapes,
// dtypes, strides and flags) and takes the same path: the flash-for-CPU op (with its bool mask
// made additive as the CPU does), or else the composite unchanged (the math path). In a step
// that stands for a CUDA step, an attention whose mask needs a gradient goes to CUDA's
// memory-efficient kernel first (above).
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& attn_mask,
            double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // CUDA takes its memory-efficient kernel here (flash and cuDNN take no float32, and no mask).
  if (g_sdpa_as_cuda.load() && attn_mask.has_value() && attn_mask->defined() && attn_mask->requires_grad() &&
      at::GradMode::is_enabled() && !enable_gqa && efficient_modelled(q, k, v)) {
    return sdpa_efficient_front(q, k, v, *attn_mask, dropout_p, is_causal, scale);
  }
  const int64_t choice = at::native::_fused_sdp_choice_cpp(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  if (choice == static_cast<int64_t>(at::SDPBackend::flash_attention)) {
    std::optional<Tensor> mask = attn_mask;
    if (mask.has_value() && mask->defined() && mask->scalar_type() == kBool) {
      // convert_boolean_attn_mask (attention.cpp)
      mask = at::where(*mask, 0.0,
                       at::scalar_tensor(-std::numeric_limits<double>::infinity(),
                                         at::TensorOptions().dtype(q.dtype()).device(mask->device())));
    }
    return std::get<0>(at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, mask, scale));
  }
  return at::native::scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

// ---------------------------------------------------------------- resize
// Mirrors resize_ on the CPU (Resize.cpp: resize_impl_cpu_ + maybe_resize_storage_cpu): sizes
// set contiguous, and where the storage is too small a new buffer of the needed bytes from the
// device's allocator (resize_bytes_cpu), then the requested memory format's strides. The stock
// meta kernel only sets the storage's byte count and allocates nothing, so every op whose output
// starts as empty({0}) and is resized (TensorIterator's and structured kernels' out=, composite
// ops like abs, where's functional form) went uncounted on meta.
const Tensor& resize_(const Tensor& self, c10::SymIntArrayRef size_sym, std::optional<MemoryFormat> memory_format) {
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto* impl = self.unsafeGetTensorImpl();
  if (!(impl->sizes() == size && !memory_format.has_value())) {
    impl->set_sizes_contiguous(size);
    const int64_t numel = impl->numel();
    if (numel > 0) {
      const size_t needed = static_cast<size_t>(impl->storage_offset() + numel) * self.dtype().itemsize();
      const auto& storage = impl->unsafe_storage();
      if (needed > storage.nbytes()) {
        TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
        c10::Allocator* alloc = storage.allocator() ? storage.allocator() : c10::GetAllocator(kMeta);
        storage.set_data_ptr_noswap(alloc->allocate(needed));
        storage.set_nbytes(needed);
      }
    }
  }
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != MemoryFormat::Preserve, "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

// A fused optimizer's step (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, `_fused_adagrad_`):
// in place on every list it is given, with nothing allocated, on the CPU as on CUDA (whose
// kernels take the lists as launch arguments); on meta, nothing to do. Boxed, so that one
// function serves every overload: the arguments are dropped, and the op returns nothing.
void fused_optimizer_step(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  torch::jit::drop(*stack, op.schema().arguments().size());
}

// The grad scaler's check (`_amp_foreach_non_finite_check_and_unscale_`): in place on the
// gradients and found_inf, allocating nothing on the CPU or on CUDA (whose kernel takes the lists
// as launch arguments). On meta no value is read or written: a step recorded there never finds an
// inf and is never skipped (`train::amp::GradScaler`).
void amp_check_and_unscale(at::TensorList grads, Tensor& found_inf, const Tensor& inv_scale) {}

}  // namespace oomlab_meta

// Registered when a step is first recorded on meta (`oomlab_meta_install`), not at the program's
// start: a process that never records there runs libtorch's own kernels only.
extern "C" void oomlab_meta_register() {
  static auto* meta = [] {
    auto* m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
    m->impl("resize_", oomlab_meta::resize_);
    m->impl("convolution_overrideable", oomlab_meta::convolution_overrideable);
    m->impl("convolution_backward_overrideable", oomlab_meta::convolution_backward_overrideable);
    m->impl("index_select", oomlab_meta::index_select);
    m->impl("embedding_dense_backward", oomlab_meta::embedding_dense_backward);
    m->impl("native_batch_norm", oomlab_meta::native_batch_norm);
    m->impl("native_batch_norm_backward", oomlab_meta::native_batch_norm_backward);
    m->impl("native_layer_norm", oomlab_meta::native_layer_norm);
    m->impl("native_layer_norm_backward", oomlab_meta::native_layer_norm_backward);
    m->impl("where.self", oomlab_meta::where_self);
    m->impl("where.self_out", oomlab_meta::where_self_out);
    m->impl("hardtanh", oomlab_meta::hardtanh);
    m->impl("hardtanh.out", oomlab_meta::hardtanh_out);
    m->impl("hardtanh_backward", oomlab_meta::hardtanh_backward);
    m->impl("hardswish_backward", oomlab_meta::hard_backward);
    m->impl("hardsigmoid_backward", oomlab_meta::hard_backward);
    m->impl("relu", oomlab_meta::relu);
    m->impl("abs.out", oomlab_meta::abs_out);
    m->impl("floor_divide", oomlab_meta::floor_divide);
    m->impl("_scaled_dot_product_flash_attention_for_cpu", oomlab_meta::sdpa_flash_cpu);
    m->impl("_scaled_dot_product_flash_attention_for_cpu_backward", oomlab_meta::sdpa_flash_cpu_backward);
    m->impl("_scaled_dot_product_efficient_attention", oomlab_meta::sdpa_efficient);
    m->impl("_scaled_dot_product_efficient_attention_backward", oomlab_meta::sdpa_efficient_backward);
    m->impl("_amp_foreach_non_finite_check_and_unscale_", oomlab_meta::amp_check_and_unscale);
    for (const char* fused : {"_fused_adam_", "_fused_adam_.tensor_lr", "_fused_adamw_", "_fused_adamw_.tensor_lr",
                              "_fused_sgd_", "_fused_sgd_.tensor_lr", "_fused_adagrad_", "_fused_adagrad_.tensor_lr"}) {
      m->impl(fused, torch::CppFunction::makeFromBoxedFunction<&oomlab_meta::fused_optimizer_step>());
    }
    return m;
  }();
  static auto* autograd = [] {
    auto* m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradMeta, __FILE__, __LINE__);
    m->impl("scaled_dot_product_attention", oomlab_meta::sdpa);
    return m;
  }();
  (void)meta;
  (void)autograd;
}

// Whether the steps recorded from here stand for CUDA steps (1) or not (0): see g_sdpa_as_cuda.
extern "C" void oomlab_meta_sdpa_as_cuda(int on) noexcept { oomlab_meta::g_sdpa_as_cuda.store(on != 0); }
