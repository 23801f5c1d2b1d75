// A TorchScript module's top-level children, which tch does not reach: their names, and one
// child's forward on a tensor. What lets activation checkpointing cut a module whose forward is
// its children run in turn (`model.units = "children"`) between them.
//
// The module is tch's own (`tch::CModule` holds a `torch::jit::Module*`), so the children are
// the very submodules whose parameters the optimizer holds.
#include <torch/script.h>

#include "guarded.h"
#include "log.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

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

// `module.buffers()` as Python lists them (`named_modules()` in pre-order, each module's own
// buffers in their order, a tensor listed twice once): what DDP broadcasts from rank 0 at the
// wrap and before every forward. The first `cap` go into `out` (new heap at::Tensors), their
// number into `*count`; the caller asks again with a larger `cap` when it was short.
int oomlab_script_buffers(void* module, void** out, int64_t cap, int64_t* count, char* err,
                          size_t len) noexcept {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> found;
    std::vector<const c10::TensorImpl*> seen;
    for (const auto& m : static_cast<torch::jit::Module*>(module)->named_modules()) {
      for (const auto& b : m.value.named_buffers(false)) {
        const auto* impl = b.value.unsafeGetTensorImpl();
        if (std::find(seen.begin(), seen.end(), impl) != seen.end()) continue;
        seen.push_back(impl);
        found.push_back(b.value);
      }
    }
    *count = static_cast<int64_t>(found.size());
    if (*count > cap) return;
    for (size_t i = 0; i < found.size(); ++i) out[i] = new at::Tensor(found[i]);
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

// The module's forward on `inputs` (`n` heap at::Tensor), and the logits in what it returns
// into `*out` (a new heap at::Tensor), as a training loop reads them: the tensor itself; a
// tuple's or list's first tensor (`return_dict=False`: logits first); a dict's "logits" (a
// Hugging Face `ModelOutput`, traced into a dict), else its first tensor. The rest is dropped
// here, as `out = model(x)[0]` drops it. (Not tch's `forward_is`: on an error it leaks its
// inputs' IValues, and with them the batch.)
int oomlab_script_forward(void* module, void* const* inputs, int64_t n, void** out, char* err,
                          size_t len) noexcept {
  return guarded(err, len, [&] {
    std::vector<c10::IValue> args;
    args.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) args.emplace_back(*static_cast<at::Tensor*>(inputs[i]));
    c10::IValue r = static_cast<torch::jit::Module*>(module)->forward(std::move(args));
    auto first = [](const std::vector<c10::IValue>& values) -> std::optional<at::Tensor> {
      for (const auto& v : values) {
        if (v.isTensor()) return v.toTensor();
      }
      return std::nullopt;
    };
    std::optional<at::Tensor> logits;
    std::string what = r.tagKind();
    if (r.isTensor()) {
      logits = r.toTensor();
    } else if (r.isTuple()) {
      what = "a tuple";
      logits = first(r.toTupleRef().elements().vec());
    } else if (r.isList()) {
      what = "a list";
      logits = first(r.toListRef().vec());
    } else if (r.isGenericDict()) {
      what = "a dict";
      std::vector<c10::IValue> values;
      for (const auto& kv : r.toGenericDict()) {
        if (kv.key().isString() && kv.key().toStringRef() == "logits" && kv.value().isTensor()) {
          logits = kv.value().toTensor();
          break;
        }
        values.push_back(kv.value());
      }
      if (!logits) logits = first(values);
    }
    TORCH_CHECK(logits.has_value(), "the module's forward returns ", what,
                " without a tensor in it; return the logits (a tensor, or a tuple or dict whose "
                "\"logits\" or first entry is one)");
    *out = new at::Tensor(*logits);
  });
}

int64_t oomlab_cpu_counted_bytes(const void* data) noexcept;  // shim.cpp

