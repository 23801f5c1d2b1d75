//! The model's tests: exact bytes for small trials (the plain step, Adam's and momentum's state,
//! where the forward and backward peak), each technique's effect (no_grad, a kept loss,
//! accumulation, checkpointing, autocast), every combination balancing its books, the budget
//! queries and the view gather; and `config`, the trial they build on (`sweeps`' tests use it too).
use super::*;
use crate::schema::Phase;
use crate::spec::{Checkpoint, DataSpec, History, Mode, ModelSpec, OptimizerSpec, Techniques};

/// The small MLP trial the tests build on ([`crate::spec::examples::mlp`]).
pub(crate) use crate::spec::examples::mlp as config;

/// A one-layer encoder (d_model 128, 4 heads of 32) over 16 sequences of 64 tokens, Adam.
pub(crate) fn transformer_config() -> Config {
    let mut c = config(1, 128, 16, OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 });
    c.model = ModelSpec::Transformer(crate::spec::TransformerSpec {
        d_model: 128,
        nhead: 4,
        num_layers: 1,
        dim_feedforward: 256,
        dropout: 0.0,
        norm_first: false,
    });
    c.data = DataSpec::Tokens { samples: 16, seq_len: 64, vocab: 100, classes: 4, seed: 0 };
    c
}

const SGD: OptimizerSpec = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.0, weight_decay: 0.0 };

/// The exact bytes `tests/suite/cpu_budget_oom.rs` measures for plain SGD, depth 6, width 256.
#[test]
fn plain_sgd_matches_the_measured_accounting() {
    let (d, h, k, n, b) = (32u64, 256u64, 4u64, 32u64, 4u64);
    let params = 4 * ((d * h + h) + 5 * (h * h + h) + (h * k + k));
    let p = predict(&config(6, 256, 4, SGD)).unwrap();
    let at = |phase, step| p.phase(step, 0, phase).unwrap().allocated_end;
    let data = n * d * 4 + n * 8;
    let batch = b * d * 4 + b * 8;
    assert_eq!(p.param_bytes, params);
    assert_eq!(at(Phase::Data, 0), data);
    assert_eq!(at(Phase::Model, 0), data + params);
    assert_eq!(at(Phase::ToDevice, 1), data + params + batch);
    assert_eq!(at(Phase::Backward, 1), data + 2 * params + batch + 4);
    // The micro-batch is gone once its backward is done; the loss lives on.
    assert_eq!(at(Phase::OptimizerStep, 1), data + 2 * params + 4);
    assert_eq!(at(Phase::ZeroGrad, 1), data + params + 4);
    assert_eq!(at(Phase::ToDevice, 2), data + params + batch, "step 1's batch and loss are gone");
    assert_eq!(p.phases.len(), 2 + 2 * 5);
}

#[test]
fn the_notes_name_the_optimizer_implementation_and_why() {
    let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
    let mut c = config(2, 64, 8, adam);
    let note = |c: &Config, options: &Options| {
        let p = predict_with(c, data_shape(&c.data).unwrap(), options).unwrap();
        p.notes.into_iter().find(|n| n.starts_with("optimizer:")).expect("an optimizer note")
    };
    let cuda = Options::cuda(GpuArch::Hopper, [&c]);
    assert_eq!(
        note(&c, &cuda),
        "optimizer: torch.optim's adam in its foreach implementation (PyTorch's default on CUDA)"
    );
    assert!(note(&c, &Options::default()).contains("for_loop implementation (PyTorch's default on the CPU)"));
    c.training.techniques.optimizer_impl = Some(OptimizerImpl::Fused);
    assert!(note(&c, &cuda).contains("fused implementation (as the spec names it)"));
}

