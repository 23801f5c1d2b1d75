//! `advise`'s options on more GPUs: the spec's training spread over 2, 4 and 8 GPUs with
//! DistributedDataParallel or ZeRO stage 1 (`[parallel]`'s strategies), its batch split evenly
//! over them (the same training, as gradient accumulation keeps it), each GPU's peak predicted
//! by the estimate of a rank (ZeRO's: the rank with the largest shard), and what each step
//! communicates.
//!
//! They stand beside the one-device options, not among them: a GPU count is hardware to find,
//! not a knob, and their step times (the collectives over NCCL) are not calibrated here.
use serde::Serialize;

use super::evaluate::{Evaluator, Verdict};
use crate::spec::{Config, DdpSpec, Mode, Parallel, Strategy};

/// The GPU counts offered.
pub const WORLDS: [usize; 3] = [2, 4, 8];

/// One option: a strategy over `gpus` GPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuOption {
    /// `ddp` or `zero` (`parallel.strategy`).
    pub strategy: &'static str,
    pub gpus: usize,
    /// Each GPU's share of the batch (`training.batch_size / gpus`).
    pub batch_per_gpu: usize,
    pub verdict: Verdict,
    /// The peak the budget caps on each GPU (allocated on the CPU, reserved on CUDA), of the
    /// rank the estimate predicts.
    pub peak: u64,
    pub headroom: i64,
    /// Bytes each GPU sends a step, as ring collectives move them: the gradients' all-reduce
    /// (`2 (N - 1) / N` of them, once per micro-batch's backward), and under ZeRO the broadcast of
    /// the updated parameters (each GPU sends its shard to the others; on average `(N - 1) / N`
    /// of the parameters reach each GPU).
    pub communicated: u64,
    /// Why the estimate gave none.
    pub error: Option<String>,
}

impl GpuOption {
    /// The strategy as a table names it: "DDP", "ZeRO stage 1".
    pub fn strategy_words(&self) -> &'static str {
        match self.strategy {
            "zero" => "ZeRO stage 1",
            _ => "DDP",
        }
    }
}

/// The many-GPU options of an advice, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpus {
    pub options: Vec<GpuOption>,
    pub none_because: Option<String>,
}

impl Gpus {
    pub fn of(base: &Config, eval: &Evaluator) -> Gpus {
        match options(base, eval) {
            Ok(options) => Gpus { options, none_because: None },
            Err(why) => Gpus { options: Vec::new(), none_because: Some(why) },
        }
    }
}

/// The options for `base` (one process as written, a training), each GPU count whose count
/// divides the batch; why none is offered, where none is.
pub fn options(base: &Config, eval: &Evaluator) -> Result<Vec<GpuOption>, String> {
    if base.parallel.is_distributed() {
        return Err(format!(
            "the spec already trains as {} ranks of {}: its options are per rank",
            base.parallel.world_size,
            base.parallel.strategy.name()
        ));
    }
    if base.training.techniques.mode != Mode::Train {
        return Err("a forward-only spec has no gradients to spread over GPUs".into());
    }
    let batch = base.training.batch_size;
    let worlds: Vec<usize> = WORLDS.into_iter().filter(|&n| batch.is_multiple_of(n)).collect();
    if worlds.is_empty() {
        return Err(format!(
            "its batch of {batch} splits evenly over none of {WORLDS:?} GPUs (a GPU's share must be whole)"
        ));
    }
    let mut out = Vec::new();
    for n in worlds {
        for strategy in [Strategy::Ddp(DdpSpec::default()), Strategy::Zero(DdpSpec::default())] {
            let mut config = base.clone();
            config.parallel = Parallel { strategy, world_size: n, global_batch: Some(batch) };
            config.training.batch_size = batch / n;
            out.push(evaluate(&config, eval));
        }
    }
    Ok(out)
}

fn evaluate(config: &Config, eval: &Evaluator) -> GpuOption {
    let n = config.parallel.world_size;
    let mut o = GpuOption {
        strategy: config.parallel.strategy.name(),
        gpus: n,
        batch_per_gpu: config.training.batch_size,
        verdict: Verdict::Unknown,
        peak: 0,
        headroom: 0,
        communicated: 0,
        error: None,
    };
    if let Err(e) = config.check() {
        o.error = Some(e.to_string());
        return o;
    }
    match eval.predict(config) {
        Ok(p) => {
            o.peak = eval.capped_peak(&p);
            o.headroom = i64::try_from(eval.budget as i128 - o.peak as i128).unwrap_or(i64::MIN);
            o.verdict = eval.verdict(config, &p);
            o.communicated = communicated(
                p.param_bytes,
                n,
                config.training.techniques.accumulation,
                config.parallel.shards_optimizer(),
            );
        }
        Err(e) => o.error = Some(format!("{e:#}")),
    }
    o
}

