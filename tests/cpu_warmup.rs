//! The CPU keeps nothing for the process: after warming up every technique, the counting
//! allocator is back where it was. A test binary of its own, because the counter is the whole
//! process's: tests running beside it in one binary would allocate under its feet.
use oomlab::probe::{CpuProbe, MemoryProbe};
use oomlab::spec::{
    Amp, Checkpoint, Config, DataLocation, DataSpec, Dtype, ModelSpec, OptimizerSpec, Techniques,
    TrainingSpec,
};
use oomlab::train::warm_up;

fn config(amp: Amp, checkpoint: Checkpoint) -> Config {
    Config {
        model: ModelSpec { hidden: 64, depth: 5 },
        data: DataSpec::Synthetic { samples: 256, features: 16, classes: 3, seed: 1 },
        location: DataLocation::Host,
        training: TrainingSpec {
            optimizer: OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 },
            batch_size: 64,
            steps: 3,
            dtype: Dtype::Float32,
            seed: 0,
            techniques: Techniques { amp, checkpoint, accumulation: 3, ..Techniques::default() },
        },
    }
}

#[test]
fn the_cpu_keeps_no_workspace() {
    let probe = CpuProbe::new(None).unwrap();
    let before = probe.snapshot().unwrap().memory_allocated;
    let configs = [
        config(Amp::Off, Checkpoint::None),
        config(Amp::Bf16, Checkpoint::Sqrt),
        config(Amp::Fp16 { scaler: Default::default() }, Checkpoint::Every(2)),
    ];
    let w = warm_up(&configs, &probe).unwrap();
    assert_eq!(w.allocated, before);
    assert_eq!(w.reserved, w.allocated, "no cache on the CPU");
}
