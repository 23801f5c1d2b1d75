//! Compiles `src/ffi/shim.cpp` (and the rest of the shim) against the libtorch that torch-sys
//! found; `link_libtorch.rs` makes this crate's own test binaries load that libtorch.
//!
//! libtorch_cuda is not linked (nothing names its symbols; tch-rs issues 907 and 980): the shim
//! loads it from beside libc10 at the first question about CUDA (`libtorch::cuda`).
use std::path::{Path, PathBuf};

include!("link_libtorch.rs");

/// The shim's sources: a change to any of them recompiles it.
const SHIM: [&str; 14] = [
    "src/ffi/shim.cpp",
    "src/ffi/dist.cpp",
    "src/ffi/gloo/gloo/algorithm.h",
    "src/ffi/gloo/gloo/common/error.h",
    "src/ffi/gloo/gloo/context.h",
    "src/ffi/gloo/gloo/rendezvous/store.h",
    "src/ffi/gloo/gloo/transport/device.h",
    "src/ffi/optim.cpp",
    "src/ffi/events.cpp",
    "src/ffi/script.cpp",
    "src/ffi/meta.cpp",
    "src/ffi/meta_autocast.cpp",
    "src/ffi/guarded.h",
    "src/ffi/log.h",
];

fn main() {
    for path in SHIM {
        println!("cargo:rerun-if-changed={path}");
    }
    let lib = link_libtorch();
    compile_shim(&lib);
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// Compiles the shim, or reuses the archive of an earlier run of this script when it is newer
/// than every source and this script, and was built against the same libtorch: this script
/// re-runs on every edit (for the revision), and the C++ takes longer to compile than the rest
/// of the crate.
fn compile_shim(lib: &Path) {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let archive = out.join("liboomlab_shim.a");
    let stamp = out.join("oomlab_shim.libtorch");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = match modified(&archive) {
        Some(built) => {
            SHIM.iter()
                .chain(&["build.rs", "link_libtorch.rs"])
                .all(|s| modified(Path::new(s)).is_some_and(|m| m < built))
                && std::fs::read_to_string(&stamp).ok().as_deref() == lib.to_str()
        }
        None => false,
    };
    if fresh {
        println!("cargo:rustc-link-lib=static=oomlab_shim");
        println!("cargo:rustc-link-search=native={}", out.display());
        return;
    }
    let root = lib.parent().expect("libtorch lib folder has a parent");
    cc::Build::new()
        .cpp(true)
        .files(SHIM.iter().filter(|s| s.ends_with(".cpp")))
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        // gloo's names, which the wheel's ProcessGroupGloo.hpp includes (src/ffi/gloo/README.md).
        .include("src/ffi/gloo")
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        // libtorch is built with NDEBUG, and some of its headers' classes have debug-only members
        // (RecordFunction's `inputs_valid_`): the shim must see the same layouts.
        .define("NDEBUG", None)
        // No debug information for the C++ (cargo asks for it in a test build): it makes the
        // shim's compile, the longest step of a fresh test build, a quarter slower.
        .debug(false)
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .compile("oomlab_shim");
    std::fs::write(&stamp, lib.to_str().unwrap_or_default()).expect("writing the shim's stamp in OUT_DIR");
}
