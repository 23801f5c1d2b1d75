// The recording log of shim.cpp as the shim's other files see it: where an allocation would
// live in a CUDA run (the tags `ffi::Where` reads), and a scope whose allocations are the
// host's. Shared by shim.cpp, optim.cpp and script.cpp.
#pragma once

#include <cstdint>

extern "C" {
// Enters (`on`) or leaves a scope whose allocations on this thread are tagged the host's.
void oomlab_cpu_events_host(int on) noexcept;
// Tags the live allocation at `data` in the log, if one is on.
void oomlab_cpu_events_tag(const void* data, int tag) noexcept;
}

namespace oomlab {

// An allocation's tag: 0 (as its phase's tensors), the host's or the device's.
constexpr uint8_t kHostTag = 1, kDeviceTag = 2;

// What is made while one of these lives is the host's in a CUDA run (torch.optim's step
// counters, a generator's state): a recording on the CPU is told so.
struct OnHost {
  OnHost() { oomlab_cpu_events_host(1); }
  ~OnHost() { oomlab_cpu_events_host(0); }
  OnHost(const OnHost&) = delete;
  OnHost& operator=(const OnHost&) = delete;
};

}  // namespace oomlab
