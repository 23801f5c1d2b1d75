// oomlab's window into libtorch's memory machinery, which tch does not bind.
//
// - CPU: a counting allocator installed as libtorch's CPU allocator. It wraps the default one,
//   counts live and peak bytes, and when a cap is set refuses past it with libtorch's own
//   OutOfMemoryError, so an OOM on CPU travels the same path as a CUDA one.
// - CUDA: the caching allocator's statistics through the device-generic DeviceAllocator
//   interface (the CUDA-specific header needs CUDA runtime headers that the PyPI wheel lacks).
// - Autocast for any device and dtype (tch only switches CUDA autocast on, in fp16).
//
// Every entry point is extern "C" and noexcept: a C++ exception is turned into a non-zero return
// and a message in the caller's buffer, never unwound into Rust.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/record_function.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <torch/headeronly/version.h>

#include "guarded.h"
#include "log.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
struct oomlab_stats {
  int64_t allocated;
  int64_t allocated_peak;
  int64_t reserved;
  int64_t reserved_peak;
  int64_t num_ooms;
  int64_t num_alloc_retries;
};
}

namespace {

using oomlab::guarded;
using oomlab::set_err;

// Same wording as PyTorch's format_size, so one parser reads CPU and CUDA messages.
std::string format_size(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  } else if (bytes < 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  } else if (bytes < 1024LL * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1024.0 / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1024.0 / 1024.0 / 1024.0);
  }
  return buf;
}

struct CpuCounters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> cap{-1};  // < 0: no cap
  std::atomic<int64_t> ooms{0};
  std::atomic<int64_t> allocations{0};  // counted allocations ever made, for tests
};

// The last refusal to the byte: its message rounds to two decimals of a GiB, which a summary's
// oom_* columns should not inherit. Written under the mutex with the refusal's ordinal (the
// `ooms` count it made), so a reader can tell it is the refusal its error came from.
struct LastRefusal {
  int64_t ordinal = 0;
  int64_t requested = 0;
  int64_t allocated = 0;
  int64_t cap = 0;
};
std::mutex g_refusal_mutex;
LastRefusal g_refusal;
CpuCounters g_cpu;

// OOMLAB_ALLOC_LOG=1 prints every counted allocation and free ("+bytes live" / "-bytes live")
// to stderr: the ground truth to read when the memory model in crates/estimate/src/estimate disagrees with a
// measurement.
const bool g_log = std::getenv("OOMLAB_ALLOC_LOG") != nullptr;

void raise_peak(int64_t now) {
  int64_t seen = g_cpu.peak.load();
  while (now > seen && !g_cpu.peak.compare_exchange_weak(seen, now)) {
  }
}

// The event log the estimate's probes read: each counted allocation (+bytes) and free (-bytes)
// with its data pointer, while switched on. Off, it costs one relaxed load per event.
std::atomic<bool> g_events_on{false};
std::mutex g_events_mutex;
std::vector<std::pair<int64_t, uintptr_t>>& events() {
  static auto* v = new std::vector<std::pair<int64_t, uintptr_t>>();  // never destroyed
  return *v;
}

// With ops on (a recording's log), which op each event came from: the op the model's code
// called (the outermost running on this thread, an autograd node's in backward) and, inside it,
// the innermost that is not an `aten::empty*`, as "aten::linear > aten::addmm"; "" outside any
// op (another thread's, or the trial's own code). Names are interned: one id per event.
std::atomic<bool> g_ops_on{false};
at::CallbackHandle g_op_handle = 0;
std::vector<int32_t>& event_ops() {
  static auto* v = new std::vector<int32_t>();  // never destroyed
  return *v;
}
std::vector<std::string>& op_names() {
  static auto* v = new std::vector<std::string>();  // never destroyed
  return *v;
}
std::unordered_map<std::string, int32_t>& op_ids() {
  static auto* m = new std::unordered_map<std::string, int32_t>();  // never destroyed
  return *m;
}

// Where each event's memory would live on a GPU, where the code knows it (0: the phase's
// default; log.h's kHostTag or kDeviceTag): a recording on the CPU cannot tell a CUDA run's host
// tensors (the data set, a 0-dim step counter, a Python scalar wrapped as a tensor) from its
// device ones, so the code that makes them says. An allocation is tagged while it is live:
// `live_events` finds its event by data pointer.
std::vector<uint8_t>& event_tags() {
  static auto* v = new std::vector<uint8_t>();  // never destroyed
  return *v;
}
std::unordered_map<uintptr_t, size_t>& live_events() {
  static auto* m = new std::unordered_map<uintptr_t, size_t>();  // never destroyed
  return *m;
}
// Allocations on this thread are the host's while this is above 0 (`oomlab_cpu_events_host`).
thread_local int t_host_scope = 0;

// Which thread of a parallel region made each event: 0 outside any (the op's own thread), else
// 1 + the thread's number in the OpenMP region (at::parallel_for's, oneDNN's). The threads of a
// region run their chunks (a static schedule: thread k, chunk k) in whatever interleaving the
// machine's load gives; the recorded estimate puts each region's events in one order that does
// not depend on it (train::record). The OpenMP runtime is libtorch's (libgomp); weak, so that a
// libtorch without one leaves every event at 0.
extern "C" int omp_in_parallel(void) __attribute__((weak));
extern "C" int omp_get_thread_num(void) __attribute__((weak));
std::vector<uint16_t>& event_threads() {
  static auto* v = new std::vector<uint16_t>();  // never destroyed
  return *v;
}
uint16_t thread_code() {
  if (omp_in_parallel == nullptr || omp_get_thread_num == nullptr || !omp_in_parallel()) return 0;
  return static_cast<uint16_t>(1 + omp_get_thread_num());
}

