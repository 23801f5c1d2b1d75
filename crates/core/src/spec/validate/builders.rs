//! Builders: the typed spec from its raw tables, one builder a table (experiment, model, data,
//! training and its techniques, run) and each `[[variant]]` laid over the base and built the same
//! way.
use std::ops::Range;
use std::path::PathBuf;

use toml::Value;

use super::messages::{line_col, Problem};
use super::sweep::Draft;
use super::{kinds, Cx, Scope, SpecError};
use crate::device::DeviceChoice;
use crate::device::HalfPrecision;
use crate::spec::raw::{
    overlay_table, RawData, RawModel, RawParallel, RawRun, RawScaler, RawSpec, RawTraining, RawVariant, Tab,
    Table, S,
};
use crate::spec::{
    limits, Amp, Checkpoint, Config, DdpSpec, Dtype, Field, History, Mode, OnOom, OptimizerSpec, Parallel,
    RunSpec, ScalerSpec, Spec, Strategy, Sweep, SweepMode, Techniques, TrainingSpec, Variant,
};

/// The tables a config is built from: the base's, or a variant's laid over them.
#[derive(Clone)]
struct Tables {
    model: Tab<RawModel>,
    data: Tab<RawData>,
    training: Tab<RawTraining>,
    parallel: Tab<RawParallel>,
}

/// Splits an optional table into its header span and its contents (empty when absent).
pub(super) fn split<T: Default>(table: Tab<T>) -> (Option<Range<usize>>, T) {
    match table {
        Some(t) => (Some(t.span()), t.into_inner().0),
        None => (None, T::default()),
    }
}