#[test]
fn adam_state_is_twice_the_parameters_and_arrives_at_the_first_step() {
    let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
    let p = predict(&config(2, 64, 8, adam)).unwrap();
    assert_eq!(p.optimizer_state_bytes, 2 * p.param_bytes);
    let model = p.phase(0, 0, Phase::Model).unwrap();
    assert_eq!(model.end_by_category.optimizer_state, 0);
    let step = p.phase(1, 0, Phase::OptimizerStep).unwrap();
    // With a 4-byte `step` per parameter: PyTorch keeps the count in a float32 (on the CPU).
    assert_eq!(step.end_by_category.optimizer_state, 2 * p.param_bytes + 6 * 4);
    assert_eq!(step.end_by_category.grads, p.param_bytes);
    // The steady-state for-loop step: two temporaries of the largest parameter (64x64
    // floats) and a wrapped scalar with its float cast, over everything live and the
    // previous parameter's `denom` (the first bias's: 64 floats), which Python frees only
    // when the name is bound again.
    let step2 = p.phase(2, 0, Phase::OptimizerStep).unwrap();
    assert_eq!(step2.peak - step2.allocated_end, 2 * 64 * 64 * 4 + 12 + 64 * 4);
    assert_eq!(step2.by_category.transient, 2 * 64 * 64 * 4 + 12 + 64 * 4);
}

#[test]
fn momentum_keeps_one_buffer_and_zero_grad_frees_the_grads() {
    let momentum = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0 };
    let p = predict(&config(1, 64, 4, momentum)).unwrap();
    assert_eq!(p.optimizer_state_bytes, p.param_bytes);
    let zero = p.phase(1, 0, Phase::ZeroGrad).unwrap();
    assert_eq!(zero.end_by_category.grads, 0);
    assert_eq!(zero.end_by_category.optimizer_state, p.param_bytes);
}

/// Depth 1, width 64, batch 4: the backward peak is at layer 0's Linear, where the
/// 64x32 weight gradient and the bias's are made while the incoming [4, 64] gradient lives.
#[test]
fn backward_peak_is_at_the_first_layers_weight_gradient() {
    let p = predict(&config(1, 64, 4, SGD)).unwrap();
    let start = p.phase(1, 0, Phase::ToDevice).unwrap().allocated_end;
    let back = p.phase(1, 0, Phase::Backward).unwrap();
    let head_grads = 4 * (64 * 4 + 4);
    let incoming = 4 * 4 * 64;
    let w0 = 4 * 64 * 32;
    let b0 = 4 * 64;
    assert_eq!(back.peak - start, head_grads + incoming + w0 + b0 + 8, "+8: the loss and the seed gradient");
    assert_eq!(back.by_category.activations, 4, "every activation but the loss is freed by then");
}

#[test]
fn forward_keeps_one_activation_per_layer() {
    let p = predict(&config(3, 100, 8, SGD)).unwrap();
    let fwd = p.phase(1, 0, Phase::Forward).unwrap();
    assert_eq!(fwd.end_by_category.activations, 3 * 8 * 100 * 4 + 8 * 4 * 4 + 2 * 4);
    // Peak: at the last hidden layer, its Linear output and its ReLU output both live.
    assert_eq!(fwd.by_category.activations, 3 * 8 * 100 * 4);
    assert_eq!(fwd.by_category.transient, 8 * 100 * 4);
}

#[test]
fn no_grad_forward_keeps_nothing_but_the_loss() {
    let mut c = config(3, 100, 8, SGD);
    c.training.techniques.mode = Mode::ForwardNoGrad;
    let p = predict(&c).unwrap();
    let phases: Vec<Phase> = p.phases.iter().map(|p| p.phase).collect();
    assert_eq!(
        phases,
        [Phase::Data, Phase::Model, Phase::ToDevice, Phase::Forward, Phase::ToDevice, Phase::Forward]
    );
    let fwd = p.phase(1, 0, Phase::Forward).unwrap();
    assert_eq!(fwd.end_by_category.activations, 4);
    assert_eq!(fwd.by_category.transient, 2 * 8 * 100 * 4, "two activations at a time");
}

#[test]
fn a_kept_loss_tensor_keeps_its_graph_without_backward() {
    let mut c = config(2, 100, 8, SGD);
    c.training.techniques.mode = Mode::Forward;
    c.training.techniques.history = History::LossTensor;
    c.training.steps = 3;
    let p = predict(&c).unwrap();
    let graph = 2 * 8 * 100 * 4 + 8 * 4 * 4 + 2 * 4;
    let batch = 8 * 32 * 4 + 8 * 8;
    let last = p.phase(3, 0, Phase::ToDevice).unwrap();
    assert_eq!(last.end_by_category.history, 2 * (graph + batch));
    // With a backward, only the 4-byte losses stay.
    c.training.techniques.mode = Mode::Train;
    let p = predict(&c).unwrap();
    assert_eq!(p.phase(3, 0, Phase::ToDevice).unwrap().end_by_category.history, 2 * 4);
}

