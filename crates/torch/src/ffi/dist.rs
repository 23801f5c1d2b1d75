//! torch.distributed's C++ core (`dist.cpp`): a gloo process group over a store, its
//! collectives, and DistributedDataParallel's reducer, as PyTorch's Python drives them. Safe
//! wrappers: a [`Group`] is a rank's WORLD; a [`Ddp`] wraps a model's parameters in it.
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use super::call;

extern "C" {
    fn oomlab_dist_group(
        host: *const c_char,
        port: c_int,
        prefix: *const c_char,
        file: *const c_char,
        rank: c_int,
        size: c_int,
        timeout_ms: i64,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void;
    fn oomlab_dist_group_free(group: *mut c_void);
    fn oomlab_store_tcp(
        host: *const c_char,
        port: c_int,
        server: c_int,
        workers: c_int,
        timeout_ms: i64,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void;
    fn oomlab_store_free(store: *mut c_void);
    fn oomlab_store_set(
        store: *mut c_void,
        key: *const c_char,
        data: *const u8,
        n: usize,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_store_check(
        store: *mut c_void,
        key: *const c_char,
        present: *mut c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_store_get(
        store: *mut c_void,
        key: *const c_char,
        ctx: *mut c_void,
        sink: extern "C" fn(*mut c_void, *const u8, usize),
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_dist_all_reduce(group: *mut c_void, tensor: *mut c_void, err: *mut c_char, len: usize)
        -> c_int;
    fn oomlab_dist_broadcast(
        group: *mut c_void,
        tensor: *mut c_void,
        src: c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_dist_barrier(group: *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_ddp_new(
        group: *mut c_void,
        params: *const *mut c_void,
        n: usize,
        buffers: *const *mut c_void,
        nb: usize,
        bucket_cap_bytes: i64,
        find_unused_parameters: c_int,
        gradient_as_bucket_view: c_int,
        static_graph: c_int,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void;
    fn oomlab_ddp_free(ddp: *mut c_void);
    fn oomlab_ddp_pre_forward(ddp: *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn oomlab_ddp_post_forward(
        ddp: *mut c_void,
        outputs: *const *mut c_void,
        n: usize,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn oomlab_ddp_buckets(ddp: *mut c_void, bytes: *mut i64, cap: i64) -> i64;
}

/// Where a world's ranks meet: the store `init_process_group` opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendezvous {
    /// A file every rank of one machine opens (`FileStore`); it must not exist before the first
    /// rank opens it.
    File(std::path::PathBuf),
    /// A TCP store whose server rank 0 runs (torchrun's `MASTER_ADDR` and `MASTER_PORT`).
    Tcp { host: String, port: u16 },
    /// The keys under `prefix` of a TCP store another process serves (a launched world's
    /// [`Store`]): every rank a client, each trial's ranks under a prefix of their own.
    Served { host: String, port: u16, prefix: String },
}

/// One rank's process group (WORLD) on libtorch's gloo backend.
pub struct Group {
    raw: NonNull<c_void>,
    rank: usize,
    size: usize,
}

// SAFETY: c10d's process group is made to be called from several threads (DDP's reducer calls
// it from autograd's, beside the trial's): its collectives are queued under its own lock and run
// on gloo's threads.
unsafe impl Send for Group {}
// SAFETY: as above.
unsafe impl Sync for Group {}

impl Group {
    /// Joins rank `rank` of `size` at `rendezvous`; `timeout` bounds the rendezvous and every
    /// collective after it (a rank that died or hangs fails the others after it).
    pub fn join(
        rendezvous: &Rendezvous,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Group, String> {
        let cstr = |s: &str| CString::new(s).map_err(|_| format!("a NUL byte in {s:?}"));
        let (host, port, prefix, file) = match rendezvous {
            Rendezvous::File(path) => (None, 0, None, Some(cstr(&path_str(path)?)?)),
            Rendezvous::Tcp { host, port } => (Some(cstr(host)?), *port, None, None),
            Rendezvous::Served { host, port, prefix } => {
                (Some(cstr(host)?), *port, Some(cstr(prefix)?), None)
            }
        };
        let as_ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        let (rank_c, size_c) = (to_int(rank)?, to_int(size)?);
        let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        // c10d asks libtorch for CUDA's hooks, which libtorch settles at the first question: asked
        // before libtorch_cuda is loaded (oomlab loads it on demand), "no CUDA" would stay the
        // answer for the whole process. Loaded first, whatever the answer (none, on a CPU build).
        let _ = super::cuda_load();
        let mut raw = std::ptr::null_mut();
        // SAFETY: the strings outlive the call; a null result comes with a message.
        call(|e, l| {
            raw = unsafe {
                oomlab_dist_group(
                    as_ptr(&host),
                    c_int::from(port),
                    as_ptr(&prefix),
                    as_ptr(&file),
                    rank_c,
                    size_c,
                    timeout_ms,
                    e,
                    l,
                )
            };
            c_int::from(raw.is_null())
        })
        .map_err(|raw| join_error(&raw, rendezvous, rank, size, timeout))?;
        Ok(Group { raw: NonNull::new(raw).expect("checked above"), rank, size })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// `dist.all_reduce(tensor)`: every rank's tensor summed, in place.
    pub fn all_reduce(&self, tensor: &tch::Tensor) -> Result<(), String> {
        // SAFETY: the group and the tensor are live for the call.
        call(|e, l| unsafe {
            oomlab_dist_all_reduce(self.raw.as_ptr(), tensor.as_ptr() as *mut c_void, e, l)
        })
    }

    /// `dist.broadcast(tensor, src)`: rank `src`'s tensor, in place on every rank.
    pub fn broadcast(&self, tensor: &tch::Tensor, src: usize) -> Result<(), String> {
        let src = to_int(src)?;
        // SAFETY: the group and the tensor are live for the call.
        call(|e, l| unsafe {
            oomlab_dist_broadcast(self.raw.as_ptr(), tensor.as_ptr() as *mut c_void, src, e, l)
        })
    }

    /// `dist.barrier()`.
    pub fn barrier(&self) -> Result<(), String> {
        // SAFETY: the group is live.
        call(|e, l| unsafe { oomlab_dist_barrier(self.raw.as_ptr(), e, l) })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: made by oomlab_dist_group, freed once.
        unsafe { oomlab_dist_group_free(self.raw.as_ptr()) }
    }
}

/// DistributedDataParallel's knobs that change what a rank holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DdpOptions {
    /// `bucket_cap_mb` in bytes; `None` is DDP's default (25 MiB, the first bucket 1 MiB).
    pub bucket_cap_bytes: Option<u64>,
    pub find_unused_parameters: bool,
    pub gradient_as_bucket_view: bool,
    pub static_graph: bool,
}

impl From<oomlab_core::spec::DdpSpec> for DdpOptions {
    /// The spec's `[parallel]` DDP knobs, as the engine takes them.
    fn from(spec: oomlab_core::spec::DdpSpec) -> Self {
        DdpOptions {
            bucket_cap_bytes: spec.bucket_cap_bytes,
            find_unused_parameters: spec.find_unused_parameters,
            gradient_as_bucket_view: spec.gradient_as_bucket_view,
            static_graph: spec.static_graph,
        }
    }
}

/// A model's parameters and buffers wrapped as `DistributedDataParallel` wraps a module: made,
/// it has broadcast rank 0's values and built the first step's buckets; [`Ddp::pre_forward`]
/// and [`Ddp::post_forward`] go around each forward, and the backward then all-reduces the
/// gradients through the reducer's autograd hooks.
pub struct Ddp {
    raw: NonNull<c_void>,
    /// The reducer holds the group by pointer: it lives as long as this.
    _group: Arc<Group>,
}

// SAFETY: as `Group`'s.
unsafe impl Send for Ddp {}

impl Ddp {
    /// Wraps `params` (those that need a gradient, in the module's order) and `buffers`.
    pub fn new(
        group: &Arc<Group>,
        params: &[&tch::Tensor],
        buffers: &[&tch::Tensor],
        opts: DdpOptions,
    ) -> Result<Ddp, String> {
        let ptrs = |ts: &[&tch::Tensor]| ts.iter().map(|t| t.as_ptr() as *mut c_void).collect::<Vec<_>>();
        let (p, b) = (ptrs(params), ptrs(buffers));
        let cap = match opts.bucket_cap_bytes {
            None => -1,
            Some(bytes) => i64::try_from(bytes).map_err(|_| format!("bucket cap of {bytes} bytes"))?,
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: each pointer is a live at::Tensor for the call (the reducer keeps its own
        // handles); a null result comes with a message.
        call(|e, l| {
            raw = unsafe {
                oomlab_ddp_new(
                    group.raw.as_ptr(),
                    p.as_ptr(),
                    p.len(),
                    b.as_ptr(),
                    b.len(),
                    cap,
                    c_int::from(opts.find_unused_parameters),
                    c_int::from(opts.gradient_as_bucket_view),
                    c_int::from(opts.static_graph),
                    e,
                    l,
                )
            };
            c_int::from(raw.is_null())
        })?;
        Ok(Ddp { raw: NonNull::new(raw).expect("checked above"), _group: Arc::clone(group) })
    }

    /// Before a forward: the reducer readied, its buckets rebuilt at the second step, rank 0's
    /// buffers broadcast.
    pub fn pre_forward(&self) -> Result<(), String> {
        // SAFETY: the reducer is live.
        call(|e, l| unsafe { oomlab_ddp_pre_forward(self.raw.as_ptr(), e, l) })
    }

    /// After a forward: the reducer told a backward follows (`outputs`, for
    /// `find_unused_parameters`).
    pub fn post_forward(&self, outputs: &[&tch::Tensor]) -> Result<(), String> {
        let ptrs: Vec<*mut c_void> = outputs.iter().map(|t| t.as_ptr() as *mut c_void).collect();
        // SAFETY: the reducer and the tensors are live for the call.
        call(|e, l| unsafe { oomlab_ddp_post_forward(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len(), e, l) })
    }

    /// The reducer's buckets, each one's bytes, in the reducer's order.
    pub fn bucket_bytes(&self) -> Result<Vec<u64>, String> {
        let mut bytes = vec![0i64; 4096];
        // SAFETY: the reducer is live; the buffer holds `cap` entries.
        let n = unsafe { oomlab_ddp_buckets(self.raw.as_ptr(), bytes.as_mut_ptr(), bytes.len() as i64) };
        let n = usize::try_from(n).map_err(|_| "the reducer's buckets could not be read".to_string())?;
        Ok(bytes.iter().take(n).map(|&b| b as u64).collect())
    }
}

impl Drop for Ddp {
    fn drop(&mut self) {
        // SAFETY: made by oomlab_ddp_new, freed once.
        unsafe { oomlab_ddp_free(self.raw.as_ptr()) }
    }
}

/// A TCP store (`torch.distributed.TCPStore`) that a launched world's processes share: one
/// serves it (or torchrun's agent does), all read and write keys in it.
pub struct Store {
    raw: NonNull<c_void>,
}

// SAFETY: c10d's TCPStore serialises its client's requests under its own lock.
unsafe impl Send for Store {}
// SAFETY: as above.
unsafe impl Sync for Store {}

impl Store {
    /// The store at `host:port`: served by this process when `server` (which then waits for
    /// `workers` clients, itself included, up to `timeout`), else a client of the one there.
    /// `timeout` also bounds each request.
    pub fn tcp(
        host: &str,
        port: u16,
        server: bool,
        workers: usize,
        timeout: Duration,
    ) -> Result<Store, String> {
        let host_c = CString::new(host).map_err(|_| format!("a NUL byte in {host:?}"))?;
        let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        let mut raw = std::ptr::null_mut();
        call(|e, l| {
            // SAFETY: the string outlives the call; a null result comes with a message.
            raw = unsafe {
                oomlab_store_tcp(
                    host_c.as_ptr(),
                    c_int::from(port),
                    c_int::from(server),
                    to_int(workers).unwrap_or(c_int::MAX),
                    timeout_ms,
                    e,
                    l,
                )
            };
            c_int::from(raw.is_null())
        })
        .map_err(|raw| {
            let lower = raw.to_lowercase();
            if server && (lower.contains("eaddrinuse") || lower.contains("address already in use")) {
                format!(
                    "port {port} on {host} is in use by another process: give the ranks another MASTER_PORT, or end \
                     that process ({raw})"
                )
            } else if lower.contains("timeout") || lower.contains("timed out") {
                let whom = if server { format!("all {workers} ranks arrive") } else { "rank 0 open it".into() };
                format!(
                    "the ranks' store at {host}:{port}: did not see {whom} within {} s (was every rank started, with \
                     the same MASTER_ADDR and MASTER_PORT?): {raw}",
                    timeout.as_secs_f64()
                )
            } else {
                format!("the ranks' store at {host}:{port}: {raw}")
            }
        })?;
        Ok(Store { raw: NonNull::new(raw).expect("checked above") })
    }

    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), String> {
        let key_c = CString::new(key).map_err(|_| format!("a NUL byte in {key:?}"))?;
        // SAFETY: the store is live; key and value outlive the call.
        call(|e, l| unsafe {
            oomlab_store_set(self.raw.as_ptr(), key_c.as_ptr(), value.as_ptr(), value.len(), e, l)
        })
    }

    /// Whether `key` is set, without waiting for it.
    pub fn check(&self, key: &str) -> Result<bool, String> {
        let key_c = CString::new(key).map_err(|_| format!("a NUL byte in {key:?}"))?;
        let mut present: c_int = 0;
        // SAFETY: the store is live; the key and the flag outlive the call.
        call(|e, l| unsafe { oomlab_store_check(self.raw.as_ptr(), key_c.as_ptr(), &mut present, e, l) })?;
        Ok(present != 0)
    }

    /// `key`'s value, once set (a key not set within the store's timeout is an error).
    pub fn get(&self, key: &str) -> Result<Vec<u8>, String> {
        extern "C" fn sink(ctx: *mut c_void, data: *const u8, n: usize) {
            if n > 0 {
                // SAFETY: ctx is the Vec below; data holds n bytes for the call's length.
                unsafe { (*ctx.cast::<Vec<u8>>()).extend_from_slice(std::slice::from_raw_parts(data, n)) }
            }
        }
        let key_c = CString::new(key).map_err(|_| format!("a NUL byte in {key:?}"))?;
        let mut out: Vec<u8> = Vec::new();
        let ctx = (&mut out as *mut Vec<u8>).cast::<c_void>();
        // SAFETY: the store is live; the key and the sink's Vec outlive the call.
        call(|e, l| unsafe { oomlab_store_get(self.raw.as_ptr(), key_c.as_ptr(), ctx, sink, e, l) })?;
        Ok(out)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: made by oomlab_store_tcp, freed once.
        unsafe { oomlab_store_free(self.raw.as_ptr()) }
    }
}

/// c10d's words for a failed rendezvous, with what happened and what to do in front: the two a
/// user meets are a port another process holds and ranks that never all arrive.
fn join_error(raw: &str, at: &Rendezvous, rank: usize, size: usize, timeout: Duration) -> String {
    let lower = raw.to_lowercase();
    let (place, cause) = match at {
        Rendezvous::Tcp { host, port } => (format!("{host}:{port}"), Some(port)),
        Rendezvous::Served { host, port, .. } => (format!("{host}:{port}"), None),
        Rendezvous::File(path) => (path.display().to_string(), None),
    };
    let head = format!("rank {rank} of {size} could not join the others at {place}");
    if let Some(port) =
        cause.filter(|_| lower.contains("eaddrinuse") || lower.contains("address already in use"))
    {
        return format!(
            "{head}: port {port} is in use by another process; give the ranks another port (MASTER_PORT) or end \
             that process ({raw})"
        );
    }
    if lower.contains("timeout") || lower.contains("timed out") {
        return format!(
            "{head}: not every rank arrived within {} s (a rank that failed to start, or was started with another \
             world size or store); start all {size} ranks, or give them longer ({raw})",
            timeout.as_secs_f64()
        );
    }
    format!("{head}: {raw}")
}

fn to_int(n: usize) -> Result<c_int, String> {
    c_int::try_from(n).map_err(|_| format!("{n} is too large for a rank or world size"))
}

fn path_str(path: &Path) -> Result<String, String> {
    path.to_str().map(str::to_string).ok_or_else(|| format!("{} is not UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tch::{Kind, Tensor};

    use super::{Ddp, DdpOptions, Group, Rendezvous};

    /// Runs `f` on each rank of a world of `size`, ranks as threads meeting at a fresh file.
    fn world<T: Send + 'static>(size: usize, f: impl Fn(Group) -> T + Send + Sync + 'static) -> Vec<T> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("oomlab-dist-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at = Rendezvous::File(dir.join("store"));
        let f = Arc::new(f);
        let ranks: Vec<_> = (0..size)
            .map(|rank| {
                let (f, at) = (Arc::clone(&f), at.clone());
                std::thread::spawn(move || f(Group::join(&at, rank, size, Duration::from_secs(60)).unwrap()))
            })
            .collect();
        let out = ranks.into_iter().map(|r| r.join().unwrap()).collect();
        std::fs::remove_dir_all(&dir).ok();
        out
    }

    /// A port another process holds, and ranks that never all arrive: refused with what to do,
    /// within the timeout, never a hang.
    #[test]
    fn a_port_in_use_and_a_missing_rank_are_refused_in_words() {
        let _ = crate::ffi::cuda_load();
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let at = Rendezvous::Tcp { host: "127.0.0.1".into(), port };
        let err = Group::join(&at, 0, 1, Duration::from_secs(5)).err().expect("the port is held");
        assert!(err.contains(&format!("port {port} is in use")) && err.contains("MASTER_PORT"), "{err}");

        let dir = std::env::temp_dir().join(format!("oomlab-dist-alone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let started = std::time::Instant::now();
        let err = Group::join(&Rendezvous::File(dir.join("store")), 0, 2, Duration::from_secs(2))
            .err()
            .expect("rank 1 never comes");
        std::fs::remove_dir_all(&dir).ok();
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
        assert!(err.contains("rank 0 of 2 could not join") && err.contains("within 2 s"), "{err}");
    }

    #[test]
    fn all_reduce_sums_every_ranks_tensor_and_broadcast_copies_the_roots() {
        let got = world(3, |g| {
            let t = Tensor::from_slice(&[1.0f32, 2.0]) * (g.rank() as f64 + 1.0);
            g.all_reduce(&t).unwrap();
            let b = Tensor::from_slice(&[g.rank() as f32 + 10.0]);
            g.broadcast(&b, 2).unwrap();
            g.barrier().unwrap();
            (Vec::<f32>::try_from(&t).unwrap(), Vec::<f32>::try_from(&b).unwrap())
        });
        assert_eq!(got.len(), 3);
        for (sum, root) in got {
            assert_eq!(sum, [6.0, 12.0]);
            assert_eq!(root, [12.0]);
        }
    }

    /// Each rank starts from its own weights and trains on its own rows: wrapped, every rank
    /// holds rank 0's weights, and after a backward every rank's gradient is the mean of the
    /// ranks' own. The first step's gradients go through one bucket of every parameter; from the
    /// second step the reducer's buckets are rebuilt under the cap.
    #[test]
    fn ddp_starts_from_rank_0s_weights_averages_gradients_and_rebuilds_its_buckets() {
        let got = world(2, |g| {
            let g = Arc::new(g);
            let r = g.rank() as f64;
            let mut w1 =
                (Tensor::ones([3, 4], (Kind::Float, tch::Device::Cpu)) * (r + 5.0)).set_requires_grad(true);
            let mut w2 =
                (Tensor::ones([4, 2], (Kind::Float, tch::Device::Cpu)) * (r + 7.0)).set_requires_grad(true);
            let opts = DdpOptions { bucket_cap_bytes: Some(16), ..DdpOptions::default() };
            let ddp = Ddp::new(&g, &[&w1, &w2], &[], opts).unwrap();
            let weights = (w1.double_value(&[0, 0]), w2.double_value(&[0, 0]));
            let mut buckets = vec![ddp.bucket_bytes().unwrap()];
            for _ in 0..2 {
                w1.zero_grad();
                w2.zero_grad();
                ddp.pre_forward().unwrap();
                let x = Tensor::ones([5, 3], (Kind::Float, tch::Device::Cpu)) * (r + 1.0);
                let loss = x.matmul(&w1).matmul(&w2).sum(Kind::Float);
                ddp.post_forward(&[&loss]).unwrap();
                loss.backward();
                buckets.push(ddp.bucket_bytes().unwrap());
            }
            (weights, w1.grad().double_value(&[0, 0]), buckets)
        });
        for (weights, grad, buckets) in &got {
            assert_eq!(*weights, (5.0, 7.0), "rank 0's weights on every rank");
            // d(sum(x w1 w2))/d w1[0][0] = sum over rows of x[.][0] times sum(w2[0][.]):
            // 5 rows of (r + 1), times 2 * 7; the mean over ranks 0 and 1 is 5 * 1.5 * 14.
            assert_eq!(*grad, 5.0 * 1.5 * 14.0);
            assert_eq!(buckets[0], [(12 + 8) * 4], "the first step's one bucket of every parameter");
            assert_eq!(buckets[1], buckets[0]);
            let mut rebuilt = buckets[2].clone();
            rebuilt.sort_unstable();
            assert_eq!(rebuilt, [8 * 4, 12 * 4], "one bucket a parameter under a 16-byte cap");
        }
    }
}