// A sum of a contiguous tensor over its leading dimensions (autograd's `sum_to` of a bias's
// gradient): `rows` summed into each of `cols` outputs, accumulating in `acc` bytes. CUDA's
// reduction kernel may take a staging buffer for it (estimate/cuda_reduce.rs) that the CPU's
// does not, so the log marks where each ends: an event (0, kReduceMark + its index here).
struct Reduce {
  int64_t rows = 0, cols = 0, acc = 0;
};
constexpr uint64_t kReduceMark = 16;
std::vector<Reduce>& reduces() {
  static auto* v = new std::vector<Reduce>();  // never destroyed
  return *v;
}

// A convolution as CUDA would run it through cuDNN (estimate/cudnn_conv.rs): NCHW input, KCRS
// weight, stride, padding, groups and dtype (0 float32, 1 float16, 2 bfloat16, 3 float64), and
// whether it is the backward. A 2-D convolution with one stride and padding for both sides,
// dilation 1, not transposed, or `known` is false (cuDNN's table holds no such call). The log
// marks where each begins: an event (0, kConvMark + its index here).
struct Conv {
  int64_t input[4] = {0, 0, 0, 0}, weight[4] = {0, 0, 0, 0};
  int64_t stride = 0, padding = 0, groups = 0, dtype = 0, backward = 0, known = 0;
};
constexpr uint64_t kConvMark = uint64_t{1} << 40;
std::vector<Conv>& convs() {
  static auto* v = new std::vector<Conv>();  // never destroyed
  return *v;
}