#[test]
fn accumulation_adds_later_micro_batch_gradients_in_place() {
    let mut c = config(2, 64, 4, SGD);
    c.training.techniques.accumulation = 3;
    let p = predict(&c).unwrap();
    let micros: Vec<(usize, usize, Phase)> = p.phases.iter().map(|p| (p.step, p.micro, p.phase)).collect();
    assert_eq!(
        micros[2..9],
        [
            (1, 0, Phase::ToDevice),
            (1, 0, Phase::Forward),
            (1, 0, Phase::Backward),
            (1, 1, Phase::ToDevice),
            (1, 1, Phase::Forward),
            (1, 1, Phase::Backward),
            (1, 2, Phase::ToDevice),
        ]
    );
    let b0 = p.phase(1, 0, Phase::Backward).unwrap();
    let b1 = p.phase(1, 1, Phase::Backward).unwrap();
    assert_eq!(b0.end_by_category.grads, p.param_bytes);
    assert_eq!(b1.end_by_category.grads, p.param_bytes, "no second copy");
    assert!(b1.peak > b0.peak, "the existing grads are there from the start");
    // The micro-batch is the batch: the same forward peak as without accumulation.
    let plain = predict(&config(2, 64, 4, SGD)).unwrap();
    assert_eq!(
        p.phase(1, 1, Phase::Forward).unwrap().by_category.activations,
        plain.phase(1, 0, Phase::Forward).unwrap().by_category.activations
    );
}

#[test]
fn mixed_precision_over_low_precision_parameters_is_refused() {
    let mut c = config(1, 8, 4, SGD);
    c.training.techniques.amp = Amp::Bf16;
    c.training.techniques.checkpoint = Checkpoint::Sqrt;
    assert!(predict(&c).is_ok());
    c.training.dtype = Dtype::Bfloat16;
    let err = predict(&c).unwrap_err().to_string();
    assert!(err.contains("mixed precision") && err.contains("float32"), "{err}");
}

/// sqrt(9) = 3 layers a segment, batch large enough for activations to set the peak: the
/// forward keeps 3 boundaries instead of 9 activations, and the backward recomputes one
/// segment at a time.
#[test]
fn checkpointing_keeps_the_boundaries_only() {
    let mut c = config(9, 100, 256, SGD);
    let a = 256 * 100 * 4;
    let head = 256 * 4 * 4 + 2 * 4;
    let plain = predict(&c).unwrap();
    c.training.techniques.checkpoint = Checkpoint::Sqrt;
    let ckpt = predict(&c).unwrap();
    let kept = |p: &Prediction| p.phase(1, 0, Phase::Forward).unwrap().end_by_category.activations;
    assert_eq!(kept(&plain), 9 * a + head);
    assert_eq!(kept(&ckpt), 3 * a + head);
    // At most: 2 boundaries not yet used, the segment's 3 recomputed activations.
    let back = ckpt.phase(1, 0, Phase::Backward).unwrap();
    assert!(back.by_category.activations <= 5 * a + head, "{:?}", back.by_category);
    assert!(ckpt.peak < plain.peak);
    // Checkpointing every layer keeps what the plain forward keeps.
    c.training.techniques.checkpoint = Checkpoint::Every(1);
    assert_eq!(kept(&predict(&c).unwrap()), kept(&plain));
}

