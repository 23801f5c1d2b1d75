//! The CPU keeps nothing for the process: after warming up every technique, the counting
//! allocator is back where it was. It holds the suite's lock for libtorch work in this process
//! (`common::in_process`), because the counter is the whole process's: a test allocating beside
//! it would allocate under its feet.
use crate::common;
use oomlab::probe::{CpuProbe, MemoryProbe};
use oomlab::spec::{Amp, Checkpoint, Config};
use oomlab::train::warm_up;

/// A 5 x 64 Adam MLP with accumulation 3, as a spec writes it, with `amp` and `checkpoint`.
fn config(amp: Amp, checkpoint: Checkpoint) -> Config {
    let text = "[experiment]\nname = \"w\"\n[model]\nhidden = 64\ndepth = 5\n\
                [data]\nsamples = 256\nfeatures = 16\nclasses = 3\nseed = 1\n\
                [training]\noptimizer = \"adam\"\nlr = 0.01\nbatch_size = 64\nsteps = 3\naccumulation = 3\n";
    let mut c = oomlab::spec::parse(text, std::path::Path::new("w.toml")).expect("valid spec").base;
    (c.training.techniques.amp, c.training.techniques.checkpoint) = (amp, checkpoint);
    c
}

#[test]
fn the_cpu_keeps_no_workspace() {
    let _in_process = common::in_process();
    let probe = CpuProbe::new(None).unwrap();
    let before = probe.snapshot().unwrap().memory_allocated;
    let configs = [
        config(Amp::Off, Checkpoint::None),
        config(Amp::Bf16, Checkpoint::Sqrt),
        config(Amp::Fp16 { scaler: Default::default() }, Checkpoint::Every(2)),
    ];
    let w = warm_up(&configs, &probe, oomlab::schema::TraceLevel::Phases).unwrap();
    assert_eq!(w.allocated, before);
    assert_eq!(w.reserved, w.allocated, "no cache on the CPU");
}
