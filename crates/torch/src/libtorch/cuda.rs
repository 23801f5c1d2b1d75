//! CUDA as libtorch sees it, asked through here only: the binary does not link libtorch_cuda
//! (`link_libtorch.rs`), which with the CUDA libraries it pulls in is a third of every start's time on a
//! machine without a GPU, and loads it at the first question (`ffi::cuda_load`). libtorch caches
//! what it first learns about CUDA (its hooks; the autograd engine's device threads, at the first
//! backward), so a command that may train on a GPU asks here before anything else runs libtorch:
//! where its device is resolved, right after its spec is read.

/// How many CUDA devices libtorch sees; 0 where it has no CUDA or CUDA would not load.
pub fn devices() -> usize {
    match crate::ffi::cuda_load() {
        Ok(true) => tch::Cuda::device_count().max(0) as usize,
        Ok(false) | Err(_) => 0,
    }
}

/// Whether libtorch sees a CUDA device.
pub fn available() -> bool {
    devices() > 0
}

/// Why CUDA is not there to be seen, where libtorch has it but it would not load.
pub fn load_error() -> Option<String> {
    crate::ffi::cuda_load().err()
}

#[cfg(test)]
mod tests {
    /// Where libtorch has CUDA (the PyPI build this project installs does), it loads on demand
    /// and its hooks answer (the runtime's version), as they did when the binary linked it.
    #[test]
    fn cuda_loads_when_asked_and_its_hooks_answer() {
        let libc10 = crate::ffi::libtorch_path().expect("libc10 was loaded from a file");
        let has_cuda = std::path::Path::new(&libc10).with_file_name("libtorch_cuda.so").exists();
        assert_eq!(crate::ffi::cuda_load(), Ok(has_cuda), "libtorch beside {libc10}");
        if has_cuda {
            let version = crate::ffi::cuda_runtime_version().expect("libtorch_cuda's hooks answer");
            assert!(version.split('.').all(|p| p.parse::<u32>().is_ok()), "{version}");
        }
    }
}
