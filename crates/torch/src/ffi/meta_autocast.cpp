// CUDA's autocast for a step recorded on the meta device that stands for a CUDA step.
//
// libtorch's autocast never touches a meta tensor: a tensor's autocast key comes from its
// backend (a meta tensor has none), and `cached_cast` casts only what `is_cuda()` (for CUDA's
// lists). So a TorchScript module's forward under `training.amp`, recorded on meta, would run
// every op in float32, and its CUDA estimate would be that of another step. Here CUDA's policy
// runs on meta tensors instead, at a dispatch key of its own above autograd (as autocast's keys
// are, so that the casts are recorded by autograd and the low-precision inputs are what backward
// keeps):
//
// - the op lists are PyTorch 2.11's own, from the wheel's `ATen/autocast_mode.h`
//   (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE,
//   AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE, AT_FORALL_PROMOTE), as `autocast_mode.cpp`
//   registers them for AutocastCUDA, with cudnn_convolution and cudnn_convolution_transpose
//   added and binary_cross_entropy refused;
// - each policy's wrapper mirrors that header's `WrapFunction_` (cast, then the op again with the
//   key excluded), with a meta tensor eligible where CUDA's check asks for a CUDA tensor;
// - the cast cache mirrors `cached_cast`'s: a float32 leaf that needs a gradient, cast to the
//   low dtype, is cast once and the copy kept until autocast exits (`oomlab_meta_autocast(-1)`).
//
// The key is c10's TESTING_ONLY_GenericMode, which libtorch registers nothing for; it is put in
// the thread's included keys only while a recording is under autocast, so no other step, and no
// real CUDA step, ever reaches these kernels.
#include <ATen/ATen.h>
#include <ATen/CachedTensorUtils.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "guarded.h"

#include <atomic>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace oomlab_ac {
using at::ScalarType;
using at::Tensor;

constexpr c10::DispatchKey KEY = c10::DispatchKey::TESTING_ONLY_GenericMode;

// The low-precision dtype of the autocast in force (CUDA's `get_autocast_dtype(kCUDA)`). For the
// process, not the thread: the included key travels with libtorch's thread-local state to the
// threads a step forks work to (`at::launch`), and they must cast to the same dtype; recordings
// run one at a time (`probe::cpu_exclusive`).
std::atomic<ScalarType> g_low{at::kHalf};

// CUDA's `is_eligible`, with a meta tensor where CUDA's asks for a CUDA one.
inline bool eligible(const Tensor& t) {
  return t.defined() && t.is_meta() && t.is_floating_point() && t.scalar_type() != at::kDouble;
}

// The cast cache, as `autocast_mode.cpp` keeps it: keyed by the source's TensorImpl, holding a
// weak reference to it (so the key cannot be reused while the entry lives) and the copy.
using weakref_type = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
std::unordered_map<c10::TensorImpl*, std::tuple<weakref_type, Tensor>>& cache() {
  static std::unordered_map<c10::TensorImpl*, std::tuple<weakref_type, Tensor>> casts;
  return casts;
}
std::mutex cache_mutex;

Tensor cached_cast(ScalarType to, const Tensor& arg) {
  if (!eligible(arg) || arg.scalar_type() == to) return arg;
  const bool can_cache = to == g_low.load() && arg.scalar_type() == at::kFloat && arg.requires_grad() && arg.is_leaf() &&
                         !arg.is_view() && !at::caching::is_cached_tensor(arg);
  if (!can_cache) return arg.to(to);
  const std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache().find(arg.unsafeGetTensorImpl());
  if (it != cache().end()) return std::get<1>(it->second);
  Tensor casted = arg.to(to);
  cache().emplace(arg.unsafeGetTensorImpl(), std::make_tuple(weakref_type(arg.getIntrusivePtr()), casted));
  return casted;
}

inline std::optional<Tensor> cached_cast(ScalarType to, const std::optional<Tensor>& arg) {
  if (!arg.has_value()) return std::nullopt;
  return cached_cast(to, *arg);
}

inline std::vector<Tensor> cached_cast(ScalarType to, const at::TensorList& arg) {
  std::vector<Tensor> out;
  out.reserve(arg.size());
  for (const auto& t : arg) out.emplace_back(cached_cast(to, t));
  return out;
}