// A call of the CPU flash-attention kernel (`_scaled_dot_product_flash_attention_for_cpu`, or
// its backward), with its query's, key's and value's shapes (`[batch, heads, len, head_dim]`):
// on CUDA another kernel runs in its place, whose saved tensors and workspaces the recorded
// estimate adds from these (estimate/graph/efficient.rs). The log marks where each begins:
// an event (0, kAttnMark + its index here).
struct Attn {
  int64_t q[4] = {0, 0, 0, 0}, k[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
  int64_t dtype = 0, backward = 0, causal = 0, masked = 0;
};
constexpr uint64_t kAttnMark = uint64_t{1} << 41;
std::vector<Attn>& attns() {
  static auto* v = new std::vector<Attn>();  // never destroyed
  return *v;
}

std::optional<Attn> attn_call(const at::RecordFunction& fn) {
  const bool backward = std::strcmp(fn.name(), "aten::_scaled_dot_product_flash_attention_for_cpu_backward") == 0;
  if (!backward && std::strcmp(fn.name(), "aten::_scaled_dot_product_flash_attention_for_cpu") != 0) {
    return std::nullopt;
  }
  const auto inputs = fn.inputs();
  const size_t first = backward ? 1 : 0;
  if (inputs.size() < first + 3) return std::nullopt;
  Attn a;
  a.backward = backward ? 1 : 0;
  int64_t* dims[3] = {a.q, a.k, a.v};
  for (size_t i = 0; i < 3; ++i) {
    if (!inputs[first + i].isTensor()) return std::nullopt;
    const auto& t = inputs[first + i].toTensor();
    if (!t.defined() || t.dim() != 4) return std::nullopt;
    for (int d = 0; d < 4; ++d) dims[i][d] = t.size(d);
    if (i == 0) {
      switch (t.scalar_type()) {
        case at::kHalf: a.dtype = 1; break;
        case at::kBFloat16: a.dtype = 2; break;
        case at::kDouble: a.dtype = 3; break;
        default: a.dtype = 0;
      }
    }
  }
  // After q, k, v (and, in the backward, out and logsumexp): dropout_p, is_causal, attn_mask.
  const size_t causal = backward ? 7 : 4;
  if (inputs.size() > causal && inputs[causal].isBool()) a.causal = inputs[causal].toBool();
  if (inputs.size() > causal + 1 && inputs[causal + 1].isTensor()) a.masked = inputs[causal + 1].toTensor().defined();
  return a;
}

// An int or concrete SymInt argument, or none.
std::optional<int64_t> int_of(const c10::IValue& v) {
  if (v.isInt()) return v.toInt();
  if (v.isSymInt() && !v.toSymInt().is_symbolic()) return v.toSymInt().as_int_unchecked();
  return std::nullopt;
}

// The integers of an int or SymInt list argument (concrete ones), or none.
std::optional<std::vector<int64_t>> ints_of(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  if (!v.isList()) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& e : v.toListRef()) {
    const auto i = int_of(e);
    if (!i) return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

// `aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
// groups)` or `aten::convolution_backward(grad_output, input, weight, bias_sizes, stride,
// padding, dilation, transposed, output_padding, groups, output_mask)`: the call; else none.
std::optional<Conv> conv_call(const at::RecordFunction& fn) {
  const bool backward = std::strcmp(fn.name(), "aten::convolution_backward") == 0;
  if (!backward && std::strcmp(fn.name(), "aten::convolution") != 0) return std::nullopt;
  const auto inputs = fn.inputs();
  const size_t first = backward ? 1 : 0;
  if (inputs.size() < first + 9 || !inputs[first].isTensor() || !inputs[first + 1].isTensor()) return std::nullopt;
  const auto& x = inputs[first].toTensor();
  const auto& w = inputs[first + 1].toTensor();
  if (!x.defined() || !w.defined()) return std::nullopt;
  Conv c;
  c.backward = backward ? 1 : 0;
  // Which gradients the backward makes (`output_mask`: the input's, the weight's, the bias's),
  // above the flag: an input that needs none (the first layer's images) makes no data pass, and
  // its weight's gradient may be the input's size at some batch.
  if (backward && inputs.size() > first + 9 && inputs[first + 9].isBoolList()) {
    const auto mask = inputs[first + 9].toBoolList();
    if (mask.size() == 3) c.backward = 1 + 2 * mask[0] + 4 * mask[1] + 8 * mask[2];
  }
  switch (x.scalar_type()) {
    case at::kHalf: c.dtype = 1; break;
    case at::kBFloat16: c.dtype = 2; break;
    case at::kDouble: c.dtype = 3; break;
    default: c.dtype = 0;
  }
  if (x.dim() != 4 || w.dim() != 4) return c;
  for (int i = 0; i < 4; ++i) {
    c.input[i] = x.size(i);
    c.weight[i] = w.size(i);
  }
  // After the input and weight: the bias (its sizes in the backward), then the rest.
  const auto stride = ints_of(inputs[first + 3]);
  const auto padding = ints_of(inputs[first + 4]);
  const auto dilation = ints_of(inputs[first + 5]);
  const bool transposed = inputs[first + 6].isBool() && inputs[first + 6].toBool();
  const auto groups = int_of(inputs[first + 8]);
  const bool square = stride && padding && dilation && stride->size() == 2 && padding->size() == 2 &&
                      (*stride)[0] == (*stride)[1] && (*padding)[0] == (*padding)[1];
  if (!square || !groups || transposed) return c;
  if (std::any_of(dilation->begin(), dilation->end(), [](int64_t d) { return d != 1; })) return c;
  c.stride = (*stride)[0];
  c.padding = (*padding)[0];
  c.groups = *groups;
  c.known = 1;
  return c;
}

// Where a kernel runs a CPU library of its own (oneDNN's convolutions, batch norm's and layer
// norm's CPU kernels), or a composite that CUDA runs as a kernel of its own (dropout, an
// embedding's backward): the log marks where the outermost such op begins (kSpanBegin) and ends
// (kSpanEnd), so that what it allocates and frees inside (the library's scratch, not CUDA's) can
// be told from what it returns.
constexpr uint64_t kSpanBegin = 2, kSpanEnd = 3;
bool opens_span(const char* name) {
  return std::strcmp(name, "aten::dropout") == 0 || std::strstr(name, "embedding_dense_backward") != nullptr ||
         std::strstr(name, "scaled_dot_product_flash_attention_for_cpu") != nullptr ||
         std::strstr(name, "ScaledDotProductFlashAttentionForCpuBackward") != nullptr ||
         std::strstr(name, "convolution") != nullptr || std::strstr(name, "Convolution") != nullptr ||
         std::strstr(name, "batch_norm") != nullptr || std::strstr(name, "BatchNorm") != nullptr ||
         std::strstr(name, "layer_norm") != nullptr || std::strstr(name, "LayerNorm") != nullptr;
}

// One op running on this thread, pushed by the RecordFunction callback at its start and popped
// at its end: its name (for `current_op`) and what it means to the log.
struct Frame {
  std::string name;
  // It casts a wrapped scalar (TensorIterator's `aten::to`), and so holds the host scope open.
  bool cast = false;
  // It, or an op around it, opens a library span; it is the outermost one (its ends are marked).
  bool within_span = false, span = false;
  // The reduction it is, if one (rows 0 if not): its end is marked.
  Reduce reduce;
};
thread_local std::vector<Frame> t_frames;

// `aten::sum(self, dim, keepdim, dtype)` over dimensions 0..k of a contiguous `self`, k short
// of its last: that reduction; else none.
Reduce rows_reduced(const at::RecordFunction& fn) {
  if (std::strcmp(fn.name(), "aten::sum") != 0) return {};
  const auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isIntList()) return {};
  const auto& t = inputs[0].toTensor();
  if (!t.defined() || !t.is_contiguous() || t.dim() < 2) return {};
  auto dims = inputs[1].toDimVector();
  for (auto& d : dims) d = c10::maybe_wrap_dim(d, t.dim());
  std::sort(dims.begin(), dims.end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != static_cast<int64_t>(i)) return {};
  }
  const auto k = static_cast<int64_t>(dims.size());
  if (k == 0 || k >= t.dim()) return {};
  Reduce r;
  r.rows = 1;
  r.cols = 1;
  for (int64_t i = 0; i < t.dim(); ++i) (i < k ? r.rows : r.cols) *= t.size(i);
  r.acc = t.scalar_type() == at::kDouble ? 8 : 4;
  return r;
}

// Under g_events_mutex: tags the live allocation at `data`, if any.
void tag_locked(uintptr_t data, uint8_t tag) {
  auto it = live_events().find(data);
  if (it != live_events().end()) event_tags()[it->second] = tag;
}