impl Cx<'_> {
    pub(super) fn spec(&mut self, raw: RawSpec) -> Result<Spec, SpecError> {
        let (exp_span, exp) = split(raw.experiment);
        let name = self.require(exp.name, "experiment.name", &exp_span)?;
        let name = self.name(&name, "experiment.name")?;
        let description = exp.description.map(|d| d.into_inner()).unwrap_or_default();
        // The sweep comes first: it decides whether the swept field may be left out of its table.
        let draft = self.sweep(raw.sweep)?;
        let tables =
            Tables { model: raw.model, data: raw.data, training: raw.training, parallel: raw.parallel };
        let base = self.config(tables.clone(), draft.as_ref())?;
        let rounds_span = raw.run.as_ref().and_then(|r| r.get_ref().0.rounds.as_ref().map(|v| v.span()));
        let run = self.run(raw.run)?;
        if let (Some(span), Some(d)) = (rounds_span, &draft) {
            if run.rounds > 1 && !matches!(d.mode, SweepMode::List(_)) {
                return Err(self.at(
                    &span,
                    Problem::value(
                        "run.rounds",
                        "repeats the trials of a list of values; a search or halving chooses each trial from the \
                         ones before, so it runs once: remove rounds, or sweep a list of values",
                    ),
                ));
            }
        }
        let variants = self.variants(raw.variant.unwrap_or_default(), &tables, draft.as_ref())?;
        let mut draft = draft;
        if let Some(d) = draft.as_mut() {
            let configs: Vec<&Config> =
                std::iter::once(&base).chain(variants.iter().map(|v| &v.config)).collect();
            Cx::implied_max(&mut d.mode, d.field, &configs);
            if let SweepMode::Search { max, anchor: Some(a), implied_max: true, .. } = d.mode {
                if a > max {
                    return Err(self.nowhere(Problem::value(
                        "sweep.search.anchor",
                        format!(
                            "must be <= {max}, the largest {} the spec takes; lower the anchor",
                            d.field.key()
                        ),
                    )));
                }
            }
        }
        Ok(Spec {
            path: self.path.to_path_buf(),
            source: self.text.to_string(),
            name,
            description,
            base,
            run,
            sweep: draft.map(|d| Sweep { field: d.field, mode: d.mode }),
            variants,
        })
    }

    /// One config from its tables, checked with the sweep (the base's, or a variant's).
    fn config(&mut self, t: Tables, draft: Option<&Draft>) -> Result<Config, SpecError> {
        self.spans.clear();
        self.omitted = None;
        let swept = draft.map(|d| d.field);
        let (table, m) = split(t.model);
        let model = self.model(table, m, swept)?;
        let (data, location) = self.data(t.data, &model, swept)?;
        let mut training = self.training(t.training, swept)?;
        let parallel = self.parallel(t.parallel, swept, &mut training)?;
        self.checked(Config { model, data, location, training, parallel }, draft)
    }

    /// Each `[[variant]]`'s name, and its keys laid over `base` and validated as a config.
    fn variants(
        &mut self,
        raw: Vec<S<Table<RawVariant>>>,
        base: &Tables,
        draft: Option<&Draft>,
    ) -> Result<Vec<Variant>, SpecError> {
        if let Some(extra) = raw.get(limits::MAX_VARIANTS) {
            return Err(self.at(
                &extra.span(),
                Problem::value(
                    "variant",
                    format!(
                        "{} variants; a spec takes at most {} (each is drawn and compared with the others): split \
                         them over several specs",
                        raw.len(),
                        limits::MAX_VARIANTS
                    ),
                ),
            ));
        }
        let mut variants: Vec<Variant> = Vec::new();
        // The swept key as each variant wrote it: the sweep sets it for every trial, so a value
        // a variant gives it would be silently replaced.
        let written: Option<toml::Value> = draft.and_then(|_| toml::from_str(self.text).ok());
        for (i, v) in raw.into_iter().enumerate() {
            let label = format!("variant[{i}]");
            let header = v.span();
            if let (Some(d), Some(text)) = (draft, &written) {
                let key = d.field.key();
                let mut at = text.get("variant").and_then(|v| v.get(i));
                for k in key.split('.') {
                    at = at.and_then(|t| t.get(k));
                }
                if at.is_some() {
                    return Err(self.at(
                        &header,
                        Problem::value(
                            format!("{label}.{key}"),
                            format!(
                                "the sweep sets {key} for every trial (sweep.field), so the variant's value would \
                                 never run; remove it from the variant"
                            ),
                        ),
                    ));
                }
            }
            let RawVariant { name, skip_on_cpu_without, model, data, training, parallel } = v.into_inner().0;
            let key = format!("{label}.name");
            let name_v = self.require(name, &key, &Some(header.clone()))?;
            let name = self.name(&name_v, &key)?;
            if let Some(j) = variants.iter().position(|o| o.name == name) {
                return Err(self.at(
                    &name_v.span(),
                    Problem::value(
                        key,
                        format!(
                            "{name:?} is already the name of variant[{j}]; give each variant its own name"
                        ),
                    ),
                ));
            }
            let skip = match &skip_on_cpu_without {
                Some(p) => Some(self.word(
                    p,
                    "variant.skip_on_cpu_without",
                    &[("bf16", HalfPrecision::Bf16), ("fp16", HalfPrecision::Fp16)],
                )?),
                None => None,
            };
            let mut taken = Vec::new();
            let mut tables = base.clone();
            // A variant of another kind starts that table afresh: the base's keys belong to the
            // base's kind.
            let base_model = kinds::model_kind(&tables.model);
            let base_data = kinds::data_kind(&tables.data, &base_model);
            let writes_kind = model.as_ref().is_some_and(|t| t.get_ref().0.kind.is_some());
            let model_kind = if writes_kind { kinds::model_kind(&model) } else { base_model.clone() };
            if model_kind != base_model {
                tables.model = None;
            }
            let writes_kind = data.as_ref().is_some_and(|t| t.get_ref().0.kind.is_some());
            if writes_kind && kinds::data_kind(&data, &model_kind) != base_data {
                tables.data = None;
            }
            overlay_table(&mut tables.model, model, &mut taken);
            overlay_table(&mut tables.data, data, &mut taken);
            overlay_table(&mut tables.training, training, &mut taken);
            overlay_table(&mut tables.parallel, parallel, &mut taken);
            let line = line_col(self.text, header.start).0;
            self.scope = Some(Scope { label, name: name.clone(), line, taken });
            let config = self.config(tables, draft);
            self.scope = None;
            variants.push(Variant { name, config: config?, skip_on_cpu_without: skip });
        }
        Ok(variants)
    }

    fn training(&mut self, raw: Tab<RawTraining>, swept: Option<Field>) -> Result<TrainingSpec, SpecError> {
        let (table, mut t) = split(raw);
        let techniques = self.techniques(&mut t, &table, swept)?;
        let optimizer = self.require(t.optimizer, "training.optimizer", &table)?;
        let optimizer = self.word(
            &optimizer,
            "training.optimizer",
            &[("sgd", "sgd"), ("adam", "adam"), ("adamw", "adamw")],
        )?;
        let lr = match &t.lr {
            Some(v) => {
                self.float(v, "training.lr", "a number in 0 < lr <= 10", |x| x > 0.0 && x <= limits::MAX_LR)?
            }
            None => {
                if swept == Some(Field::Lr) {
                    self.omitted = Some(Field::Lr);
                }
                0.001
            }
        };
        let momentum = match &t.momentum {
            // Adam's betas play momentum's part; a momentum there would silently do nothing.
            Some(v) if optimizer != "sgd" => {
                return Err(self.at(
                    &v.span(),
                    Problem::value(
                        "training.momentum",
                        format!(
                            r#"only sgd uses momentum, but optimizer = "{optimizer}"; remove momentum, or set optimizer = "sgd""#
                        ),
                    ),
                ))
            }
            Some(v) => self.float(v, "training.momentum", "a number in 0 <= m < 1", |x| {
                (0.0..1.0).contains(&x)
            })?,
            None => 0.0,
        };
        let weight_decay = match &t.weight_decay {
            Some(v) => self.float(v, "training.weight_decay", "a number in 0 <= wd <= 1", |x| {
                (0.0..=limits::MAX_WEIGHT_DECAY).contains(&x)
            })?,
            None => 0.0,
        };
        let optimizer = match optimizer {
            "sgd" => OptimizerSpec::Sgd { lr, momentum, weight_decay },
            "adam" => OptimizerSpec::Adam { lr, weight_decay },
            _ => OptimizerSpec::AdamW { lr, weight_decay },
        };
        Ok(TrainingSpec {
            optimizer,
            batch_size: self.count_or_swept(t.batch_size, Field::BatchSize, 1, &table, swept, None)?,
            steps: self.count_or_swept(t.steps, Field::Steps, 1, &table, swept, Some(2))?,
            dtype: match &t.dtype {
                Some(v) => self.named(v, "training.dtype")?,
                None => Dtype::Float32,
            },
            seed: self.seed(t.seed, "training.seed")?,
            techniques,
        })
    }

    /// The technique keys of `[training]`, taken out of it.
    fn techniques(
        &mut self,
        t: &mut RawTraining,
        table: &Option<Range<usize>>,
        swept: Option<Field>,
    ) -> Result<Techniques, SpecError> {
        let accumulation =
            self.count_or_swept(t.accumulation.take(), Field::Accumulation, 1, table, swept, Some(1))?;
        let amp = match &t.amp {
            Some(v) => self.word(v, "training.amp", &[("off", "off"), ("fp16", "fp16"), ("bf16", "bf16")])?,
            None => "off",
        };
        let amp = match (amp, t.scaler.take()) {
            ("fp16", scaler) => Amp::Fp16 { scaler: self.scaler(scaler)? },
            // The scaler exists to keep fp16 gradients from underflowing; elsewhere it would be
            // silently unused.
            (amp, Some(scaler)) => {
                return Err(self.at(
                    &scaler.span(),
                    Problem::value(
                        "training.scaler",
                        format!(
                            r#"only amp = "fp16" uses a grad scaler, and amp is "{amp}"; remove scaler, or set amp = "fp16""#
                        ),
                    ),
                ))
            }
            ("bf16", None) => Amp::Bf16,
            (_, None) => Amp::Off,
        };
        let checkpoint = match &t.checkpoint {
            Some(v) => self.checkpoint(v)?,
            None => Checkpoint::None,
        };
        let mode = match &t.mode {
            Some(v) => self.named(v, "training.mode")?,
            None => Mode::Train,
        };
        let history = match &t.history {
            Some(v) => self.named(v, "training.history")?,
            None => History::None,
        };
        let optimizer_impl = match &t.optimizer_impl {
            Some(v) => Some(self.named(v, "training.optimizer_impl")?),
            None => None,
        };
        Ok(Techniques { accumulation, amp, checkpoint, mode, history, optimizer_impl })
    }

    /// `training.scaler`, each key defaulting to PyTorch's GradScaler.
    fn scaler(&mut self, raw: Tab<RawScaler>) -> Result<ScalerSpec, SpecError> {
        let (_, s) = split(raw);
        let d = ScalerSpec::default();
        let mut float = |v: &Option<S<f64>>, key, rule, ok, default| match v {
            Some(v) => self.float(v, key, rule, ok),
            None => Ok(default),
        };
        let init_scale =
            float(&s.init_scale, "training.scaler.init_scale", "a number > 0", |x| x > 0.0, d.init_scale)?;
        let growth_factor = float(
            &s.growth_factor,
            "training.scaler.growth_factor",
            "a number > 1",
            |x| x > 1.0,
            d.growth_factor,
        )?;
        let backoff_factor = float(
            &s.backoff_factor,
            "training.scaler.backoff_factor",
            "a number in 0 < b < 1",
            |x| x > 0.0 && x < 1.0,
            d.backoff_factor,
        )?;
        let growth_interval = match &s.growth_interval {
            Some(v) => self.count(v, "training.scaler.growth_interval", 1)?,
            None => d.growth_interval,
        };
        Ok(ScalerSpec { init_scale, growth_factor, backoff_factor, growth_interval })
    }

    /// `training.checkpoint`: "none", "sqrt", a whole number of units per segment, or
    /// `{ sequential = S }` (PyTorch's `checkpoint_sequential` segments; that S is at most the
    /// model's units is `Config::check`'s, which knows the model).
    fn checkpoint(&mut self, v: &S<Value>) -> Result<Checkpoint, SpecError> {
        let key = "training.checkpoint";
        self.spans.insert(key, v.span());
        let rule = r#""none", "sqrt", a whole number >= 1 or { sequential = S }"#;
        match v.get_ref() {
            Value::String(w) if w == "none" => Ok(Checkpoint::None),
            Value::String(w) if w == "sqrt" => Ok(Checkpoint::Sqrt),
            Value::Integer(k) if *k >= 1 => usize::try_from(*k)
                .map(Checkpoint::Every)
                .map_err(|_| self.bad(&v.span(), key, "a smaller whole number", k)),
            Value::Table(t) if t.len() == 1 && t.contains_key("sequential") => {
                let key = "training.checkpoint.sequential";
                match &t["sequential"] {
                    Value::Integer(s) if *s >= 1 => usize::try_from(*s)
                        .map(Checkpoint::Sequential)
                        .map_err(|_| self.bad(&v.span(), key, "a smaller whole number", s)),
                    other => Err(self.bad(&v.span(), key, "a whole number >= 1", other)),
                }
            }
            _ => Err(self.bad(&v.span(), key, rule, self.src(&v.span()))),
        }
    }

    /// `[parallel]`; a global batch turns `training.batch_size` into each rank's share.
    fn parallel(
        &mut self,
        raw: Tab<RawParallel>,
        swept: Option<Field>,
        training: &mut TrainingSpec,
    ) -> Result<Parallel, SpecError> {
        let (table, p) = split(raw);
        let strategy = match &p.strategy {
            Some(v) => self.word(
                v,
                "parallel.strategy",
                &[("none", Named::None), ("ddp", Named::Ddp), ("zero", Named::Zero)],
            )?,
            None if table.is_some() => return Err(self.missing("parallel.strategy", &table)),
            None => Named::None,
        };
        let named = strategy;
        let strategy = named != Named::None;
        // Knobs of DDP written without it would silently do nothing.
        let knobs = [
            ("parallel.bucket_cap_mb", p.bucket_cap_mb.as_ref().map(|v| v.span())),
            ("parallel.gradient_as_bucket_view", p.gradient_as_bucket_view.as_ref().map(|v| v.span())),
            ("parallel.find_unused_parameters", p.find_unused_parameters.as_ref().map(|v| v.span())),
            ("parallel.static_graph", p.static_graph.as_ref().map(|v| v.span())),
        ];
        if let (false, Some((key, Some(span)))) = (strategy, knobs.iter().find(|(_, s)| s.is_some())) {
            return Err(self.at(
                span,
                Problem::value(
                    *key,
                    "is DistributedDataParallel's (strategy = \"ddp\" or \"zero\"), and parallel.strategy is \
                     \"none\": set strategy = \"ddp\", or remove it",
                ),
            ));
        }
        let world_size = if strategy || p.world_size.is_some() {
            self.count_or_swept(p.world_size, Field::WorldSize, 1, &table, swept, Some(1))?
        } else {
            1
        };
        let global = match &p.batch {
            Some(v) => self.word(v, "parallel.batch", &[("per_rank", false), ("global", true)])?,
            None => false,
        };
        let flag = |this: &mut Self, v: &Option<S<bool>>, key: &'static str| {
            if let Some(v) = v {
                this.spans.insert(key, v.span());
            }
            v.as_ref().is_some_and(|v| *v.get_ref())
        };
        let bucket_cap_bytes = match &p.bucket_cap_mb {
            Some(v) => {
                let mb =
                    self.float(v, "parallel.bucket_cap_mb", "a number of MiB in 0 < mb <= 1048576", |x| {
                        x > 0.0 && x <= limits::MAX_BUCKET_CAP_MB
                    })?;
                // DDP's own arithmetic: int(bucket_cap_mb * 1024 * 1024).
                Some((mb * 1024.0 * 1024.0) as u64)
            }
            None => None,
        };
        let ddp = DdpSpec {
            bucket_cap_bytes,
            gradient_as_bucket_view: flag(
                self,
                &p.gradient_as_bucket_view,
                "parallel.gradient_as_bucket_view",
            ),
            find_unused_parameters: flag(self, &p.find_unused_parameters, "parallel.find_unused_parameters"),
            static_graph: flag(self, &p.static_graph, "parallel.static_graph"),
        };
        let global_batch = global.then_some(training.batch_size);
        if let Some(g) = global_batch {
            // The share is checked with the rest (Config::check): a world that does not divide
            // the batch is refused there, naming both.
            training.batch_size = g / world_size.max(1);
        }
        let strategy = match named {
            Named::None => Strategy::None,
            Named::Ddp => Strategy::Ddp(ddp),
            Named::Zero => Strategy::Zero(ddp),
        };
        Ok(Parallel { strategy, world_size, global_batch })
    }

    fn run(&mut self, raw: Tab<RawRun>) -> Result<RunSpec, SpecError> {
        let (_, r) = split(raw);
        let device = match &r.device {
            Some(v) => v
                .get_ref()
                .parse::<DeviceChoice>()
                .map_err(|e| self.at(&v.span(), Problem::value("run.device", e.to_string())))?,
            None => DeviceChoice::Auto,
        };
        let (budget, cuda_budget) = match &r.budget {
            Some(v) => self.budgets(v)?,
            None => (None, None),
        };
        let on_oom = match &r.on_oom {
            Some(v) => self.named(v, "run.on_oom")?,
            None => OnOom::Continue,
        };
        let skip_predicted_oom = match &r.skip_predicted_oom {
            Some(v) => Some(self.float(
                v,
                "run.skip_predicted_oom",
                "a margin in 0 <= m <= 10 (0.05: 5% over the budget)",
                |x| (0.0..=limits::MAX_SKIP_MARGIN).contains(&x),
            )?),
            None => None,
        };
        if let (Some(v), None, None) = (&r.skip_predicted_oom, budget, cuda_budget) {
            return Err(self.at(
                &v.span(),
                Problem::value(
                    "run.skip_predicted_oom",
                    "needs run.budget to compare predictions with; add budget = \"...\"",
                ),
            ));
        }
        let rounds = match &r.rounds {
            Some(v) => {
                let n = self.count(v, "run.rounds", 1)?;
                if n > limits::MAX_ROUNDS {
                    return Err(self.bad(
                        &v.span(),
                        "run.rounds",
                        &format!("at most {}", limits::MAX_ROUNDS),
                        n,
                    ));
                }
                n
            }
            None => 1,
        };
        Ok(RunSpec { device, budget, cuda_budget, on_oom, skip_predicted_oom, rounds })
    }

    /// `budget = "16GiB"` (any device), or `budget = { cpu = "128MiB", cuda = "1GiB" }`.
    fn budgets(&mut self, v: &S<Value>) -> Result<(Option<u64>, Option<u64>), SpecError> {
        let Value::Table(table) = v.get_ref() else {
            let b = self.budget(v.get_ref(), &v.span(), "run.budget")?;
            return Ok((Some(b), Some(b)));
        };
        let (mut cpu, mut cuda) = (None, None);
        for (name, value) in table {
            let slot = match name.as_str() {
                "cpu" => &mut cpu,
                "cuda" => &mut cuda,
                _ => {
                    return Err(self.at(
                        &v.span(),
                        Problem::value(
                            "run.budget",
                            format!(
                                "unknown key `{name}`; a budget per device has keys cpu and cuda, e.g. \
                                 budget = {{ cpu = \"128MiB\", cuda = \"1GiB\" }}"
                            ),
                        ),
                    ))
                }
            };
            *slot = Some(self.budget(value, &v.span(), &format!("run.budget.{name}"))?);
        }
        if cpu.is_none() && cuda.is_none() {
            return Err(self.bad(&v.span(), "run.budget", "a size, or a table with cpu and/or cuda", "{}"));
        }
        Ok((cpu, cuda))
    }

    /// A CSV path as written, made relative to the spec's folder (absolute paths stay).
    pub(super) fn resolve(&self, p: &str) -> PathBuf {
        match self.path.parent() {
            Some(dir) => dir.join(p),
            None => PathBuf::from(p),
        }
    }
}

/// `parallel.strategy` as written, before its knobs are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    None,
    Ddp,
    Zero,
}
