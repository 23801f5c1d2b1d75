//! Tensor-and-scalar ops that report an out-of-memory as an error, not a panic.
//!
//! tch's fallible methods that take a scalar (`f_mul_scalar`, `f_div_scalar`, `f_add_scalar`,
//! `f_remainder`, `f_full`, `f_fill_`, ...: `S: Into<Scalar>`) panic when libtorch fails: the
//! temporary `Scalar` is dropped inside the call's statement, before tch reads libtorch's error,
//! and `Scalar`'s drop reads (and unwraps) that error itself. An OOM in, say, the batch's index
//! `remainder` became `panic: called Result::unwrap() on an Err value: ... CPU out of memory`,
//! a trial with status `error` instead of `oom` (which also ends a search). These call the same
//! libtorch functions with a scalar that is freed only after the error has been read.
use std::ffi::{c_char, c_void, CStr};
use std::ptr;

use tch::{TchError, Tensor};
use torch_sys::{C_scalar, C_tensor};

extern "C" {
    // libtorch's error strings are malloc'ed; tch frees them with libc's free too.
    fn free(p: *mut c_void);
}

/// A libtorch scalar, freed on drop.
struct OwnedScalar(*mut C_scalar);

impl OwnedScalar {
    fn float(v: f64) -> Self {
        // SAFETY: makes a new heap scalar; nothing to fail but the process's own malloc.
        OwnedScalar(unsafe { torch_sys::ats_float(v) })
    }

    fn int(v: i64) -> Self {
        // SAFETY: as in `float`.
        OwnedScalar(unsafe { torch_sys::ats_int(v) })
    }
}

impl Drop for OwnedScalar {
    fn drop(&mut self) {
        // SAFETY: made by ats_float / ats_int, freed once; deleting a scalar does not throw.
        unsafe { torch_sys::ats_free(self.0) }
    }
}

/// libtorch's error from the last call on this thread, if any, cleared.
fn last_error() -> Result<(), TchError> {
    // SAFETY: returns null or a malloc'ed, NUL-terminated string that we now own.
    let raw: *mut c_char = unsafe { torch_sys::get_and_reset_last_err() };
    if raw.is_null() {
        return Ok(());
    }
    // SAFETY: non-null and NUL-terminated (above); freed once, after it has been copied.
    let text = unsafe { CStr::from_ptr(raw) }.to_string_lossy().into_owned();
    unsafe { free(raw.cast()) };
    Err(TchError::Torch(text))
}

/// Runs a generated `atg_*` call that writes one tensor, with `scalar` alive until the error is
/// read.
fn call(
    t: &Tensor,
    scalar: OwnedScalar,
    f: unsafe extern "C" fn(*mut *mut C_tensor, *mut C_tensor, *mut C_scalar),
) -> Result<Tensor, TchError> {
    let mut out = [ptr::null_mut(); 1];
    // SAFETY: `t` and `scalar` are live for the call; `out` has room for the one result.
    unsafe { f(out.as_mut_ptr(), t.as_ptr() as *mut C_tensor, scalar.0) };
    last_error()?;
    drop(scalar);
    // SAFETY: on success libtorch wrote a new tensor handle that we now own.
    Ok(unsafe { Tensor::from_ptr(out[0]) })
}

/// `t * v`, a new tensor.
pub fn mul(t: &Tensor, v: f64) -> Result<Tensor, TchError> {
    call(t, OwnedScalar::float(v), torch_sys::c_generated::atg_mul_scalar)
}

/// `t / v`, a new tensor.
pub fn div(t: &Tensor, v: f64) -> Result<Tensor, TchError> {
    call(t, OwnedScalar::float(v), torch_sys::c_generated::atg_div_scalar)
}

/// `t + v`, a new tensor.
pub fn add(t: &Tensor, v: f64) -> Result<Tensor, TchError> {
    call(t, OwnedScalar::float(v), torch_sys::c_generated::atg_add_scalar)
}

/// `t % v` with an integer `v` (an integer tensor stays integer), a new tensor.
pub fn remainder(t: &Tensor, v: i64) -> Result<Tensor, TchError> {
    call(t, OwnedScalar::int(v), torch_sys::c_generated::atg_remainder)
}

/// `t.add_(v)` with an integer `v`, in place (`num_batches_tracked.add_(1)`).
pub fn add_int_(t: &Tensor, v: i64) -> Result<(), TchError> {
    call(t, OwnedScalar::int(v), torch_sys::c_generated::atg_add_scalar_).map(drop)
}

/// `t.fill_(v)`, in place.
pub fn fill_(t: &Tensor, v: f64) -> Result<(), TchError> {
    call(t, OwnedScalar::float(v), torch_sys::c_generated::atg_fill_).map(drop)
}

/// A 0-d tensor holding `v`, as `torch.full((), v)`: one allocation, of the element's size.
pub fn full_0d(v: f64, options: (tch::Kind, tch::Device)) -> Result<Tensor, TchError> {
    let t = Tensor::f_empty([0i64; 0], options)?;
    // fill_ returns a second handle on `t`, which goes here.
    let _ = call(&t, OwnedScalar::float(v), torch_sys::c_generated::atg_fill_)?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    #[test]
    fn the_ops_compute_what_torch_does() {
        let t = Tensor::from_slice(&[1.0f32, -2.5, 4.0]);
        assert!(mul(&t, 2.0).unwrap().equal(&(&t * 2.0)));
        assert!(div(&t, 4.0).unwrap().equal(&(&t / 4.0)));
        assert!(add(&t, 0.0).unwrap().equal(&t));
        let i = Tensor::arange_start(5, 12, (Kind::Int64, Device::Cpu));
        let r = remainder(&i, 7).unwrap();
        assert_eq!(r.kind(), Kind::Int64);
        assert_eq!(Vec::<i64>::try_from(r).unwrap(), vec![5, 6, 0, 1, 2, 3, 4]);
        let f = full_0d(65536.0, (Kind::Float, Device::Cpu)).unwrap();
        assert_eq!((f.size(), f.kind(), f.double_value(&[])), (vec![], Kind::Float, 65536.0));
        let z = full_0d(0.0, (Kind::Int, Device::Cpu)).unwrap();
        assert_eq!((z.kind(), z.int64_value(&[])), (Kind::Int, 0));
        let n = Tensor::from(3i64);
        add_int_(&n, 1).unwrap();
        fill_(&f, 2.5).unwrap();
        assert_eq!((n.int64_value(&[]), f.double_value(&[])), (4, 2.5));
    }

    #[test]
    fn a_libtorch_error_is_an_error_not_a_panic() {
        // An integer remainder by zero fails inside libtorch, as an OOM does; tch's
        // `f_remainder(0)` panics here.
        let i = Tensor::from_slice(&[1i64, 2]);
        let err = remainder(&i, 0).unwrap_err().to_string();
        assert!(err.contains("ZeroDivisionError"), "{err}");
        // And the error was read and cleared: the next call is fine.
        assert!(remainder(&i, 2).is_ok());
    }
}