// Under g_events_mutex.
int32_t current_op() {
  if (!g_ops_on.load(std::memory_order_relaxed) || t_frames.empty()) return -1;
  std::string label = t_frames.front().name;
  for (auto it = t_frames.rbegin(); it + 1 != t_frames.rend(); ++it) {
    if (it->name.rfind("aten::empty", 0) != 0) {
      label += " > " + it->name;
      break;
    }
  }
  auto [at, added] = op_ids().emplace(label, static_cast<int32_t>(op_names().size()));
  if (added) op_names().push_back(label);
  return at->second;
}

// Under g_events_mutex: one event, with its op and tag (each of the log's vectors has one
// entry per event).
void push_locked(int64_t delta, uintptr_t ptr, int32_t op, uint8_t tag) {
  events().emplace_back(delta, ptr);
  event_ops().push_back(op);
  event_tags().push_back(tag);
  event_threads().push_back(thread_code());
}

// Under g_events_mutex: a mark with this thread's op, if the log is on.
void mark_locked(uint64_t tag) {
  if (g_events_on.load()) push_locked(0, tag, current_op(), 0);
}

void log_event(int64_t delta, void* data) {
  if (!g_events_on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto ptr = reinterpret_cast<uintptr_t>(data);
  if (delta > 0) {
    live_events()[ptr] = events().size();
  } else {
    live_events().erase(ptr);
  }
  push_locked(delta, ptr, current_op(), delta > 0 && t_host_scope > 0 ? oomlab::kHostTag : 0);
}

// Live allocations: data pointer -> the inner allocation and its size. The DataPtr we hand out
// has the data pointer as its context (as the default allocator's do), because libtorch's
// raw_allocate path (used by some CPU kernels, e.g. bf16 addmm) requires context == data and
// frees through raw_deleter() with the data pointer alone.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};
std::mutex g_live_mutex;
std::unordered_map<void*, Counted>& live() {
  static auto* m = new std::unordered_map<void*, Counted>();  // never destroyed: outlives atexit
  return *m;
}

void counted_delete(void* data) {
  Counted c;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    auto it = live().find(data);
    if (it == live().end()) return;
    c = std::move(it->second);
    live().erase(it);
  }
  const int64_t after = g_cpu.current.fetch_sub(c.bytes) - c.bytes;
  if (g_log) std::fprintf(stderr, "oomlab-alloc -%lld %lld\n", (long long)c.bytes, (long long)after);
  log_event(-c.bytes, data);
  // c.inner frees the memory here, outside the lock.
}

// While a step is recorded on the meta device, the CPU's own allocations (the module as loaded,
// the data made before it moves to meta, a scalar) are not the step's: they go uncounted, and
// the log holds the meta device's alone, as a GPU's allocator would see the step.
std::atomic<bool> g_cpu_paused{false};

// While set, the meta device's allocations go uncounted as well: the placeholders a module kept
// for the next recording holds meanwhile (`oomlab_meta_pause`).
std::atomic<bool> g_meta_paused{false};

struct CountingAllocator final : c10::Allocator {
  c10::Allocator* inner;
  // The CPU's allocator, which a meta recording pauses (`g_cpu_paused`); else the meta device's
  // (`g_meta_paused`).
  bool pausable;
  CountingAllocator(c10::Allocator* a, bool cpu) : inner(a), pausable(cpu) {}

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return inner->allocate(0);  // no bytes to count, and no unique pointer to key
    // Uncounted, it keeps the inner allocator's own deleter, so its free is not counted either.
    if ((pausable ? g_cpu_paused : g_meta_paused).load()) return inner->allocate(n);
    const auto bytes = static_cast<int64_t>(n);
    const int64_t before = g_cpu.current.fetch_add(bytes);
    const int64_t cap = g_cpu.cap.load();
    if (cap >= 0 && before + bytes > cap) {
      g_cpu.current.fetch_sub(bytes);
      const int64_t ordinal = g_cpu.ooms.fetch_add(1) + 1;
      {
        std::lock_guard<std::mutex> lock(g_refusal_mutex);
        g_refusal = LastRefusal{ordinal, bytes, before, cap};
      }
      const int64_t free = cap > before ? cap - before : 0;
      // Worded like PyTorch 2.x's CUDA message; "budget" because the cap is oomlab's.
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory. Tried to allocate ",
                       format_size(bytes), ". CPU budget has a total capacity of ",
                       format_size(cap), " of which ", format_size(free),
                       " is free. Of the allocated memory ", format_size(before),
                       " is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
                       "unallocated.");
    }
    raise_peak(before + bytes);
    g_cpu.allocations.fetch_add(1);
    if (g_log) {
      std::fprintf(stderr, "oomlab-alloc +%lld %lld\n", (long long)bytes, (long long)(before + bytes));
    }
    c10::DataPtr dp;
    try {
      dp = inner->allocate(n);
    } catch (...) {
      g_cpu.current.fetch_sub(bytes);
      throw;
    }
    void* data = dp.get();
    const auto device = dp.device();
    {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      live().emplace(data, Counted{std::move(dp), bytes});
    }
    log_event(bytes, data);
    return {data, data, &counted_delete, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

namespace {
// The caching allocator sizes its per-device tables in CUDA's lazy initialisation, which runs at
// the first CUDA tensor. Before it, getDeviceStats(0) fails with "Invalid device argument": a
// run without a budget (no test allocation) read its stats before any tensor existed. So every
// statistics call initialises CUDA first (once; later calls return at once). getMemoryInfo does
// not: the probe calls it before applying the budget's memory fraction, which must come first.
c10::DeviceAllocator* cuda_allocator() {
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  return c10::getDeviceAllocator(c10::DeviceType::CUDA);
}

c10::DeviceAllocator* cuda_allocator_uninitialised() {
  return c10::getDeviceAllocator(c10::DeviceType::CUDA);
}

// The file libc10 was loaded from at run time (which may differ from the one linked against), or
// null where the loader cannot tell.
const char* libc10_file() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || !info.dli_fname) return nullptr;
  return info.dli_fname;
}

}  // namespace

