// A byte-exact CPU memory oracle for PyTorch itself: a counting allocator that Python installs as
// libtorch's CPU allocator (through ctypes, see cpu_memory.py beside this file), so the reference
// scripts can read, in plain eager PyTorch, the same counters oomlab's own shim reads from Rust.
//
// It is modelled on src/ffi/shim.cpp's CountingAllocator:
// - it wraps the allocator that was the default when it was installed and counts live bytes and
//   their peak (resettable to the current value);
// - the DataPtr it hands out has the data pointer as its context, as the default allocator's do,
//   because libtorch's raw_allocate path (used by some CPU kernels, e.g. bf16 addmm) requires
//   context == data and frees through raw_deleter() with the data pointer alone;
// - a free for a pointer it did not allocate (made before it was installed, or by another
//   allocator) is ignored: it is not counted and it is left alone;
// - zero-byte allocations are neither counted nor logged.
// When logging is on, every counted allocation and free is appended to an in-memory log:
// (+bytes or -bytes, live bytes after it, the allocation's serial number, the thread's ordinal,
// the data pointer), which Python reads and clears. A free carries the serial number of the allocation it frees, so
// a reader can pair them.
//
// Every entry point is extern "C" and noexcept: nothing throws across the boundary. (allocate
// itself may throw, as any c10::Allocator may, into libtorch, never into Python.)
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};  // counted allocations ever made (also the serial number)
  std::atomic<int64_t> frees{0};        // counted frees ever made
  std::atomic<bool> logging{false};
};
Counters g;

// One logged event: five int64 fields, so Python reads the log as a flat int64 array.
struct Event {
  int64_t delta;   // +bytes for an allocation, -bytes for a free
  int64_t live;    // live bytes right after it
  int64_t serial;  // the allocation's serial number (1, 2, ...): the same on its free
  int64_t thread;  // the ordinal of the thread that made the event (0 for the first one seen)
  int64_t ptr;     // the data pointer (to match a tensor's storage().data_ptr())
};

std::mutex g_log_mutex;
std::vector<Event>& log_events() {
  static auto* v = new std::vector<Event>();  // never destroyed: outlives atexit
  return *v;
}

std::atomic<int64_t> g_next_thread{0};
int64_t thread_ordinal() {
  thread_local int64_t ordinal = g_next_thread.fetch_add(1);
  return ordinal;
}

void append(int64_t delta, int64_t live, int64_t serial, const void* ptr) {
  const int64_t t = thread_ordinal();
  const auto p = static_cast<int64_t>(reinterpret_cast<intptr_t>(ptr));
  std::lock_guard<std::mutex> lock(g_log_mutex);
  log_events().push_back(Event{delta, live, serial, t, p});
}

void raise_peak(int64_t now) {
  int64_t seen = g.peak.load();
  while (now > seen && !g.peak.compare_exchange_weak(seen, now)) {
  }
}

// Live allocations: data pointer -> the inner allocation, its size and serial number.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
  int64_t serial;
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
    if (it == live().end()) return;  // not ours: ignored
    c = std::move(it->second);
    live().erase(it);
  }
  const int64_t after = g.current.fetch_sub(c.bytes) - c.bytes;
  g.frees.fetch_add(1);
  if (g.logging.load()) append(-c.bytes, after, c.serial, data);
  // c.inner frees the memory here, outside the lock.
}

struct CountingAllocator final : c10::Allocator {
  c10::Allocator* inner;
  explicit CountingAllocator(c10::Allocator* a) : inner(a) {}

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return inner->allocate(0);  // no bytes to count, and no unique pointer to key
    const auto bytes = static_cast<int64_t>(n);
    c10::DataPtr dp = inner->allocate(n);  // may throw (out of memory): nothing counted yet
    void* data = dp.get();
    const auto device = dp.device();
    const int64_t serial = g.allocations.fetch_add(1) + 1;
    {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      live().emplace(data, Counted{std::move(dp), bytes, serial});
    }
    const int64_t after = g.current.fetch_add(bytes) + bytes;
    raise_peak(after);
    if (g.logging.load()) append(bytes, after, serial, data);
    return {data, data, &counted_delete, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CountingAllocator* g_installed = nullptr;
std::mutex g_install_mutex;

}  // namespace

extern "C" {

// Installs the counting allocator as libtorch's CPU allocator (once; later calls do nothing).
// Returns 0 on success, 1 if installing failed. Tensors made before it keep their own deleters,
// so only what is allocated afterwards is counted.
int oomlab_count_install() noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_install_mutex);
    if (g_installed == nullptr) {
      auto* a = new CountingAllocator(c10::GetDefaultCPUAllocator());
      // A high priority, so that no later SetCPUAllocator with a lower one replaces it.
      c10::SetCPUAllocator(a, /*priority=*/100);
      g_installed = a;
    }
    return 0;
  } catch (...) {
    return 1;
  }
}

// 1 when the counting allocator is libtorch's CPU allocator now.
int oomlab_count_is_active() noexcept {
  try {
    return (g_installed != nullptr && c10::GetCPUAllocator() == g_installed) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int64_t oomlab_count_allocated() noexcept { return g.current.load(); }
int64_t oomlab_count_peak() noexcept { return g.peak.load(); }
void oomlab_count_reset_peak() noexcept { g.peak.store(g.current.load()); }
int64_t oomlab_count_allocations() noexcept { return g.allocations.load(); }
int64_t oomlab_count_frees() noexcept { return g.frees.load(); }

void oomlab_count_set_logging(int on) noexcept { g.logging.store(on != 0); }
int oomlab_count_logging() noexcept { return g.logging.load() ? 1 : 0; }

int64_t oomlab_count_num_events() noexcept {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  return static_cast<int64_t>(log_events().size());
}

// Copies events [start, start + max) of the log into out (5 int64 per event: delta, live,
// serial, thread, pointer) and returns how many it copied.
int64_t oomlab_count_read_events(int64_t start, int64_t* out, int64_t max) noexcept {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  const auto& v = log_events();
  const int64_t n = static_cast<int64_t>(v.size());
  if (start < 0 || start >= n || max <= 0 || out == nullptr) return 0;
  const int64_t k = (n - start) < max ? (n - start) : max;
  std::memcpy(out, v.data() + start, static_cast<size_t>(k) * sizeof(Event));
  return k;
}

// Empties the log. The vector keeps its capacity, so clearing allocates nothing.
void oomlab_count_clear_events() noexcept {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  log_events().clear();
}

}  // extern "C"
