//! Compiles `src/ffi/shim.cpp` against the libtorch that torch-sys found, and makes the final
//! binaries load that libtorch, CUDA included, without `LD_LIBRARY_PATH`.
//!
//! torch-sys's own link flags stop at its rlib: without the flags below a binary has no RUNPATH
//! and, since nothing in it names a libtorch_cuda symbol, the linker drops libtorch_cuda and CUDA
//! is never seen (tch-rs issues 907 and 980).
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/ffi/shim.cpp");
    println!("cargo:rerun-if-changed=src/ffi/optim.cpp");
    println!("cargo:rerun-if-changed=src/ffi/events.cpp");
    println!("cargo:rerun-if-changed=src/ffi/guarded.h");
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB")
            .expect("torch-sys did not report its libtorch folder; run scripts/setup-libtorch"),
    );
    // The real folder, not a symlink inside the clone, so the binary survives the clone moving.
    let lib = lib.canonicalize().unwrap_or(lib);
    let root = lib.parent().expect("libtorch lib folder has a parent");

    cc::Build::new()
        .cpp(true)
        .file("src/ffi/shim.cpp")
        .file("src/ffi/optim.cpp")
        .file("src/ffi/events.cpp")
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .compile("oomlab_shim");

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    for name in ["torch_cuda", "torch", "torch_cpu", "c10"] {
        if lib.join(format!("lib{name}.so")).exists() {
            println!("cargo:rustc-link-arg=-l{name}");
        }
    }
    println!("cargo:rustc-link-arg=-Wl,--as-needed");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