extern "C" {

// Installs the counting allocator (once; later calls do nothing). Tensors made before it keep
// their own deleters, so only what is allocated afterwards is counted.
int oomlab_cpu_install(char* err, size_t len) noexcept {
  return guarded(err, len, [] {
    static CountingAllocator* installed = [] {
      auto* a = new CountingAllocator(c10::GetDefaultCPUAllocator(), /*cpu=*/true);
      c10::SetCPUAllocator(a, /*priority=*/100);
      return a;
    }();
    (void)installed;
  });
}

// The meta device's memory: none at all. Each allocation gets an address of its own (never read:
// a meta kernel computes shapes only) far above any real one and below the recording's own ids
// (train::record's OWN_IDS, 1 << 62), so that the log keys it as it keys a CPU allocation.
struct MetaMemory final : c10::Allocator {
  std::atomic<uint64_t> next{uint64_t(1) << 61};
  static void nothing(void*) {}
  c10::DataPtr allocate(size_t n) override {
    void* p = reinterpret_cast<void*>(next.fetch_add((n + 127) / 64 * 64));
    return {p, p, &nothing, c10::Device(c10::DeviceType::Meta)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &nothing; }
  void copy_data(void*, const void*, std::size_t) const override {}
};

void oomlab_meta_register();  // meta.cpp

// Installs the counting allocator for the meta device, and oomlab's meta kernels (once): a meta
// tensor's bytes are counted and logged as a CPU tensor's are, into the same counters, so that a
// step run on meta reads as a step run on the CPU without its kernels' arithmetic or memory
// (`train::record`'s meta recording). The CPU's counting allocator comes first.
int oomlab_meta_install(char* err, size_t len) noexcept {
  return guarded(err, len, [] {
    oomlab_meta_register();
    static CountingAllocator* installed = [] {
      auto* a = new CountingAllocator(new MetaMemory(), /*cpu=*/false);
      c10::SetAllocator(c10::DeviceType::Meta, a, /*priority=*/100);
      return a;
    }();
    (void)installed;
  });
}

// Pauses (1) or resumes (0) the counting of the CPU's allocations: see g_cpu_paused.
void oomlab_cpu_pause(int on) noexcept { g_cpu_paused.store(on != 0); }

// Pauses (1) or resumes (0) the counting of the meta device's allocations: see g_meta_paused.
void oomlab_meta_pause(int on) noexcept { g_meta_paused.store(on != 0); }

// A copy of `t` on the meta device (its shape, strides' layout and dtype; no data), as a new
// heap tensor the caller owns; null with `err` on failure.
void* oomlab_to_meta(void* t, char* err, size_t len) noexcept {
  void* out = nullptr;
  guarded(err, len, [&] {
    const auto& src = *static_cast<at::Tensor*>(t);
    out = new at::Tensor(src.to(c10::Device(c10::DeviceType::Meta)));
  });
  return out;
}

// A new contiguous tensor of `sizes` and `dtype` (a c10::ScalarType) on the meta device: what a
// factory (randn, randint, zeros, arange) makes there, as a heap tensor the caller owns; null with
// `err` on failure.
void* oomlab_meta_empty(const int64_t* sizes, size_t n, int dtype, char* err, size_t len) noexcept {
  void* out = nullptr;
  guarded(err, len, [&] {
    const auto options =
        at::TensorOptions().device(c10::DeviceType::Meta).dtype(static_cast<c10::ScalarType>(dtype));
    out = new at::Tensor(at::empty(c10::IntArrayRef(sizes, n), options));
  });
  return out;
}

void oomlab_cpu_set_cap(int64_t bytes) noexcept { g_cpu.cap.store(bytes); }

int64_t oomlab_cpu_cap() noexcept { return g_cpu.cap.load(); }

// Starts the event log afresh; with `with_ops`, each event also names its op (a RecordFunction
// callback for every op and autograd node, for as long as the log is on).
void oomlab_cpu_events_start(int with_ops) noexcept {
  t_frames.clear();
  if (with_ops && !g_ops_on.load()) {
    try {
      auto start = [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        Frame f;
        f.name = fn.name();
        // A Python scalar wrapped as a 0-dim tensor (`wrapped_scalar_tensor`) is made on the
        // host whatever the device: on CUDA the kernel takes it as an argument. On the CPU,
        // TensorIterator may cast it to the op's dtype first (`compute_types`: `aten::to`), a
        // copy that is the host's too. Whatever throws, the op gets its frame.
        bool wrapped = false;
        // The convolution it is, if one: its start is marked, after the span's.
        std::optional<Conv> conv;
        // The flash attention it is, if one: its start is marked, after the span's.
        std::optional<Attn> attn;
        try {
          for (const auto& v : fn.inputs()) {
            if (!v.isTensor()) continue;
            const auto& t = v.toTensor();
            if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number() && t.has_storage()) {
              std::lock_guard<std::mutex> lock(g_events_mutex);
              tag_locked(reinterpret_cast<uintptr_t>(t.storage().data()), oomlab::kHostTag);
              wrapped = true;
            }
          }
          f.reduce = rows_reduced(fn);
          conv = conv_call(fn);
          attn = attn_call(fn);
        } catch (...) {
          // An op whose inputs cannot be read: no tag, no reduction or convolution mark.
        }
        f.cast = wrapped && std::strncmp(fn.name(), "aten::to", 8) == 0;
        if (f.cast) ++t_host_scope;
        const bool opens = opens_span(fn.name());
        const bool enclosed = !t_frames.empty() && t_frames.back().within_span;
        f.within_span = opens || enclosed;
        f.span = opens && !enclosed;
        const bool span = f.span;
        t_frames.push_back(std::move(f));
        if (span || conv || attn) {
          std::lock_guard<std::mutex> lock(g_events_mutex);
          if (span) mark_locked(kSpanBegin);
          if (conv && g_events_on.load()) {
            mark_locked(kConvMark + convs().size());
            convs().push_back(*conv);
          }
          if (attn && g_events_on.load()) {
            mark_locked(kAttnMark + attns().size());
            attns().push_back(*attn);
          }
        }
        return nullptr;
      };
      auto end = [](const at::RecordFunction&, at::ObserverContext*) {
        if (t_frames.empty()) return;  // an op begun before the log
        const Frame& f = t_frames.back();
        {
          std::lock_guard<std::mutex> lock(g_events_mutex);
          if (f.span) mark_locked(kSpanEnd);
          if (f.reduce.rows > 0 && g_events_on.load()) {
            mark_locked(kReduceMark + reduces().size());
            reduces().push_back(f.reduce);
          }
        }
        if (f.cast) --t_host_scope;
        t_frames.pop_back();
      };
      g_op_handle = at::addGlobalCallback(at::RecordFunctionCallback(start, end)
                                              .needsInputs(true)
                                              .scopes({at::RecordScope::FUNCTION,
                                                       at::RecordScope::BACKWARD_FUNCTION}));
      g_ops_on.store(true);
    } catch (...) {
      // The log goes on without op names.
    }
  }
  std::lock_guard<std::mutex> lock(g_events_mutex);
  events().clear();
  event_ops().clear();
  event_tags().clear();
  event_threads().clear();
  live_events().clear();
  reduces().clear();
  convs().clear();
  attns().clear();
  g_events_on.store(true);
}

// The op of each event of the last log (up to `cap`; -1 for none), and the name of op `id`
// into `buf` (NUL-terminated; returns its length, or -1 for no such id).
void oomlab_cpu_events_ops(int32_t* ids, int64_t cap) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto& v = event_ops();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < cap; ++i) ids[i] = v[i];
}

