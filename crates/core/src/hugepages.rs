//! Transparent huge pages for CPU tensors: PyTorch's own switch, on unless the environment says.
//!
//! libtorch's CPU allocator takes each tensor from `posix_memalign`, and glibc maps every
//! allocation over 32 MiB anew and unmaps it when freed, so a step's large tensors are touched
//! for the first time again every step: a page fault for each 4 KiB. With
//! `THP_MEM_ALLOC_ENABLE=1` (read once by c10's `alloc_cpu`, documented in PyTorch's CPU
//! performance tutorials) allocations of 2 MiB or more are page-aligned and `madvise`d for huge
//! pages, which the kernel gives where its mode is `madvise` or `always`. Measured on a 2-core AMD
//! EPYC, a 40 x 5000 MLP's two Adam steps (for-loop) went from 5.7 million page faults in
//! `optimizer_step` to 0.1 million, and the trial from 79 s to 50 s; the depth sweep is most of
//! the CPU suite's time. Memory is the same to the byte (the counting allocator counts what is
//! asked for; `tests/suite/huge_pages.rs`); only time changes, which is why each manifest records it.
//! A GPU's tensors do not pass through this allocator: it changes nothing there.

/// PyTorch's variable.
pub const VAR: &str = "THP_MEM_ALLOC_ENABLE";

/// Sets `THP_MEM_ALLOC_ENABLE=1` unless the environment sets it (`0` measures without). Called
/// first thing in `main`, before libtorch allocates (it reads the variable once) and before
/// any thread exists (setting the environment is not thread-safe). Child processes (the bench's
/// PyTorch loop, Slurm shards) inherit it, so that both sides of a comparison allocate alike.
pub fn enable_unless_set() {
    if std::env::var_os(VAR).is_none() {
        std::env::set_var(VAR, "1");
    }
}

/// The kernel's mode ("always", "madvise" or "never"), where it says.
pub fn kernel_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// For the manifest: "THP_MEM_ALLOC_ENABLE=1, kernel madvise" (whether a step's large CPU tensors
/// can be huge pages, which decides how many page faults its time holds).
pub fn describe() -> String {
    let var = std::env::var(VAR).unwrap_or_else(|_| "unset".into());
    let kernel = kernel_mode().map_or_else(|| "kernel mode unknown".into(), |m| format!("kernel {m}"));
    format!("{VAR}={var}, {kernel}")
}
