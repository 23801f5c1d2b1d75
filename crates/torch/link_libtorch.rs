// Included by the build script of every crate whose binaries run libtorch (`include!`: torch's
// own, and `link_main.rs`, which the others name), so that
// each (its test binaries, the `oomlab` binary) loads the libtorch torch-sys found without
// `LD_LIBRARY_PATH`: torch-sys's own link flags stop at its rlib, and link arguments do not pass
// from one crate to another, so each crate's script gives its own. Needs torch-sys as a direct
// dependency (it reports its libtorch folder only to those).

/// Links this crate's binaries against libtorch_cpu and libc10 with a RUNPATH to their folder,
/// and answers that folder (the real one, not a symlink inside the clone, so that a binary
/// survives the clone moving).
#[allow(dead_code)]
fn link_libtorch() -> std::path::PathBuf {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    let lib = std::path::PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .expect("torch-sys did not report its libtorch folder; run scripts/setup-libtorch"),
    );
    let lib = lib.canonicalize().unwrap_or(lib);
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    // Not libtorch_cuda, nor libtorch (a stub that needs libtorch_cuda): oomlab loads CUDA when
    // first asked about it (`libtorch::cuda`), so that a command that never is starts without it
    // and the CUDA libraries it pulls in.
    for name in ["torch_cpu", "c10"] {
        if lib.join(format!("lib{name}.so")).exists() {
            println!("cargo:rustc-link-arg=-l{name}");
        }
    }
    println!("cargo:rustc-link-arg=-Wl,--as-needed");
    lib
}