// Refuses a module whose tensor (a parameter, buffer or attribute) reaches past its memory. The loader reads each
// storage's record into a buffer of the record's size, and gives the storage the size its
// pickle says (numel x element size), checking neither against the other
// (torch/csrc/jit/serialization/unpickler.cpp, BINPERSID): a cut record makes a tensor that
// reads and writes past its buffer (training one corrupted the heap and crashed the process).
// The buffer's real size is what the counting allocator handed out for it, where it did. On
// CUDA the loader copies to the device before this runs, so a CUDA run relies on the preflight,
// which loads every module on the CPU first.
int oomlab_script_check_storage(void* module, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    auto check = [](const char* what, const std::string& name, const at::Tensor& t) {
      if (!t.defined() || !t.has_storage() || t.numel() == 0) return;
      int64_t last = t.storage_offset();
      for (int64_t d = 0; d < t.dim(); ++d) {
        TORCH_CHECK(t.stride(d) >= 0, what, " ", name, " has a negative stride");
        last += (t.size(d) - 1) * t.stride(d);
      }
      const auto needs = static_cast<uint64_t>(last + 1) * t.element_size();
      auto holds = static_cast<uint64_t>(t.storage().nbytes());
      // A record cut to nothing is read into no buffer at all (a zero-byte allocation, which
      // the counting allocator passes through uncounted).
      if (t.storage().data() == nullptr) holds = 0;
      const int64_t counted = oomlab_cpu_counted_bytes(t.storage().data());
      if (counted >= 0 && static_cast<uint64_t>(counted) < holds) holds = static_cast<uint64_t>(counted);
      TORCH_CHECK(needs <= holds, what, " ", name, " of shape ", t.sizes(), " needs ", needs,
                  " bytes, and its storage in the file holds ", holds);
    };
    // Every tensor the module holds: parameters, buffers and plain tensor attributes (a
    // scripted module's `self.mask = torch.ones(...)`), which the forward reads as well.
    for (const auto& a : m->named_attributes(true)) {
      if (a.value.isTensor()) check("tensor", a.name, a.value.toTensor());
    }
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

// Moves `module` to the device (`device_type` 0: CPU, 1: CUDA, 14: meta; `index`) and its floating-point
// parameters and buffers to `dtype` (a c10::ScalarType), as `nn.Module.to(device, dtype)` does
// in Python: an integer or boolean buffer (BERT's `position_ids`, a mask) keeps its type.
// libtorch's `torch::jit::Module::to(device, dtype)` converts every tensor whatever its type,
// which turns token ids into bfloat16 and fails every `gather` after. A tensor held under two
// names (a tied weight) is the same tensor: converted once, still one.
int oomlab_script_to(void* module, int device_type, int index, int dtype, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    auto* m = static_cast<torch::jit::Module*>(module);
    const c10::Device device = device_type == 1    ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index))
                               : device_type == 14 ? c10::Device(c10::kMeta)
                                                   : c10::Device(c10::kCPU);
    const auto kind = static_cast<c10::ScalarType>(dtype);
    if (device.is_meta()) {
      // A CPU tensor cannot take a meta tensor's data (`set_data` refuses the change of
      // device type), so each slot of each submodule is given a meta copy instead, before any
      // optimizer or graph run holds the old one; a tensor under two names gets one copy.
      std::unordered_map<c10::TensorImpl*, at::Tensor> made;
      auto on_meta = [&](const at::Tensor& t) {
        auto it = made.find(t.unsafeGetTensorImpl());
        if (it != made.end()) return it->second;
        const auto to = t.is_floating_point() ? kind : t.scalar_type();
        // A copy even of a meta tensor (a module kept on meta and given fresh slots for the
        // next recording: `nn::script::load`), made as the first was.
        auto copy = t.to(device, to, /*non_blocking=*/false, /*copy=*/true).detach();
        copy.set_requires_grad(t.requires_grad());
        made.emplace(t.unsafeGetTensorImpl(), copy);
        return copy;
      };
      for (auto sub : m->modules()) {
        for (const auto& p : sub.named_parameters(false)) sub.register_parameter(p.name, on_meta(p.value), false);
        for (const auto& b : sub.named_buffers(false)) sub.register_buffer(b.name, on_meta(b.value));
      }
      return;
    }
    auto move = [&](at::Tensor t) {
      if (!t.defined()) return;
      const auto to = t.is_floating_point() ? kind : t.scalar_type();
      if (t.device() == device && t.scalar_type() == to) return;
      // As Module::to does: the tensor object stays (the optimizer and the graph hold it), its
      // data is replaced.
      t.set_data(t.to(device, to));
    };
    for (const auto& p : m->parameters(true)) move(p);
    for (const auto& b : m->buffers(true)) move(b);
  });
}

// Sets the dropout of every `aten::scaled_dot_product_attention` in `module`'s graphs (its
// methods' and its submodules', recursively) to 0: for a recording made on the CPU to stand for
// a CUDA step. The CPU runs attention with dropout through the math path (its [L, L] scores and
// mask kept for the backward), where CUDA's fused kernels keep no mask (they draw it again from
// a seed) and no scores: without dropout the CPU runs its flash kernel, whose outputs are the
// fused kernels' and whose call the CUDA replay reads (`Attn`). Returns how many it set.
int64_t oomlab_script_attention_without_dropout(void* module) noexcept {
  try {
    auto* m = static_cast<torch::jit::Module*>(module);
    int64_t set = 0;
    std::function<void(torch::jit::Block*)> walk = [&](torch::jit::Block* block) {
      for (auto* node : block->nodes()) {
        for (auto* b : node->blocks()) walk(b);
        if (node->kind().toQualString() != std::string("aten::scaled_dot_product_attention")) continue;
        if (node->inputs().size() < 5) continue;
        auto* graph = node->owningGraph();
        torch::jit::WithInsertPoint guard(node);
        node->replaceInput(4, graph->insertConstant(0.0));
        ++set;
      }
    };
    for (const auto& mod : m->modules()) {
      for (const auto& method : mod.get_methods()) walk(method.graph()->block());
    }
    return set;
  } catch (...) {
    return -1;
  }
}

// The identity of a tensor object (its TensorImpl), as Python's `id(param)` tells one
// parameter from another: two names of one tied weight give the same.
const void* oomlab_tensor_identity(void* tensor) noexcept {
  return static_cast<at::Tensor*>(tensor)->unsafeGetTensorImpl();
}

}  // extern "C"
