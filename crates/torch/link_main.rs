//! The build script of every package whose binaries run libtorch and that builds nothing else
//! (train, estimate, results, run, reports, and `oomlab` itself): links its binaries against the
//! libtorch torch-sys found, with a RUNPATH to it (`link_libtorch.rs`). One file, named by each
//! package's `build` key, rather than one copy a package.
include!("link_libtorch.rs");

fn main() {
    link_libtorch();
}