inline std::vector<Tensor> cached_cast(ScalarType to, const at::ITensorListRef& arg) {
  std::vector<Tensor> out;
  out.reserve(arg.size());
  for (const auto& t : arg) out.emplace_back(cached_cast(to, t));
  return out;
}

template <typename T>
inline T cached_cast(ScalarType, T arg) {
  return arg;
}

// `prioritize` / `promote_type`: the widest floating type among the eligible arguments.
inline ScalarType prioritize(ScalarType current, const Tensor& next) {
  TORCH_CHECK(current != at::kDouble, "promote type is double in at::autocast::prioritize");
  if (!eligible(next)) return current;
  const ScalarType n = next.scalar_type();
  if (current == at::kFloat || n == at::kFloat) return at::kFloat;
  const ScalarType low = g_low.load();
  TORCH_CHECK(current == low && n == low, "Unexpected floating ScalarType in at::autocast::prioritize");
  return low;
}
inline ScalarType prioritize(ScalarType current, const at::TensorList& list) {
  for (const auto& t : list) current = prioritize(current, t);
  return current;
}
inline ScalarType prioritize(ScalarType current, const at::ITensorListRef& list) {
  for (const auto& t : list) current = prioritize(current, t);
  return current;
}
template <typename T>
inline ScalarType prioritize(ScalarType current, T) {
  return current;
}
inline ScalarType promote_type(ScalarType current) { return current; }
template <typename Arg0, typename... Args>
inline ScalarType promote_type(ScalarType current, Arg0 arg0, Args... args) {
  return promote_type(prioritize(current, arg0), args...);
}

// `set_opt_dtype`, `firstarg_is_eligible`, `type_from_firstarg`.
inline std::optional<ScalarType> set_opt_dtype(ScalarType to, const std::optional<ScalarType>& dtype) {
  return dtype.has_value() ? dtype : to;
}
template <typename T>
inline T set_opt_dtype(ScalarType, T arg) {
  return arg;
}
template <typename... Args>
inline bool firstarg_is_eligible(const Tensor& arg, Args...) {
  return eligible(arg);
}
template <typename... Args>
inline ScalarType type_from_firstarg(ScalarType to, const Tensor& arg, Args...) {
  return eligible(arg) ? to : arg.scalar_type();
}

using at::autocast::CastPolicy;

template <CastPolicy policy, class Redispatch, Redispatch* F, class Ret, class ArgList>
struct Wrap_ {};

template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::lower_precision_fp, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard off(KEY);
    return (*F)(cached_cast(g_low.load(), args)...);
  }
};

template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::fp32, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard off(KEY);
    return (*F)(cached_cast(at::kFloat, args)...);
  }
};

template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::fp32_set_opt_dtype, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard off(KEY);
    if (firstarg_is_eligible(args...)) return (*F)(set_opt_dtype(at::kFloat, args)...);
    return (*F)(args...);
  }
};

template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::fp32_append_dtype, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard off(KEY);
    const ScalarType out = type_from_firstarg(at::kFloat, args...);
    return (*F)(args..., out);
  }
};

template <class Redispatch, Redispatch* F, class Ret, class... Args>
struct Wrap_<CastPolicy::promote, Redispatch, F, Ret, c10::guts::typelist::typelist<Args...>> {
  static Ret call(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard off(KEY);
    const ScalarType to = promote_type(g_low.load(), args...);
    return (*F)(cached_cast(to, args)...);
  }
};

template <CastPolicy policy, class Registered, class Redispatch, Redispatch* F>
struct Wrap final {
  using type = Wrap_<policy, Redispatch, F, typename c10::guts::function_traits<Registered>::return_type,
                     typename c10::guts::function_traits<Registered>::parameter_types>;
};

Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
              "(CUDA's autocast refuses them): use binary_cross_entropy_with_logits or BCEWithLogitsLoss");
}

}  // namespace oomlab_ac

