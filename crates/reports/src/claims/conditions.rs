//! What a claim is about: the budget and the sizes it states. A claim is judged only from a run
//! made under them; a run made under others (`--budget 2GiB` on the lesson's depth sweep, a
//! spec edited to another width) says what it found, and "not judged here", with the reason.
//!
//! Most claims state no budget or size: they hold of any run of their experiment (a ratio, a
//! slope, what a technique keeps) and carry [`Conditions::ANY`].
use crate::results::ExperimentDir as Experiment;
use crate::spec::{self, Config, Dtype, Field, Named, Spec};

/// The conditions a claim states.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conditions {
    /// The budget it speaks of, as a size ("15.90GiB") and in words ("the lesson's 15.90 GiB
    /// GPU").
    pub budget: Option<(&'static str, &'static str)>,
    /// Values of the experiment's configuration it speaks of (each variant's), in words after.
    pub sizes: &'static [(Field, f64, &'static str)],
    /// Choices of the configuration its explanation counts with (Adam's two moments, 4-byte
    /// floats, no autocast), in words after: a run with others is not the claim's.
    pub settings: &'static [(Setting, &'static str)],
}

/// A choice a claim's arithmetic assumes, as the spec writes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Setting {
    /// `training.optimizer`, as summary.csv names it ("adam", "sgd_momentum").
    Optimizer(&'static str),
    /// `training.dtype`.
    Dtype(Dtype),
    /// `training.amp` ("off"): autocast halves what an fp32 claim counts.
    Amp(&'static str),
}

impl Setting {
    /// The spec's key, and what `config` has for it.
    fn of(self, config: &Config) -> (&'static str, &'static str, &'static str) {
        match self {
            Setting::Optimizer(w) => ("training.optimizer", w, config.training.optimizer.name()),
            Setting::Dtype(w) => ("training.dtype", w.as_str(), config.training.dtype.as_str()),
            Setting::Amp(w) => ("training.amp", w, config.training.techniques.amp.as_str()),
        }
    }
}

impl Conditions {
    /// A claim of any run of its experiment.
    pub const ANY: Conditions = Conditions { budget: None, sizes: &[], settings: &[] };

    /// The conditions in words, for the report; `None` for [`ANY`](Self::ANY).
    pub fn describe(&self) -> Option<String> {
        let mut parts: Vec<String> = self.budget.map(|(_, words)| words.to_string()).into_iter().collect();
        parts.extend(self.sizes.iter().map(|(_, _, words)| words.to_string()));
        parts.extend(self.settings.iter().map(|(_, words)| words.to_string()));
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Why the run in `e` is not one of this claim's: `None` when it is.
    pub fn unmet(&self, e: &Experiment) -> Option<String> {
        if let Some((size, words)) = self.budget {
            let want = spec::size::parse_size(size).expect("a claim's budget is a size");
            match e.manifest.device.budget_bytes {
                Some(b) if b == want => {}
                Some(b) => {
                    return Some(format!("ran under {}, the claim is about {words}", spec::format_size(b)))
                }
                None => return Some(format!("ran without a budget, the claim is about {words}")),
            }
        }
        if self.sizes.is_empty() && self.settings.is_empty() {
            return None;
        }
        // The spec as it ran, each configuration (variant) of it.
        let Ok(spec) = spec::parse(&e.manifest.spec_source, &e.manifest.spec_here()) else {
            return Some("its recorded spec no longer parses, so its conditions cannot be checked".into());
        };
        let size = self.sizes.iter().find_map(|&(field, value, words)| {
            differs(&spec, field, value)
                .map(|was| format!("ran with {} = {was}, the claim is about {words}", field.key()))
        });
        size.or_else(|| {
            self.settings.iter().find_map(|&(setting, words)| {
                spec.configs()
                    .iter()
                    .map(|(_, c)| setting.of(c))
                    .find(|(_, want, was)| want != was)
                    .map(|(key, _, was)| format!("ran with {key} = \"{was}\", the claim is about {words}"))
            })
        })
    }
}

/// The first value of `field` a configuration of `spec` has other than `value`. A swept field
/// is the sweep's to vary and is not compared.
fn differs(spec: &Spec, field: Field, value: f64) -> Option<String> {
    if spec.sweep.as_ref().is_some_and(|s| s.field == field) {
        return None;
    }
    spec.configs()
        .iter()
        .filter_map(|(_, c)| c.get(field))
        .find(|&v| v != value)
        .map(crate::units::format_tick)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;

    const LESSON: Conditions = Conditions {
        budget: Some(("15.90GiB", "the lesson's 15.90 GiB GPU")),
        sizes: &[(Field::Hidden, 5000.0, "5000-wide layers"), (Field::BatchSize, 32.0, "batch 32")],
        settings: &[
            (Setting::Optimizer("adam"), "Adam"),
            (Setting::Dtype(Dtype::Float32), "fp32"),
            (Setting::Amp("off"), "no autocast"),
        ],
    };

    fn run(budget: Option<u64>, source: &str) -> Experiment {
        let mut m = manifest("depth_sweep", "cpu", budget, 64 << 30);
        m.spec_source = source.into();
        Experiment { dir: "e".into(), manifest: m, rows: Vec::new(), trace: Vec::new(), cut_row: false }
    }

    const SPEC: &str = "[experiment]\nname = \"depth_sweep\"\n[model]\nhidden = 5000\ndepth = 1\n[data]\n\
                        samples = 64\nfeatures = 4\nclasses = 2\n[training]\noptimizer = \"adam\"\nbatch_size = 32\n";

    #[test]
    fn a_run_under_another_budget_or_size_is_not_the_claims() {
        let lesson = spec::size::parse_size("15.90GiB").unwrap();
        assert_eq!(LESSON.unmet(&run(Some(lesson), SPEC)), None);
        let why = LESSON.unmet(&run(Some(2 << 30), SPEC)).unwrap();
        assert_eq!(why, "ran under 2.00 GiB, the claim is about the lesson's 15.90 GiB GPU");
        assert!(LESSON.unmet(&run(None, SPEC)).unwrap().starts_with("ran without a budget"));
        let why = LESSON.unmet(&run(Some(lesson), &SPEC.replace("5000", "1000"))).unwrap();
        assert_eq!(why, "ran with model.hidden = 1000, the claim is about 5000-wide layers");
        // A swept size is the sweep's.
        let swept = SPEC
            .replace("batch_size = 32\n", "[sweep]\nfield = \"training.batch_size\"\nvalues = [16, 64]\n");
        assert_eq!(LESSON.unmet(&run(Some(lesson), &swept)), None);
        assert_eq!(Conditions::ANY.unmet(&run(None, "not even toml")), None);
        assert_eq!(
            LESSON.describe().as_deref(),
            Some("the lesson's 15.90 GiB GPU, 5000-wide layers, batch 32, Adam, fp32, no autocast")
        );
    }

    /// The choices a claim's arithmetic counts with are held like its sizes: another optimizer
    /// or dtype, in the base or in any variant, is named.
    #[test]
    fn a_run_with_another_optimizer_or_dtype_is_not_the_claims() {
        let lesson = Some(spec::size::parse_size("15.90GiB").unwrap());
        let sgd = SPEC.replace("\"adam\"", "\"sgd\"");
        assert_eq!(
            LESSON.unmet(&run(lesson, &sgd)).unwrap(),
            "ran with training.optimizer = \"sgd\", the claim is about Adam"
        );
        let variant = format!(
            "{SPEC}[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"\ntraining.dtype = \"bfloat16\"\n"
        );
        assert_eq!(
            LESSON.unmet(&run(lesson, &variant)).unwrap(),
            "ran with training.dtype = \"bfloat16\", the claim is about fp32"
        );
        let amp = SPEC.replace("batch_size = 32\n", "batch_size = 32\namp = \"bf16\"\n");
        assert_eq!(
            LESSON.unmet(&run(lesson, &amp)).unwrap(),
            "ran with training.amp = \"bf16\", the claim is about no autocast"
        );
    }
}
