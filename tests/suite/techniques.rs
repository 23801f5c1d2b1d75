//! Each training technique through the real trial runner on CPU, under oomlab's counting
//! allocator: it trains, and its memory moves the way the technique says.
use crate::common;
use oomlab::probe::CpuProbe;
use oomlab::schema::{Phase, PhaseRecord, Status, SummaryRow};
use oomlab::spec::{Amp, Checkpoint, Config, History, Mode, ScalerSpec};
use oomlab::train::run_trial;

/// A small MLP on synthetic data, as a spec would give it.
fn base(depth: usize, hidden: usize, batch: usize, steps: usize) -> Config {
    let text = format!(
        "[experiment]\nname = \"t\"\n[model]\nhidden = {hidden}\ndepth = {depth}\n\
         [data]\nsamples = 2048\nfeatures = 32\nclasses = 4\n\
         [training]\noptimizer = \"adam\"\nbatch_size = {batch}\nsteps = {steps}\n"
    );
    oomlab::spec::parse(&text, std::path::Path::new("t.toml")).expect("valid spec").base
}

fn run(config: &Config) -> (SummaryRow, Vec<PhaseRecord>) {
    let probe = CpuProbe::new(None).unwrap();
    let mut trace = Vec::new();
    let out = run_trial(config, &probe, 1, oomlab::schema::TraceLevel::Phases, &mut |r| {
        trace.push(r.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(out.after_allocated, out.baseline_allocated, "memory back at baseline");
    drop(probe);
    (out, trace)
}

fn after(trace: &[PhaseRecord], step: usize, phase: Phase) -> u64 {
    trace.iter().rfind(|t| t.step == step && t.phase == phase).unwrap().memory_allocated
}

#[test]
fn bf16_and_fp16_autocast_train_on_cpu() {
    let _in_process = common::in_process();
    let mut c = base(2, 64, 32, 3);
    for amp in [Amp::Bf16, Amp::Fp16 { scaler: ScalerSpec::default() }] {
        c.training.techniques.amp = amp;
        let (out, _) = run(&c);
        assert_eq!(out.status, Status::Ok, "{amp:?}: {}", out.message);
        assert!(out.final_loss.is_some_and(f64::is_finite));
        match amp {
            Amp::Fp16 { .. } => {
                assert_eq!(out.skipped_steps, Some(0));
                assert_eq!(out.final_scale, Some(65536.0));
            }
            _ => assert_eq!(out.skipped_steps, None),
        }
    }
}

#[test]
fn autocast_halves_activations_but_caches_a_copy_of_the_weights() {
    let _in_process = common::in_process();
    let kept = |c: &Config| {
        let (_, t) = run(c);
        after(&t, 1, Phase::Forward) - after(&t, 1, Phase::ToDevice)
    };
    // bf16 weight copies autocast caches while it is on: 32x512 + 3 x 512x512 + 512x4 weights.
    let cache = 2 * (32 * 512 + 3 * 512 * 512 + 512 * 4);
    for batch in [256, 2048] {
        let c = base(4, 512, batch, 1);
        let mut bf = c.clone();
        bf.training.techniques.amp = Amp::Bf16;
        let (fp32, bf16) = (kept(&c), kept(&bf));
        // One activation per hidden layer (ReLU's output, which the next Linear saves too).
        let acts = 4 * batch as u64 * 512 * 4;
        assert!(fp32 >= acts && fp32 < acts + acts / 50, "fp32 kept {fp32}, activations {acts}");
        let expected = acts / 2 + cache;
        let off = (bf16 as f64 - expected as f64).abs() / expected as f64;
        assert!(
            off < 0.02,
            "batch {batch}: bf16 kept {bf16}, expected half the activations + the cache {expected}"
        );
    }
}

#[test]
fn accumulation_lowers_the_peak_at_the_same_effective_batch() {
    let _in_process = common::in_process();
    let full = base(3, 512, 512, 2);
    let mut acc = full.clone();
    acc.training.batch_size = 64;
    acc.training.techniques.accumulation = 8;
    let (f, ft) = run(&full);
    let (a, at) = run(&acc);
    assert!(a.max_memory_allocated < f.max_memory_allocated);
    let micro = |t: &[PhaseRecord]| t.iter().filter(|r| r.step == 1 && r.phase == Phase::Forward).count();
    assert_eq!((micro(&ft), micro(&at)), (1, 8), "one forward per micro-batch");
}

#[test]
fn checkpointing_keeps_less_after_forward() {
    let _in_process = common::in_process();
    let plain = base(8, 512, 512, 1);
    let mut ck = plain.clone();
    ck.training.techniques.checkpoint = Checkpoint::Sqrt;
    let (_, pt) = run(&plain);
    let (c, ct) = run(&ck);
    assert_eq!(c.status, Status::Ok);
    let kept = |t: &[PhaseRecord]| after(t, 1, Phase::Forward) - after(t, 1, Phase::ToDevice);
    // Plain keeps one activation per hidden layer (ReLU's output, which the next Linear saves as
    // its input): 8 of 512 x 512 x 4 bytes. sqrt(8) -> segments of 3 keep 2 inner boundaries and
    // the head's input.
    let act = 512 * 512 * 4;
    assert!(kept(&pt) >= 8 * act, "plain kept {}", kept(&pt));
    assert!(kept(&ct) <= 3 * act + act / 10, "checkpointed kept {}", kept(&ct));
}

#[test]
fn no_grad_keeps_nothing_and_kept_loss_tensors_leak() {
    let _in_process = common::in_process();
    let mut c = base(4, 512, 256, 4);
    c.training.techniques.mode = Mode::ForwardNoGrad;
    let (o, t) = run(&c);
    assert_eq!(o.status, Status::Ok);
    let no_grad = after(&t, 1, Phase::Forward) - after(&t, 1, Phase::ToDevice);
    assert!(no_grad < 1024, "no_grad keeps only the loss, kept {no_grad}");

    c.training.techniques.mode = Mode::Forward;
    c.training.techniques.history = History::LossTensor;
    let (_, t) = run(&c);
    let ends: Vec<u64> = (1..=4).map(|s| after(&t, s, Phase::Forward)).collect();
    let act = 256 * 512 * 4;
    for w in ends.windows(2) {
        assert!(w[1] > w[0] + 4 * act, "each step's graph stays: {ends:?}");
    }

    c.training.techniques.history = History::LossValue;
    let (_, t) = run(&c);
    let ends: Vec<u64> = (1..=4).map(|s| after(&t, s, Phase::Forward)).collect();
    assert!(ends.windows(2).all(|w| w[1] == w[0]), "a kept number costs nothing: {ends:?}");
}
