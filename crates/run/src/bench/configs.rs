//! What the bench times: the configurations, each written as a spec (so it is validated like any
//! experiment, and the Python side gets the same validated config), and how many steps and
//! rounds, per device.
//!
//! The sizes follow the issue: 3 x 256 at batch 32 with Adam in each of `torch.optim`'s
//! implementations (the small model, where Python's per-op overhead shows), the lesson's
//! 8 x 5000 at batch 32 with the implementation PyTorch picks, and that model under mixed
//! precision and under sqrt checkpointing. Data: the lesson's small tabular set (1024 rows of 20
//! features, 2 classes), in host memory (`data.location = "host"`, the DataLoader's way): each
//! step's batch is gathered on the host and moved to the device, on both sides.
//!
//! Five rounds: the processes of one contender differ more than the steps within one (see
//! `stats`), so what a ratio rests on is the number of processes as much as of steps.
//!
//! On the CPU the plan is cut to fit about 15 minutes on 2 cores: the lesson's model takes about
//! 1.5 s a step there, so it runs a single warm-up step and 6 timed steps a process (30 over the
//! rounds, the least the issue asks for); its AMP and checkpointing variants run at
//! 8 x 1024 instead (bf16 autocast on a CPU without bf16 instructions takes 80-110 s for one
//! 8 x 5000 backward on the machine this was written on), and AMP is bf16, since x86 CPUs have no
//! fp16 matrix-product kernels worth timing and a grad scaler only exists for fp16.
use anyhow::{Context, Result};

use super::Contender;
use crate::spec::{self, Config};

/// What a configuration stands for, which decides its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// 3 x 256: Python's overhead dominates.
    Small,
    /// The lesson's 8 x 5000 with PyTorch's default optimizer implementation.
    Lesson,
    /// Mixed precision (fp16 + grad scaler on a GPU, bf16 on the CPU).
    Amp,
    /// sqrt(depth) checkpointing.
    Checkpoint,
}

/// One configuration of the bench.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// `[a-z0-9_-]+`: a table's heading, a CSV key and a chart label ("3x256-fused").
    pub name: String,
    pub role: Role,
    /// In words: "3 x 256, batch 32, Adam (fused)".
    pub title: String,
    /// The spec's TOML, what the oomlab worker parses.
    pub spec: String,
    /// The validated config; serialised for the Python worker.
    pub config: Config,
    /// Steps each process trains before the timed ones (the first makes Adam's state).
    pub warmup: usize,
    /// Timed steps each process trains; pooled over the rounds.
    pub steps: usize,
}

/// The whole bench: configurations, contenders and rounds.
#[derive(Debug, Clone)]
pub struct Plan {
    pub configs: Vec<BenchConfig>,
    pub contenders: Vec<Contender>,
    /// Each round launches every contender of every configuration once, in a rotated order.
    pub rounds: usize,
    pub cuda: bool,
    pub quick: bool,
}

impl Plan {
    /// The plan for a device: `quick` shrinks every size (for tests: tiny models, 1 warm-up and 3
    /// timed steps, one round).
    pub fn new(cuda: bool, quick: bool) -> Result<Plan> {
        let mut configs = Vec::new();
        let (small, small_rows) = if quick { ((3, 16), 64) } else { ((3, 256), 1024) };
        for implementation in ["for_loop", "foreach", "fused"] {
            let (depth, hidden) = small;
            configs.push(BenchConfig::new(
                &format!("{depth}x{hidden}-{implementation}"),
                Role::Small,
                &format!("{depth} x {hidden}, batch 32, Adam ({})", implementation.replace('_', "-")),
                Shape { depth, hidden, samples: small_rows },
                &[("optimizer_impl", implementation)],
                Steps::small(cuda, quick),
            )?);
        }
        let lesson = if quick { Shape { depth: 4, hidden: 32, samples: 64 } } else { Shape::lesson() };
        // The lesson's variants: the model itself on a GPU; on the CPU, 8 x 1024 (see the module).
        let variant = match (quick, cuda) {
            (true, _) => lesson,
            (false, true) => Shape::lesson(),
            (false, false) => Shape { depth: 8, hidden: 1024, samples: 1024 },
        };
        let default_impl = if cuda { "foreach" } else { "for-loop" };
        configs.push(BenchConfig::new(
            &lesson.name(""),
            Role::Lesson,
            &format!("{}, batch 32, Adam (PyTorch's default: {default_impl})", lesson.words()),
            lesson,
            &[],
            Steps::lesson(cuda, quick),
        )?);
        let amp = if cuda { "fp16" } else { "bf16" };
        let amp_words = if cuda { "fp16 autocast + grad scaler" } else { "bf16 autocast" };
        configs.push(BenchConfig::new(
            &variant.name(amp),
            Role::Amp,
            &format!("{}, batch 32, Adam, {amp_words}", variant.words()),
            variant,
            &[("amp", amp)],
            Steps::variant(cuda, quick, true),
        )?);
        configs.push(BenchConfig::new(
            &variant.name("sqrt"),
            Role::Checkpoint,
            &format!("{}, batch 32, Adam, sqrt checkpointing", variant.words()),
            variant,
            &[("checkpoint", "sqrt")],
            Steps::variant(cuda, quick, false),
        )?);
        let rounds = if quick { 1 } else { 5 };
        Ok(Plan { configs, contenders: Contender::ALL.to_vec(), rounds, cuda, quick })
    }

