//! One description of a trial's steps, which both the real trainer (`train::step`) and the
//! estimate's replay (`estimate::phases::net`) execute: the set-up, then for each step the
//! micro-batches (gather, forward, what the loop keeps of the loss, backward), the optimizer's
//! step and zero_grad; or, in the forward-only modes, one forward per step.
//!
//! The order of the actions, which phase each is measured in, and what each is told (the
//! micro-batch's index, autocast, checkpointing, the loss's divisor, the grad scaler) are
//! decided here, once; an executor gives each action its meaning on real tensors or on
//! symbolic ones. A technique is added by adding it here, and `match` then makes every executor
//! say what it does. Data-parallel training (`[parallel]`, DDP) is three of its actions: the
//! wrap after the model (rank 0's weights broadcast, the reducer's buckets made), a forward
//! that readies the reducer, and each rank's micro-batch taken from its shard; the all-reduce
//! itself runs inside the backward, through the reducer's hooks, as in PyTorch.
use crate::schema::Phase;
use crate::spec::{Amp, Checkpoint, Config, DdpSpec, History, Mode};

/// What a trial does next. Actions with a [`phase`](Action::phase) are measured as that phase;
/// the others happen between phases and allocate nothing a phase would not see.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// The data set, made where `data.location` puts it.
    Data,
    /// The model (seeded), the optimizer and, with fp16 autocast, the grad scaler.
    Model,
    /// `DistributedDataParallel(model)`, a phase of its own: rank 0's parameters broadcast to
    /// every rank, the reducer's buckets (the first step's) allocated.
    Wrap(DdpSpec),
    /// The micro-batch `index` gathered where the data set lives and moved to the device: rows
    /// `index * batch_size ..`, wrapping; in a world of ranks, each rank's rows of its shard
    /// (`DistributedSampler`'s: every `world_size`-th row from the rank's own).
    Gather { index: usize },
    /// The forward and the loss: with gradient tracking or under no_grad, under autocast
    /// (`Amp::Off`: none), plain or cut for checkpointing (the executor cuts its model's units);
    /// `reducer`: a DDP forward, which readies the reducer before (rebuilding its buckets at the
    /// second step) and tells it after that a backward follows.
    Forward { grad: bool, autocast: Amp, checkpoint: Checkpoint, reducer: bool },
    /// What the loop keeps of this loss (`losses.append(loss)` or `loss.item()`); an error here
    /// is the forward's.
    Keep(History),
    /// The loss divided by `divide_by` (the micro-batches; 1: not divided), multiplied by the
    /// grad scaler's scale when `scaled`, then backward. A checkpointed backward recomputes
    /// under `autocast`, as its forward ran.
    Backward { divide_by: usize, scaled: bool, autocast: Amp },
    /// The micro-batch's iteration ends: its batch goes, and its loss unless it is the step's
    /// `last`, which lives on through the optimizer's step and zero_grad.
    EndMicro { last: bool },
    /// `scaler.step(optimizer)` when `scaled`, else `optimizer.step()`. `shards`: the optimizer
    /// is ZeRO's, whose step updates this rank's shard of the parameters ([`crate::zero`]) and
    /// then broadcasts every rank's shard from its owner, parameter by parameter, rank by rank
    /// (none when the grad scaler skips the step).
    OptimizerStep { scaled: bool, shards: bool },
    /// `zero_grad()`: every gradient set to none.
    ZeroGrad,
    /// The step ends (step 0: the set-up), the last loss with it; `last`: the trial's last step,
    /// whose loss the trainer reads.
    EndStep { last: bool },
}

impl Action {
    /// The phase an action is measured in; `None` between phases.
    pub fn phase(&self) -> Option<Phase> {
        Some(match self {
            Action::Data => Phase::Data,
            Action::Model => Phase::Model,
            Action::Wrap(_) => Phase::Wrap,
            Action::Gather { .. } => Phase::ToDevice,
            Action::Forward { .. } => Phase::Forward,
            Action::Backward { .. } => Phase::Backward,
            Action::OptimizerStep { .. } => Phase::OptimizerStep,
            Action::ZeroGrad => Phase::ZeroGrad,
            Action::Keep(_) | Action::EndMicro { .. } | Action::EndStep { .. } => return None,
        })
    }
}

/// An action at its place in the trial: `step` 0 is the set-up; `micro` the micro-batch (0
/// outside the micro-batch loop).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event {
    pub step: usize,
    pub micro: usize,
    pub action: Action,
}

/// Who carries out a trial's actions.
pub trait Executor {
    type Error;
    fn execute(&mut self, event: Event) -> Result<(), Self::Error>;
}

/// Runs every action of `config`'s trial through `executor`, in order, stopping at the first
/// error.
pub fn drive<E: Executor>(config: &Config, executor: &mut E) -> Result<(), E::Error> {
    plan(config).try_for_each(|event| executor.execute(event))
}

