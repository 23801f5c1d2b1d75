//! CUDA events (`events.cpp`): timestamps the device takes as it reaches them in its stream, so
//! phase durations need no host synchronisation until they are read.
use std::ffi::{c_char, c_int, c_void};

use super::call;

extern "C" {
    fn oomlab_cuda_event_new(err: *mut c_char, len: usize) -> *mut c_void;
    fn oomlab_cuda_event_free(event: *mut c_void);
    fn oomlab_cuda_event_record(event: *mut c_void, device: c_int, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_cuda_event_elapsed(
        start: *mut c_void,
        end: *mut c_void,
        ms: *mut f64,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
}

/// One CUDA event with timing on, recorded once on a device's current stream.
pub struct CudaEvent(*mut c_void);

impl CudaEvent {
    /// Records a new event on `device`'s current stream.
    pub fn record(device: i32) -> Result<Self, String> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: buffer from `call`; a null result comes with a message in it.
        call(|e, l| {
            raw = unsafe { oomlab_cuda_event_new(e, l) };
            c_int::from(raw.is_null())
        })?;
        let event = CudaEvent(raw);
        // SAFETY: `event.0` is a live event from oomlab_cuda_event_new; buffer from `call`.
        call(|e, l| unsafe { oomlab_cuda_event_record(event.0, device, e, l) })?;
        Ok(event)
    }

    /// Seconds from this event to `later`, waiting for `later` to complete.
    pub fn seconds_to(&self, later: &CudaEvent) -> Result<f64, String> {
        let mut ms = 0.0;
        // SAFETY: both are live, recorded events; `ms` is a valid f64; buffer from `call`.
        call(|e, l| unsafe { oomlab_cuda_event_elapsed(self.0, later.0, &mut ms, e, l) })?;
        Ok(ms / 1000.0)
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: made by oomlab_cuda_event_new and freed only here.
        unsafe { oomlab_cuda_event_free(self.0) }
    }
}