/// checkpoint_sequential's cut of 9 layers in 3: segments 0..3 and 3..6 checkpointed, 6..9
/// plain. The forward keeps the 2 boundaries and the 3 plain layers' activations; one segment is
/// the plain step itself, and one a layer checkpoints all but the last.
#[test]
fn checkpoint_sequential_keeps_its_last_segment_plain() {
    let mut c = config(9, 100, 256, SGD);
    let a = 256 * 100 * 4;
    let head = 256 * 4 * 4 + 2 * 4;
    let plain = predict(&c).unwrap();
    let kept = |p: &Prediction| p.phase(1, 0, Phase::Forward).unwrap().end_by_category.activations;
    c.training.techniques.checkpoint = Checkpoint::Sequential(3);
    let seq = predict(&c).unwrap();
    assert_eq!(kept(&seq), (2 + 3) * a + head);
    assert!(seq.peak < plain.peak);
    // The tail's backward holds its 3 activations over the 2 boundaries; a recompute, the
    // boundaries not yet used and a segment's 3.
    let back = seq.phase(1, 0, Phase::Backward).unwrap();
    assert!(back.by_category.activations <= 5 * a + head, "{:?}", back.by_category);
    c.training.techniques.checkpoint = Checkpoint::Sequential(9);
    assert_eq!(kept(&predict(&c).unwrap()), kept(&plain));
    c.training.techniques.checkpoint = Checkpoint::Sequential(1);
    let one = predict(&c).unwrap();
    assert_eq!(one.phases, plain.phases, "one segment is the plain step");
    assert_eq!(one.peak, plain.peak);
}

/// Autocast halves what the forward keeps and adds its copies: after the forward, the
/// casts of every weight but the first (saved for the input gradients) and of the batch
/// (saved for layer 0's weight gradient); the biases' and the first weight's casts went with
/// the cache. Parameters, gradients and Adam's state stay fp32.
#[test]
fn autocast_keeps_half_width_activations_and_the_saved_casts() {
    let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
    let mut c = config(3, 100, 256, adam);
    let plain = predict(&c).unwrap();
    c.training.techniques.amp = Amp::Bf16;
    let bf16 = predict(&c).unwrap();
    let fwd = |p: &Prediction| p.phase(1, 0, Phase::Forward).unwrap().end_by_category;
    let relu = 3 * 256 * 100;
    assert_eq!(fwd(&plain).activations - fwd(&bf16).activations, relu * 2, "4 bytes -> 2 per element");
    let weights_after_first = 2 * (100 * 100 + 100 * 100 + 4 * 100);
    assert_eq!(fwd(&bf16).amp_copies, weights_after_first + 2 * 256 * 32);
    assert_eq!(bf16.param_bytes, plain.param_bytes);
    let step = |p: &Prediction| p.phase(1, 0, Phase::OptimizerStep).unwrap().end_by_category;
    assert_eq!(step(&bf16).grads, bf16.param_bytes, "fp32 grads");
    assert_eq!(step(&bf16).optimizer_state, 2 * bf16.param_bytes + 8 * 4, "and 8 step counters");
    assert_eq!(step(&bf16).amp_copies, 0, "every cast gone by the optimizer step");
    // fp16 adds the grad scaler's scale and growth tracker, 4 bytes each, made at its first
    // scale() (step 1's backward), as PyTorch's GradScaler makes them.
    c.training.techniques.amp = Amp::Fp16 { scaler: Default::default() };
    let fp16 = predict(&c).unwrap();
    let state_after = |step, phase| fp16.phase(step, 0, phase).unwrap().end_by_category.optimizer_state;
    assert_eq!((state_after(0, Phase::Model), state_after(1, Phase::Forward)), (0, 0));
    assert_eq!(state_after(1, Phase::Backward), 8);
    let (a, b) = (fwd(&fp16), fwd(&bf16));
    assert_eq!((a.activations, a.amp_copies), (b.activations, b.amp_copies));
}