    /// Keeps only the configurations named in `names` (all when empty); an unknown name is an
    /// error that lists the known ones.
    pub fn only(mut self, names: &[String]) -> Result<Plan> {
        if names.is_empty() {
            if self.quick {
                // A smoke test in about a minute: every role once (the small model in one
                // implementation); the other two are still there by name (`--config`).
                self.configs.retain(|c| c.role != Role::Small || c.name.ends_with("for_loop"));
            }
            return Ok(self);
        }
        let known: Vec<String> = self.configs.iter().map(|c| c.name.clone()).collect();
        for n in names {
            anyhow::ensure!(
                known.contains(n),
                "no configuration {n:?} in the bench; there are: {}",
                known.join(", ")
            );
        }
        self.configs.retain(|c| names.contains(&c.name));
        Ok(self)
    }

    /// Timed steps each contender gets for `config`, pooled over the rounds.
    pub fn pooled_steps(&self, config: &BenchConfig) -> usize {
        config.steps * self.rounds
    }
}

/// A model and its data's rows.
#[derive(Debug, Clone, Copy)]
struct Shape {
    depth: usize,
    hidden: usize,
    samples: usize,
}

impl Shape {
    /// The lesson's model: 8 hidden layers of 5000 (175 M parameters, 2.8 GB with Adam's state and the gradients) on its 1024-row data set.
    fn lesson() -> Shape {
        Shape { depth: 8, hidden: 5000, samples: 1024 }
    }

    fn name(self, suffix: &str) -> String {
        let base = format!("{}x{}", self.depth, self.hidden);
        if suffix.is_empty() {
            base
        } else {
            format!("{base}-{suffix}")
        }
    }

    fn words(self) -> String {
        format!("{} x {}", self.depth, self.hidden)
    }
}

/// Warm-up and timed steps per process.
#[derive(Debug, Clone, Copy)]
struct Steps {
    warmup: usize,
    timed: usize,
}

impl Steps {
    const QUICK: Steps = Steps { warmup: 1, timed: 3 };

    /// Milliseconds a step: many steps cost little, and the first few warm the allocator's cache.
    fn small(_cuda: bool, quick: bool) -> Steps {
        if quick {
            Steps::QUICK
        } else {
            Steps { warmup: 20, timed: 50 }
        }
    }

    /// On the CPU, about 1.5 s a step (2 cores): one warm-up step (Adam's state) and 6 timed
    /// steps a process, 30 pooled over 5 rounds: its 30 processes take about 8 minutes.
    fn lesson(cuda: bool, quick: bool) -> Steps {
        match (quick, cuda) {
            (true, _) => Steps::QUICK,
            (false, true) => Steps { warmup: 5, timed: 20 },
            (false, false) => Steps { warmup: 1, timed: 6 },
        }
    }

    /// On the CPU, bf16 autocast is emulated (about 0.7 s a step at 8 x 1024 on 2 cores);
    /// checkpointing costs a forward more than plain fp32 (about 60 ms).
    fn variant(cuda: bool, quick: bool, amp: bool) -> Steps {
        match (quick, cuda, amp) {
            (true, _, _) => Steps::QUICK,
            (false, true, _) => Steps { warmup: 5, timed: 20 },
            (false, false, true) => Steps { warmup: 2, timed: 6 },
            (false, false, false) => Steps { warmup: 3, timed: 10 },
        }
    }
}