int64_t oomlab_cpu_events_op_name(int32_t id, char* buf, size_t len) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  if (id < 0 || static_cast<size_t>(id) >= op_names().size()) return -1;
  oomlab::set_err(buf, len, op_names()[id].c_str());
  return static_cast<int64_t>(op_names()[id].size());
}

// Each event's tag of the last log (up to `cap`): 0 for the phase's default, 1 host, 2 device.
void oomlab_cpu_events_tags(uint8_t* tags, int64_t cap) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto& v = event_tags();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < cap; ++i) tags[i] = v[i];
}

// Each event's thread of the last log (up to `cap`): 0 outside a parallel region, else 1 + the
// thread's number in it.
void oomlab_cpu_events_threads(uint16_t* threads, int64_t cap) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto& v = event_threads();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < cap; ++i) threads[i] = v[i];
}

// The convolutions the last log marks (up to `cap`), 14 integers each (`Conv`'s fields in order);
// returns how many.
int64_t oomlab_cpu_events_convs(int64_t* out, int64_t cap) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto& v = convs();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < cap; ++i) {
    const Conv& c = v[i];
    int64_t* o = out + 14 * i;
    for (int k = 0; k < 4; ++k) {
      o[k] = c.input[k];
      o[4 + k] = c.weight[k];
    }
    o[8] = c.stride;
    o[9] = c.padding;
    o[10] = c.groups;
    o[11] = c.dtype;
    o[12] = c.backward;
    o[13] = c.known;
  }
  return static_cast<int64_t>(v.size());
}

// The flash attention calls the last log marks (up to `cap`), 16 integers each (`Attn`'s
// fields in order); returns how many.
int64_t oomlab_cpu_events_attns(int64_t* out, int64_t cap) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto& v = attns();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < cap; ++i) {
    const Attn& a = v[i];
    int64_t* o = out + 16 * i;
    for (int d = 0; d < 4; ++d) {
      o[d] = a.q[d];
      o[4 + d] = a.k[d];
      o[8 + d] = a.v[d];
    }
    o[12] = a.dtype;
    o[13] = a.backward;
    o[14] = a.causal;
    o[15] = a.masked;
  }
  return static_cast<int64_t>(v.size());
}

