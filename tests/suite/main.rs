//! The integration tests, one binary: libtorch is linked once, and libtest runs the tests of
//! every file below at once, on every core. (The few whose claim needs a quiet machine are in
//! `tests/quiet`, a binary of their own, which cargo runs before or after this one, never beside
//! it.)
//!
//! One process, so one libtorch: its CPU allocator (oomlab's counting allocator, once a probe
//! installs it), its event log and its thread count are the process's. A test that runs libtorch
//! work here, in the test's own process (a trial through `oomlab::train` or `oomlab::run`, a
//! `CpuProbe`, `estimate::predict` and what it records or profiles on the CPU, tensors of its own),
//! holds [`common::in_process`] for all of it, so that no other such test allocates under its
//! counts; it gets libtorch's thread count back as it found it. A test that only starts
//! processes (the `oomlab` binary, Python) needs no lock: each process has its own libtorch.
//! Fixtures that take long to make (modules PyTorch exports) are made once per process
//! (`common::shared`), and each test that uses them copies what it needs into its own folder.
//!
//! Run them with `scripts/test` (which installs libtorch first), or `cargo test --test suite`.
mod common;

mod advise;
mod bench;
mod block_history;
mod chart_text;
mod claims;
mod cli;
mod compare_devices;
mod corpus;
mod cpu_budget_oom;
mod cpu_warmup;
mod ddp_engine;
mod ddp_run;
mod docs_commands;
mod estimate_accuracy;
mod estimate_cache;
mod estimate_kinds;
mod estimate_results;
mod fuzz_specs;
mod guided_finder;
mod h100_evidence;
mod h200_evidence;

mod huge_pages;
mod oom_recovery;
mod pytorch_memory;
mod pytorch_oracle;
mod readme_quickstart;
mod reference_compare;
mod replot;
mod resume;
mod run_safety;
mod shard;
mod slurm;
mod techniques;
mod torchscript;
mod torchscript_children;
mod torchscript_cuda;
mod torchscript_tensors;
mod torchscript_transformer;
mod trace_levels;
mod untrusted_results;
mod viz_cli;
mod workspace;