/// Every combination of techniques replays without freeing a byte it never allocated (the
/// ledger's debug assertion), and each phase ends with nothing in flight: no transients, no
/// autocast copies but those a forward's graph saved, no gradients after zero_grad.
#[test]
fn every_combination_balances_its_books() {
    let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
    let amps = [Amp::Off, Amp::Bf16, Amp::Fp16 { scaler: Default::default() }];
    let checkpoints = [
        Checkpoint::None,
        Checkpoint::Every(1),
        Checkpoint::Every(2),
        Checkpoint::Sqrt,
        Checkpoint::Sequential(2),
        Checkpoint::Sequential(3),
    ];
    let modes = [(Mode::Train, 1), (Mode::Train, 3), (Mode::Forward, 1), (Mode::ForwardNoGrad, 1)];
    let mut n = 0;
    for depth in 0..4 {
        for amp in amps {
            for checkpoint in checkpoints {
                for (mode, accumulation) in modes {
                    for history in [History::None, History::LossTensor, History::LossValue] {
                        let mut c = config(depth, 16, 4, adam);
                        c.training.steps = 3;
                        c.training.techniques =
                            Techniques { amp, checkpoint, accumulation, mode, history, optimizer_impl: None };
                        let p = predict(&c).unwrap();
                        // Between steps nothing of a step's graph is left but what the
                        // history keeps, and that grows by the same bytes every step.
                        let at_start: Vec<_> = (1..=3)
                            .map(|step| p.phase(step, 0, Phase::ToDevice).unwrap().end_by_category)
                            .collect();
                        for (i, cats) in at_start.iter().enumerate() {
                            let what = format!("{:?} at step {}", c.training.techniques, i + 1);
                            assert_eq!((cats.activations, cats.amp_copies, cats.grads), (0, 0, 0), "{what}");
                        }
                        let growth = |i: usize| at_start[i + 1].history - at_start[i].history;
                        assert_eq!(growth(0), growth(1), "{:?}", c.training.techniques);
                        for ph in &p.phases {
                            let end = ph.end_by_category;
                            let what = format!("{:?} at {} {:?}", c.training.techniques, ph.step, ph.phase);
                            assert_eq!(end.transient, 0, "{what}");
                            // The casts the graph saved live from forward to backward (or
                            // on, with a kept loss, in its history).
                            if ph.phase != Phase::Forward {
                                assert_eq!(end.amp_copies, 0, "{what}");
                            }
                            if ph.phase == Phase::ZeroGrad {
                                assert_eq!(end.grads, 0, "{what}");
                            }
                        }
                        n += 1;
                    }
                }
            }
        }
    }
    assert_eq!(n, 4 * 3 * 6 * 4 * 3);
}

/// The CUDA replay of every combination keeps its blocks straight: each cast autocast cached
/// is freed as the block it was (a sum of them once took the wrong blocks, and tripped the
/// ledger's check), and nothing but the history outlives a step.
#[test]
fn every_combination_replays_on_cuda() {
    let adam = OptimizerSpec::Adam { lr: 0.01, weight_decay: 0.0 };
    let amps = [Amp::Off, Amp::Bf16, Amp::Fp16 { scaler: Default::default() }];
    let checkpoints = [Checkpoint::None, Checkpoint::Every(1), Checkpoint::Sqrt, Checkpoint::Sequential(2)];
    let modes = [(Mode::Train, 1), (Mode::Train, 2), (Mode::ForwardNoGrad, 1)];
    for (depth, hidden) in [(1, 2000), (3, 100), (4, 16)] {
        for amp in amps {
            for checkpoint in checkpoints {
                for (mode, accumulation) in modes {
                    let mut c = config(depth, hidden, 4, adam);
                    c.training.techniques =
                        Techniques { amp, checkpoint, accumulation, mode, ..Techniques::default() };
                    let options = Options::cuda(GpuArch::Hopper, [&c]);
                    let p = predict_with(&c, data_shape(&c.data).unwrap(), &options).unwrap();
                    for ph in p.phases.iter().filter(|ph| ph.phase != Phase::Forward) {
                        let what = format!(
                            "{depth} x {hidden} {:?} at {} {:?}",
                            c.training.techniques, ph.step, ph.phase
                        );
                        assert_eq!(
                            (ph.end_by_category.amp_copies, ph.end_by_category.transient),
                            (0, 0),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn budget_helpers() {
    let p = predict(&config(1, 64, 4, SGD)).unwrap();
    assert!(p.fits(p.peak) && !p.fits(p.peak - 1));
    assert_eq!(p.first_over(p.peak - 1).map(|f| f.phase), Some(p.peak_phase().phase));
    assert_eq!(p.peak_phase().phase, Phase::Backward);
    assert_eq!(relative_error(102, 100), 0.02);
}
