// torch.distributed's C++ core, as PyTorch's Python drives it: a process group over a store
// (`init_process_group`), its collectives, and DistributedDataParallel's own engine
// (`c10d::Reducer`: gradient buckets, autograd hooks that copy each gradient into its bucket and
// all-reduce a bucket once it is full, bucket rebuilding after the first step). Nothing here is a
// collective of oomlab's: the backend is libtorch's gloo, the reducer libtorch's, so what a rank
// holds is what PyTorch's DDP makes it hold. Each function names the Python it mirrors
// (torch/distributed/distributed_c10d.py, torch/nn/parallel/distributed.py in PyTorch 2.11).
//
// gloo's own headers are not in the wheel: `gloo/` beside this file declares the names that
// ProcessGroupGloo.hpp mentions (see gloo/README.md).
#define USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "guarded.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using oomlab::guarded;

// c10d's flight recorder (a process-wide log of collectives, for debugging hangs, on by default
// in 2.11) keeps each process group's status in a map it reads and inserts into outside its lock
// when a collective is enqueued (FlightRecorder::recordWithResetEnabled): two groups of one
// process enqueueing at once can corrupt it. oomlab's ranks are a process each, one group each,
// whose enqueues the group's own lock orders; its tests run ranks as threads of one process,
// where it crashed (a segfault in _Rb_tree_insert_and_rebalance under verify_params_across_
// processes, 5 runs of 8 of ddp_engine's random-bucket test). Turned off here, before main and
// so before any thread or group exists, unless TORCH_FR_BUFFER_SIZE is set already; it records
// sizes, not tensors, so nothing the allocator counts changes.
const bool flight_recorder_off = [] { return setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0) == 0; }();

// A process group with its store: what `dist.init_process_group("gloo", ...)` leaves as WORLD.
struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
};

// `DistributedDataParallel`'s state in C++: its reducer, and what its forward consults.
struct Ddp {
  Group* group;
  std::unique_ptr<c10d::Reducer> reducer;
  std::vector<at::Tensor> buffers;
  bool find_unused_parameters;
  bool static_graph;
};

// `dist._DEFAULT_FIRST_BUCKET_BYTES` and DDP's default `bucket_cap_mb` (25).
constexpr int64_t kFirstBucketBytes = 1024 * 1024;
// `_sync_module_states`'s `broadcast_bucket_size` (250 MiB).
constexpr size_t kBroadcastBucketBytes = 250 * 1024 * 1024;

std::vector<at::Tensor> tensors(void* const* ptrs, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*static_cast<at::Tensor*>(ptrs[i]));
  return out;
}

// Gives the group's finished collectives the moment to let go of their tensors (not when the
// reducer goes: a barrier there crashed the random-models test 2 times in 18 under load): a barrier, which
// the group's one worker runs after the works before it (see `opts->threads`). gloo's own
// barrier, not the ProcessGroup's, which makes a one-byte tensor to dispatch on that outlives
// the call.
void settle(Group& g) { g.pg->getBackend(c10::DeviceType::CPU)->barrier()->wait(); }

}  // namespace

extern "C" {

// `init_process_group(backend="gloo", ...)` on one store: a FileStore at `file` when it is not
// null (ranks of one machine started together), else a TCPStore at host:port whose server is
// rank 0 (as torchrun's `MASTER_ADDR`/`MASTER_PORT`), or, with `prefix` not null, the keys under
// `prefix` of a TCPStore some other process serves (a launched world's agents', every rank a
// client). `timeout_ms` bounds the rendezvous and every collective: a rank that died or hangs
// makes the others fail after it, not wait forever.
void* oomlab_dist_group(const char* host, int port, const char* prefix, const char* file,
                        int rank, int size, int64_t timeout_ms, char* err, size_t len) noexcept {
  Group* out = nullptr;
  guarded(err, len, [&] {
    TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " of a world of ", size);
    const std::chrono::milliseconds timeout(timeout_ms);
    c10::intrusive_ptr<c10d::Store> store;
    if (file != nullptr) {
      store = c10::make_intrusive<c10d::FileStore>(file, size);
      store->setTimeout(timeout);
    } else if (prefix != nullptr) {
      c10d::TCPStoreOptions opts;
      opts.port = static_cast<std::uint16_t>(port);
      opts.isServer = false;
      opts.waitWorkers = false;
      opts.timeout = timeout;
      store = c10::make_intrusive<c10d::PrefixStore>(
          prefix, c10::make_intrusive<c10d::TCPStore>(host, opts));
    } else {
      c10d::TCPStoreOptions opts;
      opts.port = static_cast<std::uint16_t>(port);
      opts.isServer = rank == 0;
      opts.numWorkers = static_cast<size_t>(size);
      opts.waitWorkers = true;
      opts.timeout = timeout;
      store = c10::make_intrusive<c10d::TCPStore>(host, opts);
    }
    // `_new_process_group_helper`: the group's keys under its name ("0" for WORLD), the
    // backend's under the backend's name within them.
    auto group_store = c10::make_intrusive<c10d::PrefixStore>("0/", store);
    auto backend_store = c10::make_intrusive<c10d::PrefixStore>("gloo/", group_store);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    // One worker thread (PyTorch's default is two): gloo's worker lets go of a finished
    // collective's tensors a moment after the caller's wait returns, on its own thread, so a
    // measurement taken then may still see them. With one worker the works run in order, and a
    // barrier after a collective (`settle`) leaves a later phase that moment: measured, it
    // makes the leftovers rare, not impossible (tests/suite/ddp_run.rs allows one collective's
    // tensors in the first two steps). CPU collectives allocate nothing through PyTorch's
    // allocator besides their tensors, so the bytes are PyTorch's.
    opts->threads = 1;
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(backend_store, rank, size, opts);
    backend->setSequenceNumberForGroup();
    auto pg = c10::make_intrusive<c10d::ProcessGroup>(group_store, rank, size);
    pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
    pg->setGroupName("0");
    out = new Group{store, pg};
  });
  return out;
}