/// The trial's actions, in order.
pub fn plan(config: &Config) -> impl Iterator<Item = Event> + use<> {
    let t = config.training.techniques;
    let steps = config.training.steps;
    let at = |step, micro, action| Event { step, micro, action };
    let ddp = config.parallel.ddp();
    let wrap = ddp.map(|d| at(0, 0, Action::Wrap(d)));
    let setup = [at(0, 0, Action::Data), at(0, 0, Action::Model)].into_iter().chain(wrap).chain([at(
        0,
        0,
        Action::EndStep { last: steps == 0 },
    )]);
    let reducer = ddp.is_some();
    let shards = config.parallel.shards_optimizer();
    let keep = (t.history != History::None).then_some(Action::Keep(t.history));
    let body = (1..=steps).flat_map(move |step| {
        let last = step == steps;
        let mut events = Vec::new();
        match t.mode {
            Mode::Train => {
                let n = t.accumulation.max(1);
                let scaled = matches!(t.amp, Amp::Fp16 { .. });
                for micro in 0..n {
                    events.push(at(step, micro, Action::Gather { index: (step - 1) * n + micro }));
                    let forward =
                        Action::Forward { grad: true, autocast: t.amp, checkpoint: t.checkpoint, reducer };
                    events.push(at(step, micro, forward));
                    events.extend(keep.map(|k| at(step, micro, k)));
                    let backward = Action::Backward { divide_by: n, scaled, autocast: t.amp };
                    events.push(at(step, micro, backward));
                    events.push(at(step, micro, Action::EndMicro { last: micro + 1 == n }));
                }
                events.push(at(step, 0, Action::OptimizerStep { scaled, shards }));
                events.push(at(step, 0, Action::ZeroGrad));
            }
            Mode::Forward | Mode::ForwardNoGrad => {
                events.push(at(step, 0, Action::Gather { index: step - 1 }));
                let grad = t.mode == Mode::Forward;
                // A forward-only step checkpoints nothing: there is no backward to recompute for.
                let forward =
                    Action::Forward { grad, autocast: t.amp, checkpoint: Checkpoint::None, reducer: false };
                events.push(at(step, 0, forward));
                events.extend(keep.map(|k| at(step, 0, k)));
                events.push(at(step, 0, Action::EndMicro { last: true }));
            }
        }
        events.push(at(step, 0, Action::EndStep { last }));
        events
    });
    setup.chain(body)
}

