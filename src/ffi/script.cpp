// A TorchScript module's top-level children, which tch does not reach: their names, and one
// child's forward on a tensor. What lets activation checkpointing cut a module whose forward is
// its children run in turn (`model.units = "children"`) between them.
//
// The module is tch's own (`tch::CModule` holds a `torch::jit::Module*`), so the children are
// the very submodules whose parameters the optimizer holds.
#include <torch/script.h>

#include "guarded.h"
#include "log.h"

#include <string>

using oomlab::guarded;

extern "C" {

// The number of `module`'s children in `*count`, their names joined by '\n' into `names`.
int oomlab_script_children(void* module, int64_t* count, char* names, size_t names_len, char* err,
                           size_t len) noexcept {
  return guarded(err, len, [&] {
    std::string joined;
    int64_t n = 0;
    for (const auto& child : static_cast<torch::jit::Module*>(module)->named_children()) {
      if (n++ > 0) joined += '\n';
      joined += child.name;
    }
    *count = n;
    oomlab::set_err(names, names_len, joined.c_str());
  });
}

// Child `i`'s forward on `x`, into `*out` (a new heap at::Tensor).
int oomlab_script_child_forward(void* module, int64_t i, void* x, void** out, char* err,
                                size_t len) noexcept {
  return guarded(err, len, [&] {
    int64_t k = 0;
    for (const auto& child : static_cast<torch::jit::Module*>(module)->named_children()) {
      if (k++ != i) continue;
      auto m = child.value;
      auto r = m.forward({*static_cast<at::Tensor*>(x)});
      TORCH_CHECK(r.isTensor(), "child ", child.name, "'s forward returns ", r.tagKind(), ", not a tensor");
      *out = new at::Tensor(r.toTensor());
      return;
    }
    TORCH_CHECK(false, "the module has no child ", i);
  });
}

// Tags every parameter's and buffer's storage as the device's in the shim's event log (a
// recording on the CPU of a CUDA run's model phase, where the file's other records stay on
// the host).
void oomlab_script_tag_device(void* module) noexcept {
  try {
    auto* m = static_cast<torch::jit::Module*>(module);
    for (const auto& p : m->parameters(true)) {
      if (p.has_storage()) oomlab_cpu_events_tag(p.storage().data(), oomlab::kDeviceTag);
    }
    for (const auto& b : m->buffers(true)) {
      if (b.has_storage()) oomlab_cpu_events_tag(b.storage().data(), oomlab::kDeviceTag);
    }
  } catch (...) {
    // A log without the tags: the recorded estimate then counts no parameter on the device.
  }
}

}  // extern "C"