impl BenchConfig {
    fn new(
        name: &str,
        role: Role,
        title: &str,
        shape: Shape,
        training: &[(&str, &str)],
        steps: Steps,
    ) -> Result<BenchConfig> {
        let spec = spec_text(name, shape, training);
        let parsed = spec::parse(&spec, std::path::Path::new(&format!("bench-{name}.toml")))
            .with_context(|| format!("the bench's configuration {name}"))?;
        Ok(BenchConfig {
            name: name.to_string(),
            role,
            title: title.to_string(),
            spec,
            config: parsed.base,
            warmup: steps.warmup,
            steps: steps.timed,
        })
    }

    /// The parameter count both sides must report: each Linear's weight and bias.
    pub fn param_count(&self) -> u64 {
        let (f, c) = match self.config.data {
            spec::DataSpec::Synthetic { features, classes, .. } => (features, classes),
            _ => return 0,
        };
        let hidden = self.config.model.mlp_widths().unwrap_or_default();
        let widths: Vec<usize> = std::iter::once(f).chain(hidden).chain([c]).collect();
        widths.windows(2).map(|w| (w[0] * w[1] + w[1]) as u64).sum()
    }
}

/// The spec of a configuration: the lesson's data, Adam at lr 1e-3, batch 32, fp32; `training`
/// adds keys to `[training]`. `steps` is the worker's to set (warm-up + timed).
fn spec_text(name: &str, shape: Shape, training: &[(&str, &str)]) -> String {
    let extra: String = training.iter().map(|(k, v)| format!("{k} = \"{v}\"\n")).collect();
    format!(
        "[experiment]\nname = \"bench-{name}\"\n\n[model]\nhidden = {}\ndepth = {}\n\n\
         [data]\nkind = \"synthetic\"\nsamples = {}\nfeatures = 20\nclasses = 2\nseed = 0\nlocation = \"host\"\n\n\
         [training]\noptimizer = \"adam\"\nlr = 0.001\nbatch_size = 32\nsteps = 1\ndtype = \"float32\"\n{extra}",
        shape.hidden, shape.depth, shape.samples
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Amp, Checkpoint, OptimizerImpl};

    #[test]
    fn the_issue_s_configurations_on_each_device() {
        let gpu = Plan::new(true, false).unwrap();
        let names: Vec<&str> = gpu.configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["3x256-for_loop", "3x256-foreach", "3x256-fused", "8x5000", "8x5000-fp16", "8x5000-sqrt"]
        );
        let cpu = Plan::new(false, false).unwrap();
        let names: Vec<&str> = cpu.configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["3x256-for_loop", "3x256-foreach", "3x256-fused", "8x5000", "8x1024-bf16", "8x1024-sqrt"]
        );
        let t = |p: &Plan, i: usize| p.configs[i].config.training.techniques;
        assert_eq!(t(&cpu, 2).optimizer_impl, Some(OptimizerImpl::Fused));
        assert_eq!(t(&cpu, 3).optimizer_impl, None, "the lesson's loop lets PyTorch pick");
        assert!(matches!(t(&gpu, 4).amp, Amp::Fp16 { .. }));
        assert_eq!(t(&cpu, 4).amp, Amp::Bf16);
        assert_eq!(t(&cpu, 5).checkpoint, Checkpoint::Sqrt);
        for p in [&gpu, &cpu] {
            assert_eq!(
                p.configs[3].param_count(),
                175_150_002,
                "the lesson's 8 x 5000 on 20 features, 2 classes"
            );
            for c in &p.configs {
                assert_eq!(c.config.training.batch_size, 32);
                assert_eq!(c.config.location, spec::DataLocation::Host);
                assert!(p.pooled_steps(c) >= 30, "{}: the issue's 30 steps a contender", c.name);
            }
            assert_eq!(p.contenders.len(), 6);
        }
    }

    #[test]
    fn quick_is_tiny_and_one_round() {
        let q = Plan::new(false, true).unwrap();
        assert_eq!(q.rounds, 1);
        assert!(q.configs.iter().all(|c| c.param_count() < 10_000 && c.steps == 3 && c.warmup == 1));
        assert_eq!(q.configs[0].param_count(), 20 * 16 + 16 + 2 * (16 * 16 + 16) + 16 * 2 + 2);
    }

    #[test]
    fn only_keeps_the_named_and_refuses_unknown_names() {
        let p = Plan::new(false, true).unwrap().only(&["4x32".into()]).unwrap();
        assert_eq!(p.configs.len(), 1);
        let err = Plan::new(false, true).unwrap().only(&["9x9".into()]).unwrap_err().to_string();
        assert!(err.contains("9x9") && err.contains("3x16-fused"), "{err}");
    }
}