// The reductions the last log marks (up to `cap`), as (rows, cols, acc) triples; returns how many.
int64_t oomlab_cpu_events_reduces(int64_t* out, int64_t cap) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  const auto& v = reduces();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < cap; ++i) {
    out[3 * i] = v[i].rows;
    out[3 * i + 1] = v[i].cols;
    out[3 * i + 2] = v[i].acc;
  }
  return static_cast<int64_t>(v.size());
}

// Tags the live allocation at `data` (1 host, 2 device) in the log, if one is on.
void oomlab_cpu_events_tag(const void* data, int tag) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  if (g_events_on.load()) tag_locked(reinterpret_cast<uintptr_t>(data), static_cast<uint8_t>(tag));
}

// Enters (`on`) or leaves a scope whose allocations on this thread are tagged the host's.
void oomlab_cpu_events_host(int on) noexcept { t_host_scope += on ? 1 : -1; }

// A mark in the log (0 bytes, and `tag` for the pointer: no counted allocation has 0 bytes),
// where the caller says something happened: the recorded estimate marks where each phase's peak
// starts and where the phase ends.
void oomlab_cpu_events_mark(uint64_t tag) noexcept {
  std::lock_guard<std::mutex> lock(g_events_mutex);
  // The recorder's own: no op, whatever runs.
  if (g_events_on.load()) push_locked(0, tag, -1, 0);
}

// Stops the log and copies up to `cap` events out; returns how many there were.
int64_t oomlab_cpu_events_stop(int64_t* deltas, uint64_t* ptrs, int64_t cap) noexcept {
  if (g_ops_on.exchange(false)) {
    at::removeCallback(g_op_handle);
    t_frames.clear();
  }
  std::lock_guard<std::mutex> lock(g_events_mutex);
  g_events_on.store(false);
  const auto& v = events();
  const int64_t n = static_cast<int64_t>(v.size());
  for (int64_t i = 0; i < n && i < cap; ++i) {
    deltas[i] = v[i].first;
    ptrs[i] = v[i].second;
  }
  return n;
}

void oomlab_cpu_stats(oomlab_stats* out) noexcept {
  const int64_t current = g_cpu.current.load();
  const int64_t peak = g_cpu.peak.load();
  // No cache on CPU: reserved is allocated.
  *out = {current, peak, current, peak, g_cpu.ooms.load(), 0};
}

int64_t oomlab_cpu_allocations() noexcept { return g_cpu.allocations.load(); }

// The bytes the counting allocator handed out at `data`, or -1 where it did not (memory made
// before it was installed, or by another allocator).
int64_t oomlab_cpu_counted_bytes(const void* data) noexcept {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  auto it = live().find(const_cast<void*>(data));
  return it == live().end() ? -1 : it->second.bytes;
}

// The last refusal to the byte (ordinal, requested, allocated before it, cap); ordinal 0: none.
void oomlab_cpu_last_refusal(int64_t* out) noexcept {
  std::lock_guard<std::mutex> lock(g_refusal_mutex);
  out[0] = g_refusal.ordinal;
  out[1] = g_refusal.requested;
  out[2] = g_refusal.allocated;
  out[3] = g_refusal.cap;
}

void oomlab_cpu_reset_peak() noexcept { g_cpu.peak.store(g_cpu.current.load()); }

int oomlab_cuda_stats(int device, oomlab_stats* out, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    const auto s = cuda_allocator()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *out = {s.allocated_bytes[agg].current, s.allocated_bytes[agg].peak,
            s.reserved_bytes[agg].current,  s.reserved_bytes[agg].peak,
            s.num_ooms,                     s.num_alloc_retries};
  });
}

int oomlab_cuda_reset_peak(int device, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    cuda_allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

int oomlab_cuda_empty_cache(char* err, size_t len) noexcept {
  return guarded(err, len, [] { cuda_allocator()->emptyCache(); });
}

int oomlab_cuda_mem_info(int device, uint64_t* free, uint64_t* total, char* err,
                         size_t len) noexcept {
  return guarded(err, len, [&] {
    const auto info = cuda_allocator_uninitialised()->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
    *free = info.first;
    *total = info.second;
  });
}

// Applies allocator settings ("per_process_memory_fraction:0.2") as torch's
// _accelerator_setAllocatorSettings does; the CUDA allocator's config hook takes its keys.
int oomlab_set_allocator_settings(const char* settings, char* err, size_t len) noexcept {
  return guarded(err, len, [&] { c10::CachingAllocator::setAllocatorSettings(settings); });
}

// device_type: 0 CPU, 1 CUDA (c10::DeviceType values). dtype: a c10::ScalarType value.
int oomlab_autocast_set(int device_type, int enabled, int dtype, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    const auto dt = static_cast<c10::DeviceType>(device_type);
    if (enabled) at::autocast::set_autocast_dtype(dt, static_cast<at::ScalarType>(dtype));
    at::autocast::set_autocast_enabled(dt, enabled != 0);
    // Autocast caches casted weights while enabled; drop them when it ends, as PyTorch does.
    if (!enabled) at::autocast::clear_cache();
  });
}

// The default random generator of a device (0: the CPU; 1: CUDA device `index`).
static at::Generator default_generator(int device_type, int index) {
  if (device_type == 0) return at::detail::getDefaultCPUGenerator();
  return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, index));
}