/// Bytes a GPU sends a step (see [`GpuOption::communicated`]): `params` bytes of parameters
/// (and as many of gradients), `n` GPUs, `micro` backwards a step.
pub fn communicated(params: u64, n: usize, micro: usize, zero: bool) -> u64 {
    let (n, params) = (n as u128, params as u128);
    let all_reduce = 2 * (n - 1) * params / n * micro as u128;
    let broadcast = if zero { (n - 1) * params / n } else { 0 };
    u64::try_from(all_reduce + broadcast).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{GpuArch, Target};

    fn base(batch: usize) -> Config {
        crate::spec::examples::mlp(
            3,
            64,
            batch,
            crate::spec::OptimizerSpec::Adam { lr: 1e-3, weight_decay: 0.0 },
        )
    }

    fn evaluator(c: &Config, budget: u64) -> Evaluator {
        let shape = crate::estimate::data_shape(&c.data).unwrap();
        Evaluator { target: Target::Cpu, arch: GpuArch::default(), budget, shape, threads: 1 }
    }

    #[test]
    fn a_ring_all_reduce_sends_twice_the_gradients_share_and_zero_adds_the_shards() {
        assert_eq!(communicated(800, 2, 1, false), 800);
        assert_eq!(communicated(800, 4, 1, false), 1200);
        assert_eq!(communicated(800, 4, 3, false), 3600, "one all-reduce a backward");
        assert_eq!(communicated(800, 4, 1, true), 1200 + 600);
    }

    /// Every GPU count that divides the batch, DDP and ZeRO each; ZeRO's GPU holds less than
    /// DDP's (Adam's state divided), DDP's no less than one GPU at its share of the batch.
    #[test]
    fn each_count_that_divides_the_batch_is_offered_with_each_strategy() {
        let c = base(12);
        let eval = evaluator(&c, 1 << 30);
        let got = options(&c, &eval).unwrap();
        let offered: Vec<(usize, &str)> = got.iter().map(|o| (o.gpus, o.strategy)).collect();
        assert_eq!(
            offered,
            [(2, "ddp"), (2, "zero"), (4, "ddp"), (4, "zero")],
            "12 splits over 2 and 4, not 8"
        );
        for pair in got.chunks(2) {
            let (ddp, zero) = (&pair[0], &pair[1]);
            assert_eq!((ddp.error.as_deref(), zero.error.as_deref()), (None, None));
            assert!(zero.peak < ddp.peak, "{pair:?}");
            assert_eq!(ddp.verdict, Verdict::Fits);
            assert_eq!(ddp.batch_per_gpu * ddp.gpus, 12);
        }
        let mut alone = c.clone();
        alone.training.batch_size = 6;
        let one = eval.capped_peak(&eval.predict(&alone).unwrap());
        assert!(got[0].peak > one, "DDP adds its buckets to one GPU's share: {} vs {one}", got[0].peak);
        let tight = evaluator(&c, got[1].peak);
        let verdicts: Vec<Verdict> = options(&c, &tight).unwrap().iter().map(|o| o.verdict).collect();
        assert_eq!(verdicts[..2], [Verdict::Oom, Verdict::Fits], "a budget of ZeRO's peak: DDP's is over it");
    }

    #[test]
    fn none_are_offered_where_they_cannot_be_said() {
        let c = base(7);
        let e = options(&c, &evaluator(&c, 1 << 30)).unwrap_err();
        assert!(e.contains("splits evenly over none of [2, 4, 8]"), "{e}");
        let mut ranks = base(8);
        ranks.parallel =
            Parallel { strategy: Strategy::Ddp(DdpSpec::default()), world_size: 2, global_batch: None };
        let e = options(&ranks, &evaluator(&ranks, 1 << 30)).unwrap_err();
        assert!(e.contains("already trains as 2 ranks of ddp"), "{e}");
    }
}