void oomlab_dist_group_free(void* g) noexcept { delete static_cast<Group*>(g); }

// `dist.all_reduce(tensor)` (a sum), waited for.
int oomlab_dist_all_reduce(void* g, void* tensor, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> t{*static_cast<at::Tensor*>(tensor)};
    static_cast<Group*>(g)->pg->allreduce(t)->wait();
  });
}

// `dist.broadcast(tensor, src)`, waited for.
int oomlab_dist_broadcast(void* g, void* tensor, int src, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> t{*static_cast<at::Tensor*>(tensor)};
    c10d::BroadcastOptions opts;
    opts.rootRank = src;
    static_cast<Group*>(g)->pg->broadcast(t, opts)->wait();
  });
}

// `dist.barrier()`.
int oomlab_dist_barrier(void* g, char* err, size_t len) noexcept {
  return guarded(err, len, [&] { static_cast<Group*>(g)->pg->barrier()->wait(); });
}

// A launched world's own TCPStore (`torch.distributed.TCPStore`): its server in this process
// when `server` (then it waits for `workers` participants, itself included), else a client of the one
// at host:port (torchrun's agent's, or rank 0's). Its agents meet and pass their trials on it.
void* oomlab_store_tcp(const char* host, int port, int server, int workers, int64_t timeout_ms,
                       char* err, size_t len) noexcept {
  c10d::Store* out = nullptr;
  guarded(err, len, [&] {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = server != 0;
    // Every participant counts itself in (`waitForWorkers`); the server waits for the count.
    opts.numWorkers = static_cast<size_t>(workers);
    opts.waitWorkers = true;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::TCPStore>(host, opts);
    out = store.release();
  });
  return out;
}

void oomlab_store_free(void* s) noexcept {
  c10::intrusive_ptr<c10d::Store>::reclaim(static_cast<c10d::Store*>(s));
}

int oomlab_store_set(void* s, const char* key, const uint8_t* data, size_t n, char* err,
                     size_t len) noexcept {
  return guarded(err, len, [&] {
    static_cast<c10d::Store*>(s)->set(key, std::vector<uint8_t>(data, data + n));
  });
}

// Whether `key` is set, without waiting: `*present` 1 or 0.
int oomlab_store_check(void* s, const char* key, int* present, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    *present = static_cast<c10d::Store*>(s)->check({std::string(key)}) ? 1 : 0;
  });
}

// `key`'s value, set already (see `oomlab_store_check`), handed to `sink`.
int oomlab_store_get(void* s, const char* key, void* ctx,
                     void (*sink)(void*, const uint8_t*, size_t), char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    const auto value = static_cast<c10d::Store*>(s)->get(key);
    sink(ctx, value.data(), value.size());
  });
}

