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
    embed_git_revision();
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

/// The revision this binary is built from, for a binary run away from its source tree (a GPU
/// machine given the binary alone): `results::manifest::git_info` reads the tree at run time
/// where it can, and these where it cannot. Re-read when HEAD moves or the index changes; an
/// edit not yet staged does not re-run this script, so `dirty` here is as of the last commit,
/// stage or build-script change (a clean commit built after it is exact).
fn embed_git_revision() {
    for path in [".git/HEAD", ".git/index", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let revision = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no", "--", ".", ":!results"])
        .map(|s| if s.is_empty() { "false" } else { "true" })
        .unwrap_or_default();
    println!("cargo:rustc-env=OOMLAB_BUILT_GIT_REVISION={revision}");
    println!("cargo:rustc-env=OOMLAB_BUILT_GIT_DIRTY={dirty}");
}
