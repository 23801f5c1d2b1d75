//! Raw bindings to `shim.cpp`: libtorch's allocator statistics, the CPU counting allocator,
//! autocast switches and version facts; and to `optim.cpp`: PyTorch's optimizers as
//! `torch.optim` runs them; to `events.cpp`: CUDA events for phase durations; and to `dist.cpp`
//! (in [`dist`]): torch.distributed's process group and DDP's reducer. Safe wrappers live here
//! and in `probe` and `train`.
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};

pub mod dist;
mod events;
pub use events::CudaEvent;

/// Allocator statistics as the shim reports them, in bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct RawStats {
    pub allocated: i64,
    pub allocated_peak: i64,
    pub reserved: i64,
    pub reserved_peak: i64,
    pub num_ooms: i64,
    pub num_alloc_retries: i64,
}

extern "C" {
    fn oomlab_cpu_install(err: *mut c_char, len: usize) -> c_int;
    fn oomlab_cpu_set_cap(bytes: i64);
    fn oomlab_cpu_cap() -> i64;
    fn oomlab_cpu_stats(out: *mut RawStats);
    fn oomlab_cpu_reset_peak();
    fn oomlab_cpu_allocations() -> i64;
    fn oomlab_cpu_last_refusal(out: *mut i64);
    fn oomlab_cpu_events_start(with_ops: c_int);
    fn oomlab_cpu_events_ops(ids: *mut i32, cap: i64);
    fn oomlab_cpu_events_op_name(id: i32, buf: *mut c_char, len: usize) -> i64;
    fn oomlab_cpu_events_stop(deltas: *mut i64, ptrs: *mut u64, cap: i64) -> i64;
    fn oomlab_cpu_events_mark(tag: u64);
    fn oomlab_cpu_events_tags(tags: *mut u8, cap: i64);
    fn oomlab_cpu_events_threads(threads: *mut u16, cap: i64);
    fn oomlab_cpu_events_reduces(out: *mut i64, cap: i64) -> i64;
    fn oomlab_cpu_events_convs(out: *mut i64, cap: i64) -> i64;
    fn oomlab_cpu_events_tag(data: *const c_void, tag: c_int);
    fn oomlab_cuda_stats(device: c_int, out: *mut RawStats, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_cuda_reset_peak(device: c_int, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_cuda_empty_cache(err: *mut c_char, len: usize) -> c_int;
    fn oomlab_cuda_mem_info(
        device: c_int,
        free: *mut u64,
        total: *mut u64,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_autocast_set(
        device_type: c_int,
        enabled: c_int,
        dtype: c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_set_allocator_settings(settings: *const c_char, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_autocast_enabled(device_type: c_int) -> c_int;
    fn oomlab_conv2d_backward(
        grad: *mut c_void,
        input: *mut c_void,
        weight: *mut c_void,
        bias_size: i64,
        stride: i64,
        padding: i64,
        groups: i64,
        m0: c_int,
        m1: c_int,
        m2: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_batch_norm_backward(
        grad: *mut c_void,
        input: *mut c_void,
        weight: *mut c_void,
        mean: *mut c_void,
        var: *mut c_void,
        save_mean: *mut c_void,
        save_invstd: *mut c_void,
        m0: c_int,
        m1: c_int,
        m2: c_int,
        out: *mut *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_rng_state(device_type: c_int, index: c_int, err: *mut c_char, len: usize) -> *mut c_void;
    fn oomlab_meta_install(err: *mut c_char, len: usize) -> c_int;
    fn oomlab_cpu_pause(on: c_int);
    fn oomlab_meta_pause(on: c_int);
    fn oomlab_meta_sdpa_as_cuda(on: c_int);
    fn oomlab_meta_autocast(dtype: c_int, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_meta_empty(
        sizes: *const i64,
        n: usize,
        dtype: c_int,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void;
    fn oomlab_to_meta(t: *mut c_void, err: *mut c_char, len: usize) -> *mut c_void;
    fn oomlab_set_rng_state(
        device_type: c_int,
        index: c_int,
        state: *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_script_tag_device(module: *mut c_void);
    fn oomlab_script_to(
        module: *mut c_void,
        device_type: c_int,
        index: c_int,
        dtype: c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_tensor_identity(tensor: *mut c_void) -> *const c_void;
    fn oomlab_script_attention_without_dropout(module: *mut c_void) -> i64;
    fn oomlab_cpu_events_attns(out: *mut i64, cap: i64) -> i64;
    fn oomlab_script_check_storage(module: *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_script_children(
        module: *mut c_void,
        count: *mut i64,
        names: *mut c_char,
        names_len: usize,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_script_buffers(
        module: *mut c_void,
        out: *mut *mut c_void,
        cap: i64,
        count: *mut i64,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_script_forward(
        module: *mut c_void,
        inputs: *const *mut c_void,
        n: i64,
        out: *mut *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_script_child_forward(
        module: *mut c_void,
        i: i64,
        x: *mut c_void,
        out: *mut *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_torch_version() -> *const c_char;
    fn oomlab_cuda_runtime_version() -> c_long;
    fn oomlab_cuda_load(err: *mut c_char, len: usize) -> c_int;
    fn oomlab_libtorch_path(out: *mut c_char, len: usize) -> c_int;
    fn oomlab_optim_new(
        kind: c_int,
        implementation: c_int,
        params: *const *mut c_void,
        n: usize,
        lr: f64,
        momentum: f64,
        weight_decay: f64,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void;
    fn oomlab_optim_free(optim: *mut c_void);
    fn oomlab_optim_step(
        optim: *mut c_void,
        grad_scale: *mut c_void,
        found_inf: *mut c_void,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_optim_zero_grad(optim: *mut c_void);
    fn oomlab_grads_reset(params: *const *mut c_void, n: usize);
}

/// Calls a shim function that reports failure through a message buffer.
fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), String> {
    let mut buf = vec![0 as c_char; 4096];
    if f(buf.as_mut_ptr(), buf.len()) == 0 {
        return Ok(());
    }
    // SAFETY: the shim always NUL-terminates what it writes into the buffer.
    let msg = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Err(msg.to_string_lossy().into_owned())
}

/// Installs the counting CPU allocator; idempotent.
pub fn cpu_install() -> Result<(), String> {
    // SAFETY: the buffer pointer and length come from `call`.
    call(|e, l| unsafe { oomlab_cpu_install(e, l) })
}

/// Sets the CPU cap in bytes; `None` removes it.
pub fn cpu_set_cap(bytes: Option<u64>) {
    let raw = bytes.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    // SAFETY: plain value, no pointers.
    unsafe { oomlab_cpu_set_cap(raw) }
}

/// The CPU cap in bytes, if one is set.
pub fn cpu_cap() -> Option<u64> {
    // SAFETY: plain value.
    let raw = unsafe { oomlab_cpu_cap() };
    (raw >= 0).then_some(raw as u64)
}

pub fn cpu_stats() -> RawStats {
    let mut s = RawStats::default();
    // SAFETY: `s` is a valid, writable RawStats.
    unsafe { oomlab_cpu_stats(&mut s) };
    s
}

/// The counting allocator's last refusal, to the byte: which refusal it was (the OOM count it
/// made, from 1), the bytes asked for, the bytes allocated before it, and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub ordinal: u64,
    pub requested: u64,
    pub allocated: u64,
    pub cap: u64,
}

/// The last allocation the CPU cap refused, if any was.
pub fn cpu_last_refusal() -> Option<Refusal> {
    let mut raw = [0i64; 4];
    // SAFETY: `raw` holds the four values the shim writes.
    unsafe { oomlab_cpu_last_refusal(raw.as_mut_ptr()) };
    let [ordinal, requested, allocated, cap] = raw.map(|v| v.max(0) as u64);
    (ordinal > 0).then_some(Refusal { ordinal, requested, allocated, cap })
}

/// How many allocations the counting CPU allocator has made since it was installed.
pub fn cpu_allocations() -> u64 {
    // SAFETY: no arguments.
    unsafe { oomlab_cpu_allocations() }.max(0) as u64
}

/// Runs `f` with the counting allocator's event log on; returns what it returned and every
/// counted allocation (`+bytes`) and free (`-bytes`) it made, with the data pointer, in order.
/// The counting allocator must be installed. One log at a time, whatever the thread.
pub fn cpu_events<T>(f: impl FnOnce() -> T) -> (T, Vec<(i64, u64)>) {
    let (out, events, _) = logged(f, false);
    (out, events)
}

/// A log of [`cpu_events_with_ops`]: one entry per event in each.
#[derive(Debug, Clone, Default)]
pub struct Log {
    /// Each allocation (`+bytes`) and free (`-bytes`) with its data pointer, or a mark.
    pub events: Vec<(i64, u64)>,
    /// The op each event came from: the op the code called and the innermost that allocated,
    /// as `"aten::linear > aten::addmm"`; `""` for none (a mark, or outside any op).
    pub ops: Vec<String>,
    /// Where each allocation would live in a CUDA run, where the code said ([`Where`]).
    pub tags: Vec<Where>,
    /// Each sum of a contiguous tensor over its leading dimensions (a bias gradient's
    /// `sum_to`), where CUDA's reduction kernel may take a staging buffer: the event
    /// `(0, REDUCE_MARK + i)` marks where the `i`-th ends.
    pub reduces: Vec<Reduce>,
    /// Each convolution (`aten::convolution`, `aten::convolution_backward`), as cuDNN would
    /// be called for it on CUDA: the event `(0, CONV_MARK + i)` marks where the `i`-th begins.
    pub convs: Vec<Conv>,
    /// Which thread of a parallel region made each event: 0 outside any, else 1 + its number in
    /// the OpenMP region (whose threads interleave as the machine's load lets them).
    pub threads: Vec<u16>,
    /// Each call of the CPU flash-attention kernel: the event `(0, ATTN_MARK + i)` marks where
    /// the `i`-th begins.
    pub attns: Vec<Attn>,
}

/// The first pointer of a flash attention's mark in a [`Log`] (above the convolutions').
pub const ATTN_MARK: u64 = 1 << 41;

/// A call of the CPU flash-attention kernel, as the shim read it off the op's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attn {
    /// The query's, key's and value's `[batch, heads, len, head_dim]`.
    pub q: [i64; 4],
    pub k: [i64; 4],
    pub v: [i64; 4],
    /// The query's dtype.
    pub kind: tch::Kind,
    /// The backward (else the forward).
    pub backward: bool,
    pub causal: bool,
    /// Called with an attention mask.
    pub masked: bool,
}

/// The first pointer of a convolution's mark in a [`Log`] (the reductions' come below it).
pub const CONV_MARK: u64 = 1 << 40;

/// A convolution as the shim read it off the op's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv {
    /// NCHW.
    pub input: [i64; 4],
    /// KCRS.
    pub weight: [i64; 4],
    pub stride: i64,
    pub padding: i64,
    pub groups: i64,
    /// The input's dtype.
    pub kind: tch::Kind,
    /// `convolution_backward` (else the forward).
    pub backward: bool,
    /// A backward's `output_mask`: whether it makes the input's, the weight's and the bias's
    /// gradient (`None` where it was not read).
    pub makes: Option<[bool; 3]>,
    /// A 2-D convolution with one stride and one padding for both sides, dilation 1, not
    /// transposed: one that cuDNN's table could hold.
    pub known: bool,
}

/// The first pointer of a reduction's mark in a [`Log`] (0 and 1 are the recorder's marks).
pub const REDUCE_MARK: u64 = 16;
/// The marks where the outermost op that runs a CPU library of its own (a convolution, batch
/// or layer norm, forward or backward) or that CUDA runs otherwise (dropout, an embedding's
/// backward) begins and ends in a [`Log`]: what it allocates and frees between them is scratch.
pub const SPAN_BEGIN: u64 = 2;
pub const SPAN_END: u64 = 3;

/// A sum of `rows` rows into each of `cols` outputs, accumulated in `acc` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reduce {
    pub rows: i64,
    pub cols: i64,
    pub acc: i64,
}

/// Where an allocation of a CPU recording would live in a CUDA run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Where {
    /// As its phase's tensors do (nothing was said).
    #[default]
    Phase,
    /// On the host: a 0-dim step counter, a scalar wrapped as a tensor, made on the host.
    Host,
    /// On the device: a parameter, a batch moved there.
    Device,
}

/// Says that the live allocation at `t`'s data would be on the device in a CUDA run (a parameter
/// loaded by the model phase, a batch moved by `to_device`): a recording's log tags it.
/// Nothing when no log is on or nothing is live there.
pub fn cpu_events_on_device(t: &tch::Tensor) {
    // SAFETY: the pointer is only compared with the log's, never read.
    unsafe { oomlab_cpu_events_tag(t.data_ptr(), 2) }
}

/// [`cpu_events`], each event with the op it came from and where it would live on CUDA. Ops
/// are followed through a libtorch callback while the log is on.
pub fn cpu_events_with_ops<T>(f: impl FnOnce() -> T) -> (T, Log) {
    let (out, events, ops) = logged(f, true);
    let mut raw = vec![0u8; events.len()];
    // SAFETY: `raw` holds one slot per event read.
    unsafe { oomlab_cpu_events_tags(raw.as_mut_ptr(), raw.len() as i64) };
    let tags = raw
        .into_iter()
        .map(|t| match t {
            1 => Where::Host,
            2 => Where::Device,
            _ => Where::Phase,
        })
        .collect();
    // The log is stopped: ask how many, then read them all.
    // SAFETY: a capacity of 0 writes nothing.
    let n = unsafe { oomlab_cpu_events_reduces(std::ptr::null_mut(), 0) }.max(0) as usize;
    let mut flat = vec![0i64; 3 * n];
    // SAFETY: `flat` holds `n` triples.
    unsafe { oomlab_cpu_events_reduces(flat.as_mut_ptr(), n as i64) };
    let reduces = flat.chunks(3).map(|r| Reduce { rows: r[0], cols: r[1], acc: r[2] }).collect();
    // SAFETY: as for the reductions, 14 integers a convolution.
    let n = unsafe { oomlab_cpu_events_convs(std::ptr::null_mut(), 0) }.max(0) as usize;
    let mut flat = vec![0i64; 14 * n];
    // SAFETY: `flat` holds `n` convolutions.
    unsafe { oomlab_cpu_events_convs(flat.as_mut_ptr(), n as i64) };
    let convs = flat.chunks(14).map(conv_of).collect();
    let mut threads = vec![0u16; events.len()];
    // SAFETY: `threads` holds one slot per event read.
    unsafe { oomlab_cpu_events_threads(threads.as_mut_ptr(), threads.len() as i64) };
    // SAFETY: as for the convolutions, 16 integers an attention call.
    let n = unsafe { oomlab_cpu_events_attns(std::ptr::null_mut(), 0) }.max(0) as usize;
    let mut flat = vec![0i64; 16 * n];
    // SAFETY: `flat` holds `n` calls.
    unsafe { oomlab_cpu_events_attns(flat.as_mut_ptr(), n as i64) };
    let attns = flat
        .chunks(16)
        .map(|a| Attn {
            q: [a[0], a[1], a[2], a[3]],
            k: [a[4], a[5], a[6], a[7]],
            v: [a[8], a[9], a[10], a[11]],
            kind: match a[12] {
                1 => tch::Kind::Half,
                2 => tch::Kind::BFloat16,
                3 => tch::Kind::Double,
                _ => tch::Kind::Float,
            },
            backward: a[13] != 0,
            causal: a[14] != 0,
            masked: a[15] != 0,
        })
        .collect();
    (out, Log { events, ops, tags, reduces, convs, threads, attns })
}

/// A convolution from the shim's 14 integers.
fn conv_of(c: &[i64]) -> Conv {
    let four = |at: usize| [c[at], c[at + 1], c[at + 2], c[at + 3]];
    Conv {
        input: four(0),
        weight: four(4),
        stride: c[8],
        padding: c[9],
        groups: c[10],
        kind: match c[11] {
            1 => tch::Kind::Half,
            2 => tch::Kind::BFloat16,
            3 => tch::Kind::Double,
            _ => tch::Kind::Float,
        },
        backward: c[12] != 0,
        // Above the flag, which gradients a backward makes, where the shim read them.
        makes: (c[12] > 1).then(|| [c[12] & 2 != 0, c[12] & 4 != 0, c[12] & 8 != 0]),
        known: c[13] != 0,
    }
}

fn logged<T>(f: impl FnOnce() -> T, with_ops: bool) -> (T, Vec<(i64, u64)>, Vec<String>) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a plain value.
    unsafe { oomlab_cpu_events_start(c_int::from(with_ops)) };
    let out = f();
    let mut cap = 4096usize;
    let events: Vec<(i64, u64)> = loop {
        let (mut deltas, mut ptrs) = (vec![0i64; cap], vec![0u64; cap]);
        // SAFETY: both buffers hold `cap` elements.
        let n =
            unsafe { oomlab_cpu_events_stop(deltas.as_mut_ptr(), ptrs.as_mut_ptr(), cap as i64) } as usize;
        if n <= cap {
            break deltas.into_iter().zip(ptrs).take(n).collect();
        }
        // The log was stopped by the call above and is kept: read it again, whole.
        cap = n;
    };
    if !with_ops {
        return (out, events, Vec::new());
    }
    let mut ids = vec![-1i32; events.len()];
    // SAFETY: `ids` holds one slot per event read.
    unsafe { oomlab_cpu_events_ops(ids.as_mut_ptr(), ids.len() as i64) };
    let mut names: HashMap<i32, String> = HashMap::new();
    let ops = ids
        .into_iter()
        .map(|id| {
            names
                .entry(id)
                .or_insert_with(|| {
                    let mut buf = vec![0 as c_char; 512];
                    // SAFETY: `buf` holds 512 bytes; the name comes back NUL-terminated.
                    let n = unsafe { oomlab_cpu_events_op_name(id, buf.as_mut_ptr(), buf.len()) };
                    if n < 0 {
                        return String::new();
                    }
                    // SAFETY: NUL-terminated by oomlab_cpu_events_op_name.
                    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
                })
                .clone()
        })
        .collect();
    (out, events, ops)
}

/// A mark in the log [`cpu_events`] is keeping: an event of 0 bytes (no counted allocation has
/// 0 bytes) with `tag` for its pointer. Nothing when no log is on.
pub fn cpu_events_mark(tag: u64) {
    // SAFETY: a plain value.
    unsafe { oomlab_cpu_events_mark(tag) }
}

pub fn cpu_reset_peak() {
    // SAFETY: no arguments.
    unsafe { oomlab_cpu_reset_peak() }
}

pub fn cuda_stats(device: i32) -> Result<RawStats, String> {
    let mut s = RawStats::default();
    // SAFETY: `s` is a valid, writable RawStats; buffer from `call`.
    call(|e, l| unsafe { oomlab_cuda_stats(device, &mut s, e, l) })?;
    Ok(s)
}

pub fn cuda_reset_peak(device: i32) -> Result<(), String> {
    // SAFETY: buffer from `call`.
    call(|e, l| unsafe { oomlab_cuda_reset_peak(device, e, l) })
}

pub fn cuda_empty_cache() -> Result<(), String> {
    // SAFETY: buffer from `call`.
    call(|e, l| unsafe { oomlab_cuda_empty_cache(e, l) })
}

/// (free, total) bytes of a CUDA device, as cudaMemGetInfo reports them.
pub fn cuda_mem_info(device: i32) -> Result<(u64, u64), String> {
    let (mut free, mut total) = (0u64, 0u64);
    // SAFETY: both outputs are valid u64s; buffer from `call`.
    call(|e, l| unsafe { oomlab_cuda_mem_info(device, &mut free, &mut total, e, l) })?;
    Ok((free, total))
}

/// Applies caching-allocator settings, in PYTORCH_CUDA_ALLOC_CONF's syntax.
pub fn set_allocator_settings(settings: &str) -> Result<(), String> {
    let c = std::ffi::CString::new(settings).map_err(|e| e.to_string())?;
    // SAFETY: `c` outlives the call; buffer from `call`.
    call(|e, l| unsafe { oomlab_set_allocator_settings(c.as_ptr(), e, l) })
}

/// c10::ScalarType's number for a kind (tch keeps its own mapping private): the floating-point
/// ones, the integers and bool a data set holds; any other kind is float32's.
fn scalar_type(kind: tch::Kind) -> c_int {
    match kind {
        tch::Kind::Uint8 => 0,
        tch::Kind::Int8 => 1,
        tch::Kind::Int16 => 2,
        tch::Kind::Int => 3,
        tch::Kind::Int64 => 4,
        tch::Kind::Half => 5,
        tch::Kind::Double => 7,
        tch::Kind::Bool => 11,
        tch::Kind::BFloat16 => 15,
        _ => 6,
    }
}

/// Switches autocast for a device type (`tch::Device` CPU = 0, CUDA = 1) to a dtype.
pub fn autocast_set(device_type: i32, enabled: bool, dtype: tch::Kind) -> Result<(), String> {
    let kind = match dtype {
        tch::Kind::Half | tch::Kind::BFloat16 => scalar_type(dtype),
        _ => scalar_type(tch::Kind::Float),
    };
    // SAFETY: buffer from `call`.
    call(|e, l| unsafe { oomlab_autocast_set(device_type, enabled as c_int, kind, e, l) })
}

/// Switches CUDA's autocast for meta tensors (`meta_autocast.cpp`: PyTorch 2.11's CUDA op lists,
/// for a step recorded on the meta device that stands for a CUDA step) on with a low-precision
/// dtype, or off (`None`), which clears its cast cache.
pub fn meta_autocast(dtype: Option<tch::Kind>) -> Result<(), String> {
    let code = dtype.map_or(-1, scalar_type);
    // SAFETY: buffer from `call`.
    call(|e, l| unsafe { oomlab_meta_autocast(code, e, l) })
}

pub fn autocast_enabled(device_type: i32) -> bool {
    // SAFETY: plain value.
    unsafe { oomlab_autocast_enabled(device_type) != 0 }
}

/// The meta device, as tch names it: tch has no meta device, and reads a meta tensor's device
/// as `Mps` (torch-sys's `at_device` answers -2 for every device it does not know). oomlab never
/// runs on MPS, so `Mps` means meta throughout: a step recorded without arithmetic or memory
/// (`train::record`), its tensors shapes only, their bytes counted by [`meta_install`]'s
/// allocator.
pub const META: tch::Device = tch::Device::Mps;

/// Installs the counting allocator for the meta device (after the CPU's, [`cpu_install`]);
/// idempotent. Meta tensors' bytes then count and log as CPU tensors' do.
pub fn meta_install() -> Result<(), String> {
    cpu_install()?;
    // SAFETY: buffer from `call`.
    call(|e, l| unsafe { oomlab_meta_install(e, l) })
}

/// Pauses (`true`) or resumes the counting of the CPU's own allocations, for a step recorded on
/// the meta device, whose log is the meta device's alone.
pub fn cpu_pause(on: bool) {
    // SAFETY: a plain value.
    unsafe { oomlab_cpu_pause(c_int::from(on)) }
}

/// Pauses (`true`) or resumes the counting of the meta device's allocations: what is made
/// meanwhile is never counted, nor its free (`nn::script`'s kept modules hold such placeholders
/// between recordings).
pub fn meta_pause(on: bool) {
    // SAFETY: sets an atomic flag.
    unsafe { oomlab_meta_pause(c_int::from(on)) }
}

/// Whether the steps recorded on the meta device from here stand for CUDA steps (`true`):
/// then an attention whose mask needs a gradient runs as CUDA's memory-efficient kernel, which
/// the CPU does not have (the shim's `g_sdpa_as_cuda`).
pub fn meta_sdpa_as_cuda(on: bool) {
    // SAFETY: sets an atomic flag.
    unsafe { oomlab_meta_sdpa_as_cuda(c_int::from(on)) }
}

/// The tensor a shim call makes and hands over (a heap `at::Tensor*`, null with the error in
/// the buffer on failure), owned by tch from here.
fn made(f: impl FnOnce(*mut c_char, usize) -> *mut c_void) -> Result<tch::Tensor, String> {
    let mut raw = std::ptr::null_mut();
    call(|e, l| {
        raw = f(e, l);
        c_int::from(raw.is_null())
    })?;
    // SAFETY: `raw` is a live, heap-allocated at::Tensor, as tch's own C tensors are.
    Ok(unsafe { tch::Tensor::from_ptr(raw as *mut torch_sys::C_tensor) })
}

/// `t` on the meta device: its shape and dtype, no data.
pub fn to_meta(t: &tch::Tensor) -> Result<tch::Tensor, String> {
    // SAFETY: `t` is a live at::Tensor for the call; buffer from `made`.
    made(|e, l| unsafe { oomlab_to_meta(t.as_ptr() as *mut c_void, e, l) })
}

/// A new tensor of `shape` and `kind` on the meta device: a factory's output there.
pub fn meta_empty(shape: &[i64], kind: tch::Kind) -> Result<tch::Tensor, String> {
    // SAFETY: `shape` outlives the call; buffer from `made`.
    made(|e, l| unsafe { oomlab_meta_empty(shape.as_ptr(), shape.len(), scalar_type(kind), e, l) })
}

/// The shim's numbering of a device: (type, index), as c10::DeviceType numbers them: CPU = 0,
/// CUDA = 1, meta = 14.
fn device_numbers(device: tch::Device) -> (c_int, c_int) {
    match device {
        tch::Device::Cuda(i) => (1, i as c_int),
        META => (14, -1),
        _ => (0, -1),
    }
}

/// A copy of the device's default random generator's state: a CPU byte tensor, as
/// `torch.get_rng_state()` (or `torch.cuda.get_rng_state()`) returns.
pub fn rng_state(device: tch::Device) -> Result<tch::Tensor, String> {
    let (kind, index) = device_numbers(device);
    // SAFETY: buffer from `made`.
    made(|e, l| unsafe { oomlab_rng_state(kind, index, e, l) })
}

/// Puts a state from [`rng_state`] back into the device's default generator.
pub fn set_rng_state(device: tch::Device, state: &tch::Tensor) -> Result<(), String> {
    let (kind, index) = device_numbers(device);
    // SAFETY: `state` is a live at::Tensor for the call; buffer from `call`.
    call(|e, l| unsafe { oomlab_set_rng_state(kind, index, state.as_ptr() as *mut c_void, e, l) })
}

// tch's CModule is its `torch::jit::Module*` and nothing else; `module_ptr` reads it.
const _: () = assert!(std::mem::size_of::<tch::CModule>() == std::mem::size_of::<*mut c_void>());

fn module_ptr(module: &tch::CModule) -> *mut c_void {
    // SAFETY: a CModule is one field, the module's pointer (the size is asserted above); it is
    // read, not taken: the CModule still owns and frees it.
    unsafe { std::mem::transmute_copy::<tch::CModule, *mut c_void>(module) }
}

/// Whether every parameter and buffer of a loaded TorchScript module lies within its storage;
/// the error names the first that does not.
pub fn script_check_storage(module: &tch::CModule) -> Result<(), String> {
    // SAFETY: the module is live for the call; buffer from `call`.
    call(|e, l| unsafe { oomlab_script_check_storage(module_ptr(module), e, l) })
}

/// Tags a TorchScript module's parameters and buffers as the device's in the event log that is
/// on (a recording of the model phase); nothing when none is.
pub fn script_on_device(module: &tch::CModule) {
    // SAFETY: the module is live for the call.
    unsafe { oomlab_script_tag_device(module_ptr(module)) }
}

/// Moves a TorchScript module to `device`, its floating-point parameters and buffers to `kind`
/// and nothing else to another type (as Python's `nn.Module.to` does: integer buffers stay).
pub fn script_to(module: &tch::CModule, device: tch::Device, kind: tch::Kind) -> Result<(), String> {
    let (device_type, index) = device_numbers(device);
    let dtype = scalar_type(kind);
    // SAFETY: the module is live for the call; buffer from `call`.
    call(|e, l| unsafe { oomlab_script_to(module_ptr(module), device_type, index, dtype, e, l) })
}

/// Sets every `scaled_dot_product_attention`'s dropout in a TorchScript module's graphs to 0;
/// how many it set (-1: the graphs could not be read).
pub fn script_attention_without_dropout(module: &tch::CModule) -> i64 {
    // SAFETY: the module is live for the call and not run meanwhile.
    unsafe { oomlab_script_attention_without_dropout(module_ptr(module)) }
}

/// The tensor object `t` is (its `TensorImpl`): equal for two handles of one tensor, as
/// Python's `id()` is for one parameter listed under two names.
pub fn tensor_identity(t: &tch::Tensor) -> usize {
    // SAFETY: `t` is live for the call; the pointer is compared, never followed.
    unsafe { oomlab_tensor_identity(ptr(t)) as usize }
}

/// The names of a TorchScript module's top-level children, in order (`named_children()`).
pub fn script_children(module: &tch::CModule) -> Result<Vec<String>, String> {
    let mut count = 0i64;
    let mut names = vec![0 as c_char; 1 << 16];
    // SAFETY: the module is live; `count` and `names` are writable for the call; buffer from `call`.
    call(|e, l| unsafe {
        oomlab_script_children(module_ptr(module), &mut count, names.as_mut_ptr(), names.len(), e, l)
    })?;
    // SAFETY: NUL-terminated by the shim.
    let joined = unsafe { CStr::from_ptr(names.as_ptr()) }.to_string_lossy().into_owned();
    let names: Vec<String> =
        if count == 0 { Vec::new() } else { joined.split('\n').map(String::from).collect() };
    if names.len() != count as usize {
        return Err(format!("{count} children, {} names read", names.len()));
    }
    Ok(names)
}

/// A module's buffers as Python's `module.buffers()` lists them (each once, modules in
/// pre-order): what DDP broadcasts from rank 0.
pub fn script_buffers(module: &tch::CModule) -> Result<Vec<tch::Tensor>, String> {
    let mut cap = 64;
    loop {
        let mut out = vec![std::ptr::null_mut(); cap];
        let mut count = 0i64;
        // SAFETY: the module is live; `out` holds `cap` slots; `count` is writable.
        call(|e, l| unsafe {
            oomlab_script_buffers(module_ptr(module), out.as_mut_ptr(), cap as i64, &mut count, e, l)
        })?;
        let n = usize::try_from(count).map_err(|_| format!("{count} buffers"))?;
        if n > cap {
            cap = n;
            continue;
        }
        // SAFETY: the first n slots are heap at::Tensors the shim made for us, now owned here.
        return Ok(out[..n]
            .iter()
            .map(|&p| unsafe { tch::Tensor::from_ptr(p as *mut torch_sys::C_tensor) })
            .collect());
    }
}

/// A module's forward on `inputs`, and the logits in what it returns: the tensor, a tuple's or
/// list's first tensor, or a dict's `"logits"` (else its first tensor); the rest is dropped.
pub fn script_forward(module: &tch::CModule, inputs: &[&tch::Tensor]) -> Result<tch::Tensor, String> {
    let handles: Vec<*mut c_void> = inputs.iter().map(|t| ptr(t)).collect();
    let mut out = std::ptr::null_mut();
    // SAFETY: the module and every input are live for the call; `out` receives one handle.
    call(|e, l| unsafe {
        oomlab_script_forward(module_ptr(module), handles.as_ptr(), handles.len() as i64, &mut out, e, l)
    })?;
    // SAFETY: a heap at::Tensor the shim made for us, now owned here.
    Ok(unsafe { tch::Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
}

/// Child `i`'s forward on `x` (the i-th of [`script_children`]).
pub fn script_child_forward(module: &tch::CModule, i: usize, x: &tch::Tensor) -> Result<tch::Tensor, String> {
    let mut out = std::ptr::null_mut();
    // SAFETY: the module and `x` are live for the call; `out` receives one handle.
    call(|e, l| unsafe {
        oomlab_script_child_forward(module_ptr(module), i as i64, ptr(x), &mut out, e, l)
    })?;
    // SAFETY: a heap at::Tensor the shim made for us, now owned here.
    Ok(unsafe { tch::Tensor::from_ptr(out as *mut torch_sys::C_tensor) })
}

/// Three results of the shim, as tensors (undefined where it wrote null).
fn three(out: [*mut c_void; 3]) -> [tch::Tensor; 3] {
    out.map(|p| {
        if p.is_null() {
            // SAFETY: tch's own way to an undefined tensor (a null C tensor is not one).
            tch::Tensor::new()
        } else {
            // SAFETY: a heap at::Tensor the shim made for us, now owned here.
            unsafe { tch::Tensor::from_ptr(p as *mut torch_sys::C_tensor) }
        }
    })
}

fn ptr(t: &tch::Tensor) -> *mut c_void {
    t.as_ptr() as *mut c_void
}

/// `at::convolution_backward` of a 2-d convolution (dilation 1, not transposed): the input's,
/// weight's and bias's gradients, as `mask` asks.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    grad: &tch::Tensor,
    input: &tch::Tensor,
    weight: &tch::Tensor,
    bias_size: Option<i64>,
    stride: i64,
    padding: i64,
    groups: i64,
    mask: [bool; 3],
) -> Result<[tch::Tensor; 3], String> {
    let mut out = [std::ptr::null_mut(); 3];
    let [m0, m1, m2] = mask.map(c_int::from);
    // SAFETY: the tensors are live for the call; `out` has room for three handles.
    call(|e, l| unsafe {
        oomlab_conv2d_backward(
            ptr(grad),
            ptr(input),
            ptr(weight),
            bias_size.unwrap_or(-1),
            stride,
            padding,
            groups,
            m0,
            m1,
            m2,
            out.as_mut_ptr(),
            e,
            l,
        )
    })?;
    Ok(three(out))
}

/// `at::native_batch_norm_backward` in training: the input's, weight's and bias's gradients, as
/// `mask` asks.
pub fn batch_norm_backward(
    grad: &tch::Tensor,
    input: &tch::Tensor,
    [weight, mean, var, save_mean, save_invstd]: [&tch::Tensor; 5],
    mask: [bool; 3],
) -> Result<[tch::Tensor; 3], String> {
    let mut out = [std::ptr::null_mut(); 3];
    let [m0, m1, m2] = mask.map(c_int::from);
    // SAFETY: the tensors are live for the call; `out` has room for three handles.
    call(|e, l| unsafe {
        oomlab_batch_norm_backward(
            ptr(grad),
            ptr(input),
            ptr(weight),
            ptr(mean),
            ptr(var),
            ptr(save_mean),
            ptr(save_invstd),
            m0,
            m1,
            m2,
            out.as_mut_ptr(),
            e,
            l,
        )
    })?;
    Ok(three(out))
}

/// The tch crate this binary is built with, as Cargo.toml pins it (`=0.24.0`; a test holds the
/// two together): tch has no version constant of its own.
pub const TCH_VERSION: &str = "0.24.0";

/// The libtorch version the binary was built against, e.g. "2.11.0".
pub fn torch_version() -> String {
    // SAFETY: the shim returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(oomlab_torch_version()) }.to_string_lossy().into_owned()
}

/// libtorch_cuda, loaded once, on the first call (the shim's `oomlab_cuda_load`: the binary does
/// not link it, so that a command that never asks about CUDA starts without it): `Ok(false)`
/// where this libtorch has none, `Err` where it would not load (a missing CUDA library).
pub fn cuda_load() -> Result<bool, String> {
    static LOADED: std::sync::OnceLock<Result<bool, String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            let mut loaded = 0;
            // SAFETY: buffer from `call`.
            call(|e, l| {
                loaded = unsafe { oomlab_cuda_load(e, l) };
                c_int::from(loaded < 0)
            })?;
            Ok(loaded == 1)
        })
        .clone()
}

/// The CUDA runtime libtorch was built with, as "13.0"; `None` when libtorch has none.
pub fn cuda_runtime_version() -> Option<String> {
    // libtorch answers from its CUDA hooks, which it caches at the first question.
    cuda_load().ok()?;
    // SAFETY: no arguments.
    let v = unsafe { oomlab_cuda_runtime_version() };
    (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// The libc10 file loaded at run time.
pub fn libtorch_path() -> Option<String> {
    // `call` hands back the buffer's text as the error; here it is the answer.
    // SAFETY: buffer from `call`.
    call(|e, l| unsafe { 1 - oomlab_libtorch_path(e, l) }).err()
}

/// A `torch.optim` optimizer made in `optim.cpp`, owning its state (see `train::optim`).
pub struct Optim(std::ptr::NonNull<c_void>);

impl Optim {
    /// kind: 0 SGD, 1 Adam, 2 AdamW; implementation: 0 for-loop, 1 foreach, 2 fused. The
    /// optimizer keeps its own handles to `params`.
    pub fn new(
        kind: i32,
        implementation: i32,
        params: &[&tch::Tensor],
        lr: f64,
        momentum: f64,
        weight_decay: f64,
    ) -> Result<Optim, String> {
        let ptrs: Vec<*mut c_void> = params.iter().map(|p| p.as_ptr() as *mut c_void).collect();
        let mut raw = std::ptr::null_mut();
        // SAFETY: each pointer is a live at::Tensor (tch's C_tensor), read before the call returns.
        call(|e, l| {
            raw = unsafe {
                oomlab_optim_new(
                    kind,
                    implementation,
                    ptrs.as_ptr(),
                    ptrs.len(),
                    lr,
                    momentum,
                    weight_decay,
                    e,
                    l,
                )
            };
            c_int::from(raw.is_null())
        })?;
        Ok(Optim(std::ptr::NonNull::new(raw).expect("checked above")))
    }

    /// One step; `scaling` is the grad scaler's (scale, found_inf) for a fused step.
    pub fn step(&self, scaling: Option<(&tch::Tensor, &tch::Tensor)>) -> Result<(), String> {
        let (scale, inf) = match scaling {
            Some((s, i)) => (s.as_ptr() as *mut c_void, i.as_ptr() as *mut c_void),
            None => (std::ptr::null_mut(), std::ptr::null_mut()),
        };
        // SAFETY: the optimizer is live; the tensors outlive the call.
        call(|e, l| unsafe { oomlab_optim_step(self.0.as_ptr(), scale, inf, e, l) })
    }

    /// Sets every parameter's gradient to none.
    pub fn zero_grad(&self) {
        // SAFETY: the optimizer is live.
        unsafe { oomlab_optim_zero_grad(self.0.as_ptr()) }
    }
}

/// Sets each tensor's gradient to none (`zero_grad(set_to_none=True)` over tensors an
/// optimizer does not hold: ZeRO's, whose local optimizer holds the rank's shard).
pub fn reset_grads(params: &[&tch::Tensor]) {
    let ptrs: Vec<*mut c_void> = params.iter().map(|p| p.as_ptr() as *mut c_void).collect();
    // SAFETY: each pointer is a live at::Tensor (tch's C_tensor) for the call.
    unsafe { oomlab_grads_reset(ptrs.as_ptr(), ptrs.len()) }
}

impl Drop for Optim {
    fn drop(&mut self) {
        // SAFETY: made by oomlab_optim_new, freed once.
        unsafe { oomlab_optim_free(self.0.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tch_version_is_the_one_cargo_toml_pins() {
        let manifest = include_str!("../../Cargo.toml");
        let pin = manifest.lines().find(|l| l.trim_start().starts_with("tch ")).expect("tch in Cargo.toml");
        assert!(pin.contains(&format!("\"={}\"", super::TCH_VERSION)), "{pin}");
    }
}
