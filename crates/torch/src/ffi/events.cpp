// CUDA events for phase durations that do not stop the host: an event is recorded on the
// device's current stream at each phase boundary, and the time between two is read once the
// step is over (waiting on the later event only), so the host keeps queueing work meanwhile.
//
// Through c10's device-generic Event (the CUDA runtime headers are not in the PyPI wheel): with
// EventFlag::BACKEND_DEFAULT the backend creates its event with timing on, as
// torch.cuda.Event(enable_timing=True) does.
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "guarded.h"

using oomlab::guarded;

extern "C" {

// A new, not yet recorded event for a CUDA device; freed with oomlab_cuda_event_free.
void* oomlab_cuda_event_new(char* err, size_t len) noexcept {
  c10::Event* out = nullptr;
  guarded(err, len, [&] {
    out = new c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  });
  return out;
}

void oomlab_cuda_event_free(void* event) noexcept { delete static_cast<c10::Event*>(event); }

// Records the event on the device's current stream (where libtorch queues the model's work).
int oomlab_cuda_event_record(void* event, int device, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    const c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    static_cast<c10::Event*>(event)->record(impl->getStream(dev));
  });
}

// Milliseconds from `start` to `end`, after waiting for `end` to complete.
int oomlab_cuda_event_elapsed(void* start, void* end, double* ms, char* err, size_t len) noexcept {
  return guarded(err, len, [&] {
    auto* b = static_cast<c10::Event*>(end);
    b->synchronize();
    *ms = static_cast<c10::Event*>(start)->elapsedTime(*b);
  });
}

}  // extern "C"
