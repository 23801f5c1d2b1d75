//! `[parallel]`: the strategy, the world, how the batch is counted, DDP's knobs, and a world
//! size swept like any key.
use super::*;
use crate::spec::{DdpSpec, Parallel, Strategy};

fn with_parallel(table: &str) -> String {
    format!("{MINIMAL}\n[parallel]\n{table}")
}

#[test]
fn without_the_table_a_trial_is_one_process() {
    let spec = parse_at(MINIMAL).unwrap();
    assert_eq!(spec.base.parallel, Parallel::default());
    assert!(!spec.base.parallel.is_distributed());
}

#[test]
fn ddp_reads_its_knobs_in_pytorchs_units() {
    let spec = parse_at(&with_parallel(
        "strategy = \"ddp\"\nworld_size = 4\nbucket_cap_mb = 0.5\ngradient_as_bucket_view = true\nstatic_graph = true\n",
    ))
    .unwrap();
    let want = DdpSpec {
        bucket_cap_bytes: Some(512 * 1024),
        gradient_as_bucket_view: true,
        find_unused_parameters: false,
        static_graph: true,
    };
    assert_eq!(
        spec.base.parallel,
        Parallel { strategy: Strategy::Ddp(want), world_size: 4, global_batch: None }
    );
    assert_eq!(spec.base.training.batch_size, 32, "per rank unless said");
}

#[test]
fn a_global_batch_is_split_over_the_ranks_and_must_divide() {
    let spec = parse_at(&with_parallel("strategy = \"ddp\"\nworld_size = 4\nbatch = \"global\"\n")).unwrap();
    assert_eq!((spec.base.training.batch_size, spec.base.parallel.global_batch), (8, Some(32)));
    assert_eq!(spec.base.get(Field::BatchSize), Some(32.0), "read back as written");
    let e = err(&with_parallel("strategy = \"ddp\"\nworld_size = 3\nbatch = \"global\"\n"));
    assert!(
        e.starts_with("experiments/x.toml:15:14: training.batch_size = 32 with batch = \"global\" does not split evenly over world_size = 3 ranks"),
        "{e}"
    );
}

#[test]
fn the_world_size_sweeps_and_keeps_a_global_batch() {
    let text = with_parallel(
        "strategy = \"ddp\"\nbatch = \"global\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [1, 2, 4]\n",
    );
    let spec = parse_at(&text).unwrap();
    assert_eq!(spec.sweep.as_ref().unwrap().field, Field::WorldSize);
    let shares: Vec<(usize, usize)> = [1.0, 2.0, 4.0]
        .iter()
        .map(|&w| {
            let c = spec.base.with(Field::WorldSize, w).unwrap();
            (c.parallel.world_size, c.training.batch_size)
        })
        .collect();
    assert_eq!(shares, [(1, 32), (2, 16), (4, 8)]);
    let e = spec.base.with(Field::WorldSize, 5.0).unwrap_err();
    assert!(e.to_string().contains("does not split evenly over world_size = 5"), "{e}");
    // Per rank, the batch stays each rank's whatever the world.
    let spec = parse_at(&with_parallel(
        "strategy = \"ddp\"\n\n[sweep]\nfield = \"parallel.world_size\"\nvalues = [2, 8]\n",
    ))
    .unwrap();
    assert_eq!(spec.base.with(Field::WorldSize, 8.0).unwrap().training.batch_size, 32);
}

#[test]
fn mistakes_name_the_key_and_the_fix() {
    let e = err(&with_parallel("world_size = 2\n"));
    assert!(e.contains("parallel.strategy is missing"), "{e}");
    let e = err(&with_parallel("strategy = \"none\"\nworld_size = 2\n"));
    assert!(
        e.starts_with("experiments/x.toml:19:14: parallel.world_size = 2 needs a strategy")
            && e.contains("parallel.strategy = \"ddp\""),
        "{e}"
    );
    let e = err(&with_parallel("strategy = \"none\"\nbucket_cap_mb = 25\n"));
    assert!(e.starts_with("experiments/x.toml:19:17: parallel.bucket_cap_mb: is DistributedDataParallel's (strategy = \"ddp\" or \"zero\")"), "{e}");
    let e = err(&with_parallel("strategy = \"fsdp2\"\n"));
    assert!(e.contains("parallel.strategy") && e.contains("\"ddp\""), "{e}");
    let e = err(&with_parallel("strategy = \"ddp\"\nworld_size = 0\n"));
    assert!(e.contains("parallel.world_size") && e.contains(">= 1"), "{e}");
    let e = err(&with_parallel("strategy = \"ddp\"\nworld_size = 4096\n"));
    assert!(e.contains("parallel.world_size must be at most 1024"), "{e}");
    let e = err(&with_parallel("strategy = \"ddp\"\nbucket_cap_mb = 0\n"));
    assert!(e.contains("parallel.bucket_cap_mb"), "{e}");
    let e = err(&with_parallel("strategy = \"ddp\"\nbucket_view = true\n"));
    assert!(e.contains("bucket_view"), "{e}");
    let forward = MINIMAL.replace("batch_size = 32\n", "batch_size = 32\nmode = \"forward\"\n");
    let e = err(&format!("{forward}\n[parallel]\nstrategy = \"ddp\"\n"));
    assert!(e.contains("parallel.strategy") && e.contains("training.mode = \"train\""), "{e}");
}

#[test]
fn a_variant_may_take_another_strategy() {
    let text = format!(
        "{MINIMAL}\n[[variant]]\nname = \"one\"\n\n[[variant]]\nname = \"ddp\"\nparallel = {{ strategy = \"ddp\", world_size = 2 }}\n"
    );
    let spec = parse_at(&text).unwrap();
    assert!(!spec.variants[0].config.parallel.is_distributed());
    assert_eq!(spec.variants[1].config.parallel.world_size, 2);
}

#[test]
fn zero_is_ddp_with_a_sharded_optimizer_and_takes_ddps_knobs() {
    let spec = parse_at(&with_parallel("strategy = \"zero\"\nworld_size = 3\nbucket_cap_mb = 1\n")).unwrap();
    let want = DdpSpec { bucket_cap_bytes: Some(1 << 20), ..DdpSpec::default() };
    assert_eq!(spec.base.parallel.strategy, Strategy::Zero(want));
    assert_eq!(spec.base.parallel.ddp(), Some(want), "the model is wrapped in DDP");
    assert!(spec.base.parallel.shards_optimizer());
    assert!(!parse_at(&with_parallel("strategy = \"ddp\"\n")).unwrap().base.parallel.shards_optimizer());
    let e = err(&format!(
        "{}\n[parallel]\nstrategy = \"zero\"\n",
        MINIMAL.replace("batch_size = 32\n", "batch_size = 32\nmode = \"forward\"\n")
    ));
    assert!(e.contains("\"zero\" all-reduces gradients in the backward pass"), "{e}");
    let e = err(&with_parallel("strategy = \"zero3\"\n"));
    assert!(e.contains(r#"must be one of "none", "ddp", "zero", got "zero3""#), "{e}");
}
