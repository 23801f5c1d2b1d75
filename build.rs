//! Links the `oomlab` binary and this package's tests against the libtorch torch-sys found, with
//! a RUNPATH to it (`crates/torch/link_libtorch.rs`).
include!("crates/torch/link_libtorch.rs");

fn main() {
    link_libtorch();
}