// One kernel per listed op or overload, as the header's KERNEL1/KERNEL2 register them: the policy
// last, so that the header's _KERNEL_OVERLOAD_NARG counts an overload or none.
#define OOMLAB_AC1(OP, POLICY)                                                                         \
  lib.impl("aten::" #OP, &::oomlab_ac::Wrap<::at::autocast::CastPolicy::POLICY,            \
                                                       decltype(ATEN_FN(OP)), decltype(ATEN_FN(OP)),  \
                                                       &ATEN_FN(OP)>::type::call);
#define OOMLAB_AC2(OP, OVERLOAD, POLICY)                                                                  \
  lib.impl("aten::" #OP "." #OVERLOAD,                                                                    \
           &::oomlab_ac::Wrap<::at::autocast::CastPolicy::POLICY, decltype(ATEN_FN2(OP, OVERLOAD)), \
                                         decltype(ATEN_FN2(OP, OVERLOAD)), &ATEN_FN2(OP, OVERLOAD)>::type::call);
#define OOMLAB_AC(...) C10_CONCATENATE(OOMLAB_AC, _KERNEL_OVERLOAD_NARG(__VA_ARGS__))(__VA_ARGS__)
#define OOMLAB_AC_LOW(...) OOMLAB_AC(__VA_ARGS__, lower_precision_fp)
#define OOMLAB_AC_FP32(...) OOMLAB_AC(__VA_ARGS__, fp32)
#define OOMLAB_AC_SET_OPT(...) OOMLAB_AC(__VA_ARGS__, fp32_set_opt_dtype)
#define OOMLAB_AC_PROMOTE(...) OOMLAB_AC(__VA_ARGS__, promote)
#define OOMLAB_AC_APPEND(REDISPATCH_FUNC, NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, POLICY)          \
  lib.impl("aten::" NAME, &::oomlab_ac::Wrap<::at::autocast::CastPolicy::POLICY, REGISTER_SIGNATURE, \
                                                        REDISPATCH_SIGNATURE, &REDISPATCH_FUNC>::type::call);

namespace {
void register_once() {
  static auto* kernels = [] {
    auto* ops = new torch::Library(torch::Library::IMPL, "aten", oomlab_ac::KEY, __FILE__, __LINE__);
    auto& lib = *ops;
    using namespace at;  // the header's signatures name at's types unqualified
    AT_FORALL_LOWER_PRECISION_FP(OOMLAB_AC_LOW)
    OOMLAB_AC_LOW(cudnn_convolution)
    OOMLAB_AC_LOW(cudnn_convolution_transpose)
    AT_FORALL_FP32(OOMLAB_AC_FP32)
    AT_FORALL_FP32_SET_OPT_DTYPE(OOMLAB_AC_SET_OPT)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(OOMLAB_AC_APPEND)
    AT_FORALL_PROMOTE(OOMLAB_AC_PROMOTE)
    lib.impl("aten::binary_cross_entropy", &oomlab_ac::binary_cross_entropy_banned);
    // Every other op passes the key by, as autocast's own fallback does.
    auto* rest = new torch::Library(torch::Library::IMPL, "_", oomlab_ac::KEY, __FILE__, __LINE__);
    rest->fallback(torch::CppFunction::makeFallthrough());
    return ops;
  }();
  (void)kernels;
}
}  // namespace

// Turns CUDA's autocast on meta tensors on with a low-precision dtype (a c10 ScalarType: Half 5,
// BFloat16 15), or off (`dtype` < 0), clearing the cast cache. Re-entering with another dtype
// (a nested autocast) keeps the cache, as `torch.autocast` does. The error, if any, in `err`.
extern "C" int oomlab_meta_autocast(int dtype, char* err, size_t len) noexcept {
  return oomlab::guarded(err, len, [dtype] {
    if (dtype < 0) {
      c10::impl::tls_set_dispatch_key_included(oomlab_ac::KEY, false);
      const std::lock_guard<std::mutex> lock(oomlab_ac::cache_mutex);
      oomlab_ac::cache().clear();
      return;
    }
    register_once();
    oomlab_ac::g_low.store(static_cast<at::ScalarType>(dtype));
    c10::impl::tls_set_dispatch_key_included(oomlab_ac::KEY, true);
  });
}
