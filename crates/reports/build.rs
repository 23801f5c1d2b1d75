//! Links this crate's test binaries against libtorch (`crates/torch/link_libtorch.rs`).
include!("../torch/link_libtorch.rs");

fn main() {
    link_libtorch();
}