// `DistributedDataParallel(module, process_group=..., bucket_cap_mb=..., ...)` on the CPU:
// parameters (those that need a gradient, in `module.parameters()` order) and buffers.
// `bucket_cap_bytes` < 0 is the default (25 MiB, the first bucket 1 MiB).
void* oomlab_ddp_new(void* g, void* const* params, size_t n, void* const* buffers, size_t nb,
                     int64_t bucket_cap_bytes, int find_unused_parameters,
                     int gradient_as_bucket_view, int static_graph, char* err,
                     size_t len) noexcept {
  Ddp* out = nullptr;
  guarded(err, len, [&] {
    auto* group = static_cast<Group*>(g);
    auto parameters = tensors(params, n);
    auto module_buffers = tensors(buffers, nb);
    const bool cap_default = bucket_cap_bytes < 0;
    const int64_t cap = cap_default ? 25 * 1024 * 1024 : bucket_cap_bytes;
    // `_verify_param_shape_across_processes`: every rank's parameters the same shapes.
    c10d::verify_params_across_processes(group->pg, parameters, std::nullopt);
    settle(*group);
    // `_sync_module_states`: rank 0's parameters and buffers broadcast to every rank, in
    // coalesced buffers of 250 MiB.
    {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> states;
      for (const auto& p : parameters) states.push_back(p.detach());
      for (const auto& b : module_buffers) states.push_back(b.detach());
      if (!states.empty()) c10d::broadcast_coalesced(group->pg, states, kBroadcastBucketBytes, 0);
    }
    settle(*group);
    // `_ddp_init_helper`: the first step's buckets. Without unused parameters to find (or with
    // a static graph) one bucket of every parameter, rebuilt after the first step in the order
    // the gradients came; else buckets of the first cap, then the cap.
    std::vector<size_t> limits;
    if (static_graph || !find_unused_parameters) {
      limits = {static_cast<size_t>(SIZE_MAX)};
    } else if (cap_default) {
      limits = {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(cap)};
    } else {
      limits = {static_cast<size_t>(cap)};
    }
    std::vector<bool> sparse(parameters.size(), false);
    auto [indices, per_bucket_limits] =
        c10d::compute_bucket_assignment_by_size(parameters, limits, sparse, {}, std::nullopt);
    (void)per_bucket_limits;  // as Python's binding, the reducer takes no per-bucket limits
    std::reverse(indices.begin(), indices.end());
    std::unordered_map<size_t, std::string> names;
    auto reducer = std::make_unique<c10d::Reducer>(
        parameters, indices, group->pg, sparse, cap, find_unused_parameters != 0,
        gradient_as_bucket_view != 0, names, cap_default ? kFirstBucketBytes : cap,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        std::vector<int64_t>{});
    if (static_graph) reducer->set_static_graph();
    out = new Ddp{group, std::move(reducer), module_buffers, find_unused_parameters != 0,
                  static_graph != 0};
  });
  return out;
}

void oomlab_ddp_free(void* d) noexcept { delete static_cast<Ddp*>(d); }

// `DistributedDataParallel._pre_forward` with grad enabled: `prepare_for_forward`, the buckets
// rebuilt at the second step, rank 0's buffers broadcast (`broadcast_buffers=True`).
int oomlab_ddp_pre_forward(void* raw, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    auto& d = *static_cast<Ddp*>(raw);
    const bool grad = at::GradMode::is_enabled();
    // The last backward's all-reduces let go of their buckets before a rebuild frees them.
    settle(*d.group);
    if (grad) d.reducer->prepare_for_forward();
    if (grad) d.reducer->rebuild_buckets();
    if (!d.buffers.empty()) {
      at::NoGradGuard no_grad;
      c10d::broadcast_coalesced(d.group->pg, d.buffers, kBroadcastBucketBytes, 0);
    }
    // The rebuild's broadcast of the bucket order, and the buffers', let go.
    settle(*d.group);
  });
}

// `DistributedDataParallel._post_forward`: the reducer told a backward follows (with the
// outputs, to find unused parameters, when asked to).
int oomlab_ddp_post_forward(void* raw, void* const* outputs, size_t n, char* err,
                            size_t len) noexcept {
  return guarded(err, len, [&] {
    auto& d = *static_cast<Ddp*>(raw);
    if (!at::GradMode::is_enabled()) return;
    if (d.find_unused_parameters && !d.static_graph) {
      d.reducer->prepare_for_backward(tensors(outputs, n));
    } else {
      d.reducer->prepare_for_backward({});
    }
  });
}

// The reducer's buckets now: their count, and each one's bytes in `bytes` (up to `cap`).
int64_t oomlab_ddp_buckets(void* raw, int64_t* bytes, int64_t cap) noexcept {
  auto& d = *static_cast<Ddp*>(raw);
  try {
    auto buckets = d.reducer->get_grad_buckets(/*return_zero_tensors=*/false);
    for (size_t i = 0; i < buckets.size() && static_cast<int64_t>(i) < cap; ++i) {
      const auto& b = buckets[i].getBuffer();
      bytes[i] = static_cast<int64_t>(b.numel() * b.element_size());
    }
    return static_cast<int64_t>(buckets.size());
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