// A copy of a generator's state (a new CPU byte tensor, as torch.get_rng_state() makes), for a
// checkpointed segment's recompute to draw the same dropout masks; null on failure.
void* oomlab_rng_state(int device_type, int index, char* err, size_t len) noexcept {
  at::Tensor* out = nullptr;
  const int rc = guarded(err, len, [&] {
    at::Generator gen = default_generator(device_type, index);
    std::lock_guard<std::mutex> lock(gen.mutex());
    oomlab::OnHost host;  // a host tensor whatever the device
    out = new at::Tensor(gen.get_state());
  });
  return rc == 0 ? out : nullptr;
}

// Puts a state from oomlab_rng_state back (torch.set_rng_state).
int oomlab_set_rng_state(int device_type, int index, void* state, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    at::Generator gen = default_generator(device_type, index);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(*static_cast<at::Tensor*>(state));
  });
}

// A new heap at::Tensor handle for tch, or null for an undefined one.
static void* handle(const at::Tensor& t) { return t.defined() ? new at::Tensor(t) : nullptr; }

// at::convolution_backward for a 2-d convolution (what ConvolutionBackward0 runs), which tch does
// not bind: the estimate measures what it allocates. `bias_size` < 0: no bias. Writes the input's,
// weight's and bias's gradients (null where not asked for) to `out`.
int oomlab_conv2d_backward(void* grad, void* input, void* weight, int64_t bias_size, int64_t stride,
                           int64_t padding, int64_t groups, int m0, int m1, int m2, void** out,
                           char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    std::optional<c10::IntArrayRef> bias_sizes;
    std::vector<int64_t> b;
    if (bias_size >= 0) {
      b.push_back(bias_size);
      bias_sizes = c10::IntArrayRef(b);
    }
    const std::vector<int64_t> s{stride, stride}, p{padding, padding}, d{1, 1}, op{0, 0};
    auto r = at::convolution_backward(*static_cast<at::Tensor*>(grad), *static_cast<at::Tensor*>(input),
                                      *static_cast<at::Tensor*>(weight), bias_sizes, s, p, d, false, op,
                                      groups, {m0 != 0, m1 != 0, m2 != 0});
    out[0] = handle(std::get<0>(r));
    out[1] = handle(std::get<1>(r));
    out[2] = handle(std::get<2>(r));
  });
}

// at::native_batch_norm_backward in training (what NativeBatchNormBackward0 runs), which tch does
// not bind. Writes the input's, weight's and bias's gradients (null where not asked for).
int oomlab_batch_norm_backward(void* grad, void* input, void* weight, void* mean, void* var,
                               void* save_mean, void* save_invstd, int m0, int m1, int m2,
                               void** out, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    auto t = [](void* p) { return std::optional<at::Tensor>(*static_cast<at::Tensor*>(p)); };
    auto r = at::native_batch_norm_backward(*static_cast<at::Tensor*>(grad), *static_cast<at::Tensor*>(input),
                                            t(weight), t(mean), t(var), t(save_mean), t(save_invstd), true,
                                            1e-5, {m0 != 0, m1 != 0, m2 != 0});
    out[0] = handle(std::get<0>(r));
    out[1] = handle(std::get<1>(r));
    out[2] = handle(std::get<2>(r));
  });
}

int oomlab_autocast_enabled(int device_type) noexcept {
  try {
    return at::autocast::is_autocast_enabled(static_cast<c10::DeviceType>(device_type)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// "2.11.0": the headers this binary was built against.
const char* oomlab_torch_version() noexcept {
#define OOMLAB_STR2(x) #x
#define OOMLAB_STR(x) OOMLAB_STR2(x)
  return OOMLAB_STR(TORCH_VERSION_MAJOR) "." OOMLAB_STR(TORCH_VERSION_MINOR) "." OOMLAB_STR(
      TORCH_VERSION_PATCH);
}

// The CUDA runtime libtorch was built with, as 13000 for 13.0; 0 when unknown.
long oomlab_cuda_runtime_version() noexcept {
  try {
    return at::detail::getCUDAHooks().versionCUDART();
  } catch (...) {
    return 0;
  }
}

// Loads libtorch_cuda from the folder libc10 was loaded from, as the binary's own link would have
// at its start: its static initialisers register CUDA's hooks, allocator, guard and kernels. The
// binary does not link it (`link_libtorch.rs`), so that a command that never asks about CUDA does not pay
// for loading it and the CUDA libraries it pulls in (a third of every start's time on a CPU
// machine). Call it before anything asks libtorch about CUDA, and before the first backward
// (the autograd engine sizes its device threads once): libtorch caches the answers. 1: loaded;
// 0: the libtorch has no libtorch_cuda (a CPU-only build); -1: it failed to load (`err` says why).
int oomlab_cuda_load(char* err, size_t len) noexcept {
  const char* libc10 = libc10_file();
  if (libc10 == nullptr) {
    set_err(err, len, "cannot tell where libc10 was loaded from");
    return -1;
  }
  std::string path(libc10);
  path = path.substr(0, path.find_last_of('/') + 1) + "libtorch_cuda.so";
  if (access(path.c_str(), F_OK) != 0) {
    return 0;
  }
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    set_err(err, len, (path + ": " + (why ? why : "dlopen failed")).c_str());
    return -1;
  }
  return 1;
}

// The file libc10 was loaded from at run time, which may differ from the one linked against.
int oomlab_libtorch_path(char* out, size_t len) noexcept {
  const char* libc10 = libc10_file();
  if (libc10 == nullptr) return 1;
  set_err(out, len, libc10);
  return 0;
}

}  // extern "C"