/// The measured phases of `config`'s trial, in order, as (step, micro-batch, phase): what a
/// recording at `--trace phases` holds, and what the estimate predicts.
pub fn phases(config: &Config) -> impl Iterator<Item = (usize, usize, Phase)> + use<> {
    plan(config).filter_map(|e| e.action.phase().map(|p| (e.step, e.micro, p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{ScalerSpec, Techniques};

    fn config(steps: usize, t: Techniques) -> Config {
        let sgd = crate::spec::OptimizerSpec::Sgd { lr: 0.1, momentum: 0.0, weight_decay: 0.0 };
        let mut c = crate::spec::examples::mlp(2, 16, 8, sgd);
        c.training.steps = steps;
        c.training.techniques = t;
        c
    }

    /// The micro-batch indices the events gather, in order.
    fn gathered(events: impl Iterator<Item = Event>) -> Vec<usize> {
        events
            .filter_map(|e| match e.action {
                Action::Gather { index } => Some(index),
                _ => None,
            })
            .collect()
    }

    fn names(c: &Config) -> Vec<String> {
        phases(c).map(|(s, m, p)| format!("{s}.{m} {}", p.as_str())).collect()
    }

    #[test]
    fn a_plain_step_is_the_five_phases_after_the_set_up() {
        let c = config(2, Techniques::default());
        let got = names(&c);
        assert_eq!(got[..2], ["0.0 data", "0.0 model"]);
        assert_eq!(
            got[2..7],
            ["1.0 to_device", "1.0 forward", "1.0 backward", "1.0 optimizer_step", "1.0 zero_grad"]
        );
        assert_eq!(got.len(), 2 + 2 * 5);
    }

    #[test]
    fn accumulation_repeats_the_micro_batch_and_divides_its_loss() {
        let t = Techniques {
            accumulation: 3,
            amp: Amp::Fp16 { scaler: ScalerSpec::default() },
            ..Techniques::default()
        };
        let c = config(2, t);
        let step2: Vec<Event> = plan(&c).filter(|e| e.step == 2).collect();
        assert_eq!(gathered(step2.iter().copied()), [3, 4, 5], "step 2's micro-batches follow step 1's");
        let backward = step2.iter().find(|e| matches!(e.action, Action::Backward { .. })).unwrap();
        assert_eq!(backward.action, Action::Backward { divide_by: 3, scaled: true, autocast: t.amp });
        let lasts: Vec<bool> = step2
            .iter()
            .filter_map(|e| match e.action {
                Action::EndMicro { last } => Some(last),
                _ => None,
            })
            .collect();
        assert_eq!(lasts, [false, false, true]);
        assert!(step2.iter().any(|e| e.action == Action::OptimizerStep { scaled: true, shards: false }));
        assert_eq!(step2.last().unwrap().action, Action::EndStep { last: true });
    }

    #[test]
    fn forward_modes_run_no_backward_and_checkpoint_nothing() {
        for (mode, grad) in [(Mode::Forward, true), (Mode::ForwardNoGrad, false)] {
            let t = Techniques { mode, checkpoint: Checkpoint::Sqrt, ..Techniques::default() };
            let c = config(3, t);
            let got = names(&c);
            assert_eq!(got.len(), 2 + 3 * 2, "{mode:?}: {got:?}");
            let forward = plan(&c).find(|e| matches!(e.action, Action::Forward { .. })).unwrap();
            assert_eq!(
                forward.action,
                Action::Forward { grad, autocast: Amp::Off, checkpoint: Checkpoint::None, reducer: false }
            );
            assert_eq!(gathered(plan(&c)), [0, 1, 2]);
        }
    }

    #[test]
    fn a_kept_loss_is_kept_right_after_its_forward() {
        let t = Techniques { history: History::LossTensor, accumulation: 2, ..Techniques::default() };
        let c = config(1, t);
        let events: Vec<Action> = plan(&c).map(|e| e.action).collect();
        let kept: Vec<usize> =
            events.iter().enumerate().filter(|(_, a)| matches!(a, Action::Keep(_))).map(|(i, _)| i).collect();
        assert_eq!(kept.len(), 2);
        for i in kept {
            assert!(matches!(events[i - 1], Action::Forward { .. }), "{events:?}");
        }
        assert!(!plan(&config(1, Techniques::default())).any(|e| matches!(e.action, Action::Keep(_))));
    }

    /// DDP wraps the model in the set-up, a phase of its own, and every training forward
    /// readies the reducer; the steps' phases are one process's.
    #[test]
    fn ddp_wraps_after_the_model_and_readies_the_reducer_in_each_forward() {
        let mut c = config(2, Techniques { accumulation: 2, ..Techniques::default() });
        let single = names(&c);
        let ddp = DdpSpec { gradient_as_bucket_view: true, ..DdpSpec::default() };
        c.parallel = crate::spec::Parallel {
            strategy: crate::spec::Strategy::Ddp(ddp),
            world_size: 4,
            global_batch: None,
        };
        let setup: Vec<Action> = plan(&c).filter(|e| e.step == 0).map(|e| e.action).collect();
        assert_eq!(setup, [Action::Data, Action::Model, Action::Wrap(ddp), Action::EndStep { last: false }]);
        assert_eq!(Action::Wrap(ddp).phase(), Some(Phase::Wrap));
        let forwards: Vec<bool> = plan(&c)
            .filter_map(|e| match e.action {
                Action::Forward { reducer, .. } => Some(reducer),
                _ => None,
            })
            .collect();
        assert_eq!(forwards, [true; 4]);
        let mut got = names(&c);
        assert_eq!(got.remove(2), "0.0 wrap");
        assert_eq!(got, single);
    }

    /// ZeRO is DDP's plan whose optimizer steps broadcast the shards; nothing else differs.
    #[test]
    fn zero_is_ddps_plan_with_a_sharded_optimizer_step() {
        let mut c = config(2, Techniques::default());
        let ddp = DdpSpec::default();
        c.parallel = crate::spec::Parallel {
            strategy: crate::spec::Strategy::Ddp(ddp),
            world_size: 2,
            global_batch: None,
        };
        let of_ddp: Vec<Action> = plan(&c).map(|e| e.action).collect();
        c.parallel.strategy = crate::spec::Strategy::Zero(ddp);
        let of_zero: Vec<Action> = plan(&c).map(|e| e.action).collect();
        assert_eq!(of_zero.len(), of_ddp.len());
        for (z, d) in of_zero.iter().zip(&of_ddp) {
            match (z, d) {
                (
                    Action::OptimizerStep { scaled: a, shards: true },
                    Action::OptimizerStep { scaled: b, shards: false },
                ) => {
                    assert_eq!(a, b)
                }
                _ => assert_eq!(z, d),
            }
        }
        assert_eq!(
            of_zero.iter().filter(|a| matches!(a, Action::OptimizerStep { shards: true, .. })).count(),
            2
        );
    }

    /// Driving stops at the first error: an executor's failure is the trial's end.
    #[test]
    fn drive_stops_at_the_first_error() {
        struct FailAt(usize, usize);
        impl Executor for FailAt {
            type Error = usize;
            fn execute(&mut self, _: Event) -> Result<(), usize> {
                self.0 += 1;
                if self.0 == self.1 {
                    Err(self.0)
                } else {
                    Ok(())
                }
            }
        }
        let c = config(2, Techniques::default());
        let mut e = FailAt(0, 4);
        assert_eq!(drive(&c, &mut e), Err(4));
        assert_eq!(e.0, 4);
        let mut all = FailAt(0, 0);
        assert_eq!(drive(&c, &mut all), Ok(()));
        assert_eq!(all.0, plan(&c).count());
    }
}
