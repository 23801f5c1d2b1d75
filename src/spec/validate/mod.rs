//! Raw spec to typed [`Spec`](super::Spec), with errors that name the file, line, key and fix.
//!
//! Every error is one line: `file:line:col: key: what is wrong; how to fix it`. Serde-level errors
//! (unknown keys, wrong types, TOML syntax) come with a byte span from `toml`; we turn the span
//! into a line and column and, by reading the text before it, into the table and key it belongs
//! to. Semantic errors use the spans that [`raw`](super::raw) keeps on every value.
//!
//! Variants are numbered from 0 in keys, like list elements (`sweep.values[0]`): the first
//! `[[variant]]` is `variant[0]`. A variant's config is the base's `[model]`, `[data]` and
//! `[training]` with the variant's keys laid over them, validated exactly like the base; an error
//! about a value written in the variant names it `variant[i].training.amp`, and one about a value
//! it inherits (from the base or the sweep) is placed at that value and starts with
//! `in variant[i] "name" (line N):`.
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use super::raw::{RawSpec, S};
use super::{Field, Spec};

mod builders;
mod key_path;
mod keys;
mod messages;
mod sweep;
mod values;

/// A spec that cannot be run, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// Parses and validates spec text read from `path`. Relative CSV paths are resolved against the
/// folder of `path`.
pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
    let mut cx = Cx { text, path, spans: HashMap::new(), omitted: None, scope: None };
    let raw: RawSpec = toml::from_str(text).map_err(|e| cx.toml_error(&e))?;
    cx.spec(raw)
}

/// The variant whose config is being validated.
struct Scope {
    /// `variant[i]`.
    label: String,
    name: String,
    /// The line of its `[[variant]]` header.
    line: usize,
    /// The spans of the values and tables written in the variant (the rest are the base's).
    taken: Vec<Range<usize>>,
}

/// The text being validated, and what we learn about it on the way.
struct Cx<'a> {
    text: &'a str,
    path: &'a Path,
    /// Where each key's value was written, to place the errors `Config::check` names by key.
    spans: HashMap<&'static str, Range<usize>>,
    /// The swept field, when its value was left out and comes from the sweep's first value.
    omitted: Option<Field>,
    /// Set while a variant's config is validated.
    scope: Option<Scope>,
}

/// The span of an optional value.
fn span<T>(v: &Option<S<T>>) -> Option<Range<usize>> {
    v.as_ref().map(|v| v.span())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::device::DeviceChoice;
    use crate::spec::{
        Amp, Checkpoint, Config, DataLocation, DataSpec, Dtype, History, Mode, ModelSpec, OnOom,
        OptimizerImpl, OptimizerSpec, RunSpec, ScalerSpec, Sweep, SweepMode, Techniques, TrainingSpec,
        Variant,
    };

    const FILE: &str = "experiments/x.toml";

    /// The smallest valid spec. Lines: 1 [experiment], 2 name, 4 [model], 5 hidden, 6 depth,
    /// 8 [data], 9 samples, 10 features, 11 classes, 13 [training], 14 optimizer, 15 batch_size.
    const MINIMAL: &str = r#"[experiment]
name = "x"

[model]
hidden = 64
depth = 2

[data]
samples = 128
features = 4
classes = 3

[training]
optimizer = "adam"
batch_size = 32
"#;

    fn parse_at(text: &str) -> Result<Spec, SpecError> {
        parse(text, Path::new(FILE))
    }

    /// The error for `text`, failing the test if it parses.
    fn err(text: &str) -> String {
        match parse_at(text) {
            Ok(spec) => panic!("expected an error, got {spec:?}"),
            Err(e) => e.0,
        }
    }

    /// MINIMAL with `from` replaced by `to` (which must be there).
    fn edit(from: &str, to: &str) -> String {
        assert!(MINIMAL.contains(from), "{from:?} not in MINIMAL");
        MINIMAL.replacen(from, to, 1)
    }

    #[test]
    fn full_spec_round_trips_to_typed_values() {
        let text = r#"[experiment]
name = "depth_sweep"
description = "activation memory against depth"

[model]
hidden = 5000
depth = 1

[data]
kind = "synthetic"
samples = 1024
features = 20
classes = 10
seed = 7

[training]
optimizer = "sgd"
lr = 0.01
momentum = 0.9
weight_decay = 0.0001
batch_size = 32
steps = 3
dtype = "bfloat16"
seed = 5

[run]
device = "cuda:1"
budget = "15.90GiB"
on_oom = "stop"

[sweep]
field = "model.depth"
values = [1, 2, 4]
"#;
        let spec = parse_at(text).unwrap();
        assert_eq!(spec.path, PathBuf::from(FILE));
        assert_eq!(spec.source, text);
        assert_eq!(spec.name, "depth_sweep");
        assert_eq!(spec.description, "activation memory against depth");
        let expected = Config {
            model: ModelSpec { hidden: 5000, depth: 1 },
            data: DataSpec::Synthetic { samples: 1024, features: 20, classes: 10, seed: 7 },
            location: DataLocation::Host,
            training: TrainingSpec {
                optimizer: OptimizerSpec::Sgd { lr: 0.01, momentum: 0.9, weight_decay: 0.0001 },
                batch_size: 32,
                steps: 3,
                dtype: Dtype::Bfloat16,
                seed: 5,
                techniques: Techniques::default(),
            },
        };
        assert_eq!(spec.base, expected);
        assert_eq!(
            spec.run,
            RunSpec {
                device: DeviceChoice::Cuda(1),
                budget: Some((15.90 * (1u64 << 30) as f64).round() as u64),
                cuda_budget: Some((15.90 * (1u64 << 30) as f64).round() as u64),
                on_oom: OnOom::Stop,
                skip_predicted_oom: None,
            }
        );
        assert_eq!(
            spec.sweep,
            Some(Sweep { field: Field::Depth, mode: SweepMode::List(vec![1.0, 2.0, 4.0]) })
        );
    }

    #[test]
    fn optional_keys_take_their_defaults() {
        let spec = parse_at(MINIMAL).unwrap();
        assert_eq!(spec.description, "");
        assert_eq!(spec.base.training.optimizer, OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 });
        assert_eq!(spec.base.training.steps, 2);
        assert_eq!(spec.base.training.dtype, Dtype::Float32);
        assert_eq!(spec.base.training.seed, 0);
        assert_eq!(spec.base.data, DataSpec::Synthetic { samples: 128, features: 4, classes: 3, seed: 0 });
        assert_eq!(
            spec.run,
            RunSpec {
                device: DeviceChoice::Auto,
                budget: None,
                cuda_budget: None,
                on_oom: OnOom::Continue,
                skip_predicted_oom: None
            }
        );
        assert_eq!(spec.sweep, None);
    }

    #[test]
    fn unknown_key_names_the_key_table_line_and_choices() {
        assert_eq!(
            err(&edit("depth = 2\n", "depth = 2\nwidht = 3\n")),
            "experiments/x.toml:7:1: unknown key `widht` in [model]; expected one of: hidden, depth"
        );
    }

    #[test]
    fn unknown_table_is_refused() {
        assert_eq!(
            err(&format!("{MINIMAL}\n[modle]\nhidden = 3\n")),
            "experiments/x.toml:17:2: unknown table [modle]; expected one of: [experiment], [model], [data], [training], [run], [sweep], [[variant]]"
        );
    }

    #[test]
    fn unknown_key_in_an_inline_table_names_the_inline_table() {
        let text = format!(
            "{MINIMAL}\n[sweep]\nfield = \"model.depth\"\nsearch = {{ start = 1, fctor = 2, max = 8 }}\n"
        );
        assert_eq!(
            err(&text),
            "experiments/x.toml:19:23: unknown key `fctor` in sweep.search; expected one of: start, factor, max"
        );
    }

    #[test]
    fn bad_size_names_run_budget() {
        let text = format!("{MINIMAL}\n[run]\nbudget = \"16 gigs\"\n");
        let e = err(&text);
        assert!(e.starts_with("experiments/x.toml:18:10: run.budget: \"16 gigs\" is not a size"), "{e}");
        assert!(e.contains(r#"write it like "15.90GiB", "512MiB" or "16GB""#), "{e}");
    }

    #[test]
    fn budget_may_be_bytes_but_not_zero_or_negative() {
        let spec = parse_at(&format!("{MINIMAL}[run]\nbudget = 1048576\n")).unwrap();
        assert_eq!(spec.run.budget, Some(1 << 20));
        let e = err(&format!("{MINIMAL}[run]\nbudget = 0\n"));
        assert!(
            e.starts_with("experiments/x.toml:17:10: run.budget: must be more than 0 bytes, got 0"),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}[run]\nbudget = -5\n"));
        assert!(
            e.starts_with(
                "experiments/x.toml:17:10: run.budget: must be a size or a whole number of bytes, got -5"
            ),
            "{e}"
        );
    }

    #[test]
    fn negative_depth_names_the_key_and_line() {
        assert_eq!(
            err(&edit("depth = 2", "depth = -3")),
            "experiments/x.toml:6:9: model.depth: must be a whole number >= 0, got -3; set it to the number of hidden layers, e.g. depth = 4"
        );
    }

    #[test]
    fn wrong_type_names_the_key() {
        assert_eq!(
            err(&edit("hidden = 64", "hidden = \"big\"")),
            "experiments/x.toml:5:10: model.hidden: must be a whole number, got \"big\"; set it to the width of each hidden layer, e.g. hidden = 512"
        );
        assert!(err(&edit("hidden = 64", "hidden = 2.5"))
            .starts_with("experiments/x.toml:5:10: model.hidden: must be a whole number, got 2.5;"));
        // A derived struct would take a list by position; a table must be a table.
        let e = err(&format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nsearch = [1, 2, 8]\n"));
        let want = "experiments/x.toml:18:10: sweep.search: must be a table, got [1, 2, 8];";
        assert!(e.starts_with(want), "{e}");
        let e = err(&edit("[model]", "[[model]]"));
        let want =
            "experiments/x.toml:4:1: model: must be a table, got [[model]]; write it as a [model] table";
        assert_eq!(e, want);
    }

    #[test]
    fn integers_too_large_for_i64_name_the_key() {
        let e = err(&edit("hidden = 64", "hidden = 9223372036854775808"));
        let want = "experiments/x.toml:5:10: model.hidden: must be a whole number, got 9223372036854775808;";
        assert!(e.starts_with(want), "{e}");
    }

    #[test]
    fn missing_required_key_names_it_and_where_to_add_it() {
        assert_eq!(
            err(&edit("hidden = 64\n", "")),
            "experiments/x.toml:4:1: model.hidden is missing; add hidden = 512 under [model] (the width of each hidden layer)"
        );
        let no_training = &MINIMAL[..MINIMAL.find("[training]").unwrap()];
        assert_eq!(
            err(no_training),
            r#"experiments/x.toml: training.optimizer is missing; add optimizer = "adam" under [training] ("sgd", "adam" or "adamw")"#
        );
        assert!(err("").starts_with(
            "experiments/x.toml: experiment.name is missing; add name = \"depth_sweep\" under [experiment]"
        ));
    }

    #[test]
    fn momentum_is_only_for_sgd() {
        assert_eq!(
            err(&format!("{MINIMAL}momentum = 0.9\n")),
            r#"experiments/x.toml:16:12: training.momentum: only sgd uses momentum, but optimizer = "adam"; remove momentum, or set optimizer = "sgd""#
        );
        let sgd = edit("\"adam\"", "\"sgd\"");
        let e = err(&format!("{sgd}momentum = 1.0\n"));
        assert!(
            e.starts_with(
                "experiments/x.toml:16:12: training.momentum: must be a number in 0 <= m < 1, got 1;"
            ),
            "{e}"
        );
        let spec = parse_at(&format!("{sgd}momentum = 0.5\n")).unwrap();
        assert_eq!(
            spec.base.training.optimizer,
            OptimizerSpec::Sgd { lr: 0.001, momentum: 0.5, weight_decay: 0.0 }
        );
    }

    #[test]
    fn learning_rate_must_be_positive() {
        let e = err(&format!("{MINIMAL}lr = 0\n"));
        assert!(e.starts_with("experiments/x.toml:16:6: training.lr: must be a number > 0, got 0;"), "{e}");
        assert!(err(&format!("{MINIMAL}lr = nan\n")).contains("training.lr: must be a number > 0, got NaN"));
    }

    #[test]
    fn words_list_their_choices() {
        assert_eq!(
            err(&edit("\"adam\"", "\"rmsprop\"")),
            r#"experiments/x.toml:14:13: training.optimizer: must be one of "sgd", "adam", "adamw", got "rmsprop"; e.g. optimizer = "adam""#
        );
        let e = err(&format!("{MINIMAL}[run]\ndevice = \"gpu\"\n"));
        assert!(e.starts_with("experiments/x.toml:17:10: run.device: `gpu` is not a device"), "{e}");
    }

    #[test]
    fn experiment_name_must_be_folder_safe() {
        let e = err(&edit("name = \"x\"", "name = \"Depth Sweep\""));
        assert!(e.starts_with("experiments/x.toml:2:8: experiment.name: must be lowercase letters, digits, _ or -, got \"Depth Sweep\";"), "{e}");
    }

    #[test]
    fn search_on_learning_rate_is_refused() {
        let text =
            format!("{MINIMAL}\n[sweep]\nfield = \"training.lr\"\nsearch = {{ start = 1, max = 8 }}\n");
        let e = err(&text);
        assert!(
            e.starts_with("experiments/x.toml:19:10: sweep.search: training.lr is not a whole-number field, so it cannot be searched;"),
            "{e}"
        );
    }

    #[test]
    fn batch_size_larger_than_samples_is_refused() {
        let e = err(&edit("batch_size = 32", "batch_size = 256"));
        assert!(
            e.starts_with(
                "experiments/x.toml:15:14: training.batch_size 256 is larger than data.samples 128"
            ),
            "{e}"
        );
    }

    #[test]
    fn batch_search_past_samples_is_refused_up_front() {
        let text = format!(
            "{MINIMAL}\n[sweep]\nfield = \"training.batch_size\"\nsearch = {{ start = 1, max = 4096 }}\n"
        );
        let e = err(&text);
        assert!(
            e.starts_with("experiments/x.toml:19:29: sweep.search.max: training.batch_size 4096 is larger than data.samples 128"),
            "{e}"
        );
    }

    #[test]
    fn search_bounds_are_checked() {
        let sweep = |s: &str| format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nsearch = {s}\n");
        let e = err(&sweep("{ start = 8, max = 4 }"));
        assert_eq!(e, "experiments/x.toml:18:29: sweep.search.max: must be >= start (8), got 4; raise max or lower start");
        let e = err(&sweep("{ start = 0, max = 4 }"));
        assert!(
            e.starts_with(
                "experiments/x.toml:18:20: sweep.search.start: must be a whole number >= 1, got 0;"
            ),
            "{e}"
        );
        let e = err(&sweep("{ start = 1, factor = 1, max = 4 }"));
        assert!(
            e.starts_with(
                "experiments/x.toml:18:32: sweep.search.factor: must be a whole number >= 2, got 1;"
            ),
            "{e}"
        );
        let e = err(&sweep("{ start = 1 }"));
        assert!(
            e.starts_with("experiments/x.toml:18:10: sweep.search.max is missing; write it as search = {"),
            "{e}"
        );
        let spec = parse_at(&sweep("{ start = 16, max = 4096 }")).unwrap();
        let mode = SweepMode::Search { start: 16, factor: 2, max: 4096 };
        assert_eq!(spec.sweep, Some(Sweep { field: Field::Hidden, mode }));
    }

    #[test]
    fn fractional_list_value_for_an_integer_field_names_its_index() {
        let text = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 2.5]\n");
        assert_eq!(
            err(&text),
            "experiments/x.toml:18:17: sweep.values[2]: model.depth takes whole numbers, got 2.5; e.g. values = [1, 2, 4]"
        );
        let text = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nvalues = [1, \"two\"]\n");
        assert!(err(&text)
            .starts_with("experiments/x.toml:18:14: sweep.values[1]: must be a number, got \"two\";"));
    }

    #[test]
    fn list_values_are_checked_against_the_base() {
        let text = format!("{MINIMAL}[sweep]\nfield = \"training.batch_size\"\nvalues = [16, 64, 512]\n");
        let e = err(&text);
        assert!(
            e.starts_with("experiments/x.toml:18:19: sweep.values[2]: training.batch_size 512 is larger than data.samples 128"),
            "{e}"
        );
        let text = format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nvalues = [0, 4]\n");
        assert_eq!(
            err(&text),
            "experiments/x.toml:18:11: sweep.values[0]: model.hidden must be at least 1; change this value or remove it"
        );
    }

    #[test]
    fn learning_rates_may_be_listed() {
        let text = format!("{MINIMAL}[sweep]\nfield = \"training.lr\"\nvalues = [0.1, 1e-3]\n");
        let spec = parse_at(&text).unwrap();
        assert_eq!(spec.sweep.unwrap().mode, SweepMode::List(vec![0.1, 0.001]));
    }

    #[test]
    fn swept_field_may_be_left_out_of_its_table() {
        let no_depth = edit("depth = 2\n", "");
        let spec =
            parse_at(&format!("{no_depth}[sweep]\nfield = \"model.depth\"\nvalues = [3, 5]\n")).unwrap();
        assert_eq!(spec.base.model.depth, 3);
        let no_batch = edit("batch_size = 32\n", "");
        let text = format!(
            "{no_batch}[sweep]\nfield = \"training.batch_size\"\nsearch = {{ start = 4, max = 64 }}\n"
        );
        assert_eq!(parse_at(&text).unwrap().base.training.batch_size, 4);
        // ... but only the swept one.
        let e = err(&format!("{no_depth}[sweep]\nfield = \"model.hidden\"\nvalues = [3, 5]\n"));
        assert!(e.starts_with("experiments/x.toml:4:1: model.depth is missing;"), "{e}");
    }

    #[test]
    fn omitted_swept_samples_take_the_first_value_and_are_checked() {
        let no_samples = edit("samples = 128\n", "");
        let text = format!("{no_samples}[sweep]\nfield = \"data.samples\"\nvalues = [16, 256]\n");
        let e = err(&text);
        assert!(
            e.starts_with("experiments/x.toml:17:11: sweep.values[0]: training.batch_size 32 is larger than data.samples 16"),
            "{e}"
        );
    }

    #[test]
    fn sweep_needs_exactly_one_of_values_search_and_halve() {
        let sweep = |modes: &str| format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\n{modes}");
        let both = sweep("values = [1]\nsearch = { start = 1, max = 2 }\n");
        assert_eq!(
            err(&both),
            "experiments/x.toml:19:10: sweep: give one of values, search and halve, not both values and search; remove all but one"
        );
        let e = err(&sweep("values = [1]\nhalve = { start = 2 }\n"));
        assert_eq!(e, "experiments/x.toml:19:9: sweep: give one of values, search and halve, not both values and halve; remove all but one");
        // Placed at the one written last.
        let e = err(&sweep("halve = { start = 2 }\nsearch = { start = 1, max = 2 }\n"));
        assert_eq!(e, "experiments/x.toml:19:10: sweep: give one of values, search and halve, not both search and halve; remove all but one");
        let e = err(&sweep("values = [1]\nhalve = { start = 2 }\nsearch = { start = 1, max = 2 }\n"));
        assert_eq!(e, "experiments/x.toml:20:10: sweep: give one of values, search and halve, not all three; remove all but one");
        let neither = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\n");
        assert_eq!(
            err(&neither),
            "experiments/x.toml:16:1: sweep: no values, search or halve to sweep model.depth over; add e.g. values = [1, 2, 4], search = { start = 1, factor = 2, max = 4096 } or halve = { start = 4096 }"
        );
        let empty = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nvalues = []\n");
        assert!(err(&empty).starts_with("experiments/x.toml:18:10: sweep.values: the list is empty"));
        let bad = format!("{MINIMAL}[sweep]\nfield = \"model.width\"\nvalues = [1]\n");
        assert!(err(&bad).starts_with("experiments/x.toml:17:9: sweep.field: \"model.width\" is not a field that can be swept; use one of: model.depth,"));
    }

    #[test]
    fn csv_path_is_resolved_against_the_spec_folder() {
        let csv = edit(
            "samples = 128\nfeatures = 4\nclasses = 3\n",
            "kind = \"csv\"\npath = \"data/iris.csv\"\nlabel = \"species\"\n",
        );
        let spec = parse_at(&csv).unwrap();
        assert_eq!(
            spec.base.data,
            DataSpec::Csv { path: PathBuf::from("experiments/data/iris.csv"), label: "species".into() }
        );
        let abs = csv.replace("data/iris.csv", "/srv/iris.csv");
        let spec = parse_at(&abs).unwrap();
        assert!(
            matches!(spec.base.data, DataSpec::Csv { ref path, .. } if path == Path::new("/srv/iris.csv"))
        );
        // Bare file name: no folder to resolve against.
        let spec = parse(&csv, Path::new("x.toml")).unwrap();
        assert!(
            matches!(spec.base.data, DataSpec::Csv { ref path, .. } if path == Path::new("data/iris.csv"))
        );
    }

    #[test]
    fn keys_of_the_other_data_kind_are_refused() {
        let e = err(&edit("classes = 3\n", "classes = 3\npath = \"a.csv\"\n"));
        assert!(e.starts_with("experiments/x.toml:12:8: data.path is only read for kind = \"csv\""), "{e}");
        let csv = edit("samples = 128\n", "kind = \"csv\"\npath = \"a.csv\"\nlabel = \"y\"\n");
        let e = err(&csv);
        assert!(
            e.starts_with("experiments/x.toml:12:12: data.features is only read for kind = \"synthetic\""),
            "{e}"
        );
        let e =
            err(&edit("samples = 128\nfeatures = 4\nclasses = 3\n", "kind = \"csv\"\npath = \"a.csv\"\n"));
        assert!(
            e.starts_with(
                "experiments/x.toml:8:1: data.label is missing; add label = \"species\" under [data]"
            ),
            "{e}"
        );
    }

    #[test]
    fn csv_data_fields_cannot_be_swept() {
        let csv = edit(
            "samples = 128\nfeatures = 4\nclasses = 3\n",
            "kind = \"csv\"\npath = \"a.csv\"\nlabel = \"y\"\n",
        );
        let e = err(&format!("{csv}[sweep]\nfield = \"data.samples\"\nvalues = [64]\n"));
        assert!(e.starts_with("experiments/x.toml:17:9: sweep.field: data.samples can only be swept with kind = \"synthetic\" data"), "{e}");
    }

    #[test]
    fn duplicate_keys_and_tables_are_named() {
        let e = err(&edit("depth = 2\n", "depth = 2\ndepth = 3\n"));
        assert_eq!(e, "experiments/x.toml:7:1: model.depth is written twice; keep one of them");
        let e = err(&format!("{MINIMAL}[model]\n"));
        assert_eq!(e, "experiments/x.toml:16:2: [model] is written twice; merge the two into one table");
    }

    #[test]
    fn syntax_errors_have_a_line() {
        let e = err(&edit("hidden = 64", "hidden = "));
        assert!(e.starts_with("experiments/x.toml:5:10: not valid TOML at model.hidden: "), "{e}");
    }

    #[test]
    fn odd_input_gives_errors_not_panics() {
        for text in [
            "",
            "[",
            "]",
            "=",
            "\"",
            "[model",
            "[[model]]\n[[model]]",
            "model = 3",
            "x = 1",
            "[sweep]\nvalues = [[1], {a = 1}]",
            "[sweep]\nsearch = { start = { x = 1 } }",
            "[experiment]\nname = \"é\"",
            "\u{0}",
            "é = 1",
            "[é]",
            "[model]\nhidden = 9223372036854775808",
            "[run]\nbudget = 1.5",
            "[run]\nbudget = \"\u{1F600}\"",
            "a.b.c.d = 1",
            "[\"model\"]\nwidht = 1",
        ] {
            let _ = parse_at(text).unwrap_err();
        }
    }

    #[test]
    fn load_names_an_unreadable_file() {
        let e = crate::spec::load(Path::new("/nonexistent/spec.toml")).unwrap_err().0;
        assert!(e.starts_with("/nonexistent/spec.toml: cannot read the spec: "), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.toml");
        std::fs::write(&path, MINIMAL).unwrap();
        assert_eq!(crate::spec::load(&path).unwrap().path, path);
    }

    // ---- techniques ----------------------------------------------------------------------------

    /// MINIMAL's config, to compare variants with.
    fn minimal_config() -> Config {
        Config {
            model: ModelSpec { hidden: 64, depth: 2 },
            data: DataSpec::Synthetic { samples: 128, features: 4, classes: 3, seed: 0 },
            location: DataLocation::Host,
            training: TrainingSpec {
                optimizer: OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 },
                batch_size: 32,
                steps: 2,
                dtype: Dtype::Float32,
                seed: 0,
                techniques: Techniques {
                    accumulation: 1,
                    amp: Amp::Off,
                    checkpoint: Checkpoint::None,
                    mode: Mode::Train,
                    history: History::None,
                    optimizer_impl: None,
                },
            },
        }
    }

    /// The techniques of MINIMAL with `lines` added to [training].
    fn techniques(lines: &str) -> Techniques {
        parse_at(&format!("{MINIMAL}{lines}")).unwrap().base.training.techniques
    }

    #[test]
    fn techniques_parse_to_typed_values() {
        let t = techniques(
            r#"accumulation = 4
amp = "fp16"
scaler = { init_scale = 1024.0, growth_factor = 4.0, backoff_factor = 0.25, growth_interval = 10 }
checkpoint = "sqrt"
mode = "train"
history = "loss_tensor"
"#,
        );
        let scaler =
            ScalerSpec { init_scale: 1024.0, growth_factor: 4.0, backoff_factor: 0.25, growth_interval: 10 };
        let want = Techniques {
            accumulation: 4,
            amp: Amp::Fp16 { scaler },
            checkpoint: Checkpoint::Sqrt,
            mode: Mode::Train,
            history: History::LossTensor,
            optimizer_impl: None,
        };
        assert_eq!(t, want);
        // fp16 without a scaler: PyTorch's GradScaler defaults.
        let defaults = ScalerSpec {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        };
        assert_eq!(techniques("amp = \"fp16\"\n").amp, Amp::Fp16 { scaler: defaults });
        // Each scaler key is optional, the table may be written as [training.scaler], and a whole
        // number is a number.
        let t = techniques("amp = \"fp16\"\n[training.scaler]\ninit_scale = 256\ngrowth_interval = 5\n");
        let scaler =
            ScalerSpec { init_scale: 256.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 5 };
        assert_eq!(t.amp, Amp::Fp16 { scaler });
        let t = techniques("amp = \"bf16\"\ncheckpoint = 3\nhistory = \"loss_value\"\n");
        let want = Techniques {
            accumulation: 1,
            amp: Amp::Bf16,
            checkpoint: Checkpoint::Every(3),
            mode: Mode::Train,
            history: History::LossValue,
            optimizer_impl: None,
        };
        assert_eq!(t, want);
        let t = techniques("amp = \"off\"\ncheckpoint = \"none\"\nmode = \"forward\"\nhistory = \"none\"\n");
        let want = Techniques {
            accumulation: 1,
            amp: Amp::Off,
            checkpoint: Checkpoint::None,
            mode: Mode::Forward,
            history: History::None,
            optimizer_impl: None,
        };
        assert_eq!(t, want);
        let t = techniques("mode = \"forward_no_grad\"\nhistory = \"loss_tensor\"\naccumulation = 1\n");
        let want = Techniques {
            accumulation: 1,
            amp: Amp::Off,
            checkpoint: Checkpoint::None,
            mode: Mode::ForwardNoGrad,
            history: History::LossTensor,
            optimizer_impl: None,
        };
        assert_eq!(t, want);
    }

    #[test]
    fn techniques_default_to_plain_training() {
        let spec = parse_at(MINIMAL).unwrap();
        assert_eq!(spec.base, minimal_config());
        assert_eq!(spec.variants, []);
        assert_eq!(spec.configs(), [(None, &minimal_config())]);
    }

    #[test]
    fn technique_values_are_checked() {
        let e = err(&format!("{MINIMAL}accumulation = 0\n"));
        assert_eq!(e, "experiments/x.toml:16:16: training.accumulation: must be a whole number >= 1, got 0; set it to the micro-batches per optimizer step, e.g. accumulation = 4");
        let e = err(&format!("{MINIMAL}amp = \"fp8\"\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:16:7: training.amp: must be one of "off", "fp16", "bf16", got "fp8"; e.g. amp = "fp16""#
        );
        let e = err(&format!("{MINIMAL}checkpoint = 0\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:16:14: training.checkpoint: must be "none", "sqrt" or a whole number >= 1, got 0; set it to "none", "sqrt" (about sqrt(depth) segments) or the hidden layers per segment, e.g. checkpoint = "sqrt""#
        );
        for bad in ["\"all\"", "-2", "1.5", "true"] {
            let e = err(&format!("{MINIMAL}checkpoint = {bad}\n"));
            let want = format!(
                r#"experiments/x.toml:16:14: training.checkpoint: must be "none", "sqrt" or a whole number >= 1, got {bad};"#
            );
            assert!(e.starts_with(&want), "{e}");
        }
        let e = err(&format!("{MINIMAL}mode = \"eval\"\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:16:8: training.mode: must be one of "train", "forward", "forward_no_grad", got "eval"; e.g. mode = "train""#
        );
        let e = err(&format!("{MINIMAL}history = \"all\"\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:16:11: training.history: must be one of "none", "loss_tensor", "loss_value", got "all"; e.g. history = "loss_value""#
        );
    }

    #[test]
    fn scaler_is_only_for_fp16() {
        let e = err(&format!("{MINIMAL}scaler = {{ init_scale = 2.0 }}\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:16:10: training.scaler: only amp = "fp16" uses a grad scaler, and amp is "off"; remove scaler, or set amp = "fp16""#
        );
        let e = err(&format!("{MINIMAL}amp = \"bf16\"\n[training.scaler]\ngrowth_interval = 5\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:17:1: training.scaler: only amp = "fp16" uses a grad scaler, and amp is "bf16"; remove scaler, or set amp = "fp16""#
        );
    }

    #[test]
    fn scaler_values_are_checked() {
        let fp16 = |scaler: &str| err(&format!("{MINIMAL}amp = \"fp16\"\nscaler = {{ {scaler} }}\n"));
        assert_eq!(
            fp16("init_scale = 0.0"),
            "experiments/x.toml:17:25: training.scaler.init_scale: must be a number > 0, got 0; set it to the first loss scale, e.g. scaler = { init_scale = 65536.0 }"
        );
        let e = fp16("growth_factor = 1.0");
        assert!(
            e.starts_with(
                "experiments/x.toml:17:28: training.scaler.growth_factor: must be a number > 1, got 1;"
            ),
            "{e}"
        );
        let e = fp16("backoff_factor = 1.0");
        assert_eq!(e, "experiments/x.toml:17:29: training.scaler.backoff_factor: must be a number in 0 < b < 1, got 1; set it to what the scale is multiplied by after an overflow, e.g. scaler = { backoff_factor = 0.5 }");
        let e = fp16("backoff_factor = 0");
        assert!(e.starts_with("experiments/x.toml:17:29: training.scaler.backoff_factor: must be a number in 0 < b < 1, got 0;"), "{e}");
        let e = fp16("growth_interval = 0");
        assert!(e.starts_with("experiments/x.toml:17:30: training.scaler.growth_interval: must be a whole number >= 1, got 0;"), "{e}");
        let e = fp16("growth_interval = 1.5");
        assert!(
            e.starts_with(
                "experiments/x.toml:17:30: training.scaler.growth_interval: must be a whole number, got 1.5;"
            ),
            "{e}"
        );
        assert_eq!(
            fp16("growth = 3"),
            "experiments/x.toml:17:12: unknown key `growth` in training.scaler; expected one of: init_scale, growth_factor, backoff_factor, growth_interval"
        );
    }

    #[test]
    fn modes_without_backward_refuse_accumulation_and_checkpoint() {
        let e = err(&format!("{MINIMAL}mode = \"forward\"\naccumulation = 4\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:16:8: training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only"#
        );
        let e = err(&format!("{MINIMAL}checkpoint = 2\nmode = \"forward_no_grad\"\n"));
        assert!(e.starts_with("experiments/x.toml:17:8: training.mode \"forward_no_grad\""), "{e}");
        assert!(
            e.ends_with(r#"has no backward pass: accumulation and checkpoint apply to mode = "train" only"#),
            "{e}"
        );
    }

    // ---- halving and accumulation sweeps --------------------------------------------------------

    #[test]
    fn halve_sweeps_from_a_start() {
        let sweep =
            |field: &str, halve: &str| format!("{MINIMAL}[sweep]\nfield = \"{field}\"\nhalve = {halve}\n");
        let spec = parse_at(&sweep("training.batch_size", "{ start = 64 }")).unwrap();
        let want = Sweep { field: Field::BatchSize, mode: SweepMode::Halve { start: 64 } };
        assert_eq!(spec.sweep, Some(want));
        assert_eq!(spec.base, minimal_config());
        assert_eq!(
            err(&sweep("training.batch_size", "{ start = 4096 }")),
            "experiments/x.toml:18:19: sweep.halve.start: training.batch_size 4096 is larger than data.samples 128: a batch is drawn from the data set without repeats; raise data.samples"
        );
        assert_eq!(
            err(&sweep("training.batch_size", "{ start = 0 }")),
            "experiments/x.toml:18:19: sweep.halve.start: must be a whole number >= 1, got 0; set it to the first value, at least 1, e.g. halve = { start = 4096 }"
        );
        assert_eq!(
            err(&sweep("training.batch_size", "{}")),
            "experiments/x.toml:18:9: sweep.halve.start is missing; write it as halve = { start = 4096 }"
        );
        assert_eq!(
            err(&sweep("training.lr", "{ start = 1 }")),
            "experiments/x.toml:18:9: sweep.halve: training.lr is not a whole-number field, so it cannot be halved; list its values instead, e.g. values = [0.0001, 0.001, 0.01]"
        );
        assert_eq!(
            err(&sweep("training.batch_size", "{ start = 8, min = 1 }")),
            "experiments/x.toml:18:22: unknown key `min` in sweep.halve; expected one of: start"
        );
        // The swept field left out of its table starts at the start.
        let no_batch = edit("batch_size = 32\n", "");
        let text = format!("{no_batch}[sweep]\nfield = \"training.batch_size\"\nhalve = {{ start = 64 }}\n");
        assert_eq!(parse_at(&text).unwrap().base.training.batch_size, 64);
    }

    #[test]
    fn accumulation_can_be_swept() {
        let text = format!(
            "{MINIMAL}accumulation = 2\n[sweep]\nfield = \"training.accumulation\"\nvalues = [1, 2, 8]\n"
        );
        let spec = parse_at(&text).unwrap();
        assert_eq!(spec.base.training.techniques.accumulation, 2);
        let want = Sweep { field: Field::Accumulation, mode: SweepMode::List(vec![1.0, 2.0, 8.0]) };
        assert_eq!(spec.sweep, Some(want));
        // Left out, it starts at the sweep's first value.
        let text = format!("{MINIMAL}[sweep]\nfield = \"training.accumulation\"\nhalve = {{ start = 16 }}\n");
        let spec = parse_at(&text).unwrap();
        assert_eq!(spec.base.training.techniques.accumulation, 16);
        assert_eq!(spec.sweep.unwrap().mode, SweepMode::Halve { start: 16 });
        let text = format!("{MINIMAL}[sweep]\nfield = \"training.accumulation\"\nvalues = [0, 2]\n");
        assert_eq!(
            err(&text),
            "experiments/x.toml:18:11: sweep.values[0]: training.accumulation must be at least 1; change this value or remove it"
        );
        let text = format!(
            "{MINIMAL}mode = \"forward\"\n[sweep]\nfield = \"training.accumulation\"\nvalues = [1, 4]\n"
        );
        assert_eq!(
            err(&text),
            r#"experiments/x.toml:19:14: sweep.values[1]: training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only; change this value or remove it"#
        );
    }

    // ---- variants -------------------------------------------------------------------------------

    #[test]
    fn variants_lay_their_keys_over_the_base() {
        // Lines: 17 [[variant]] "wide_fp16", 25 [[variant]] "sgd".
        let text = format!(
            r#"{MINIMAL}
[[variant]]
name = "wide_fp16"
[variant.model]
hidden = 1024
[variant.training]
amp = "fp16"
accumulation = 2

[[variant]]
name = "sgd"
training = {{ optimizer = "sgd", momentum = 0.9, checkpoint = 1, history = "loss_value" }}
data = {{ samples = 256, seed = 3 }}
"#
        );
        let spec = parse_at(&text).unwrap();
        assert_eq!(spec.base, minimal_config());
        let mut wide = minimal_config();
        wide.model.hidden = 1024;
        wide.training.techniques.accumulation = 2;
        wide.training.techniques.amp = Amp::Fp16 { scaler: ScalerSpec::default() };
        let sgd = Config {
            model: ModelSpec { hidden: 64, depth: 2 },
            data: DataSpec::Synthetic { samples: 256, features: 4, classes: 3, seed: 3 },
            location: DataLocation::Host,
            training: TrainingSpec {
                optimizer: OptimizerSpec::Sgd { lr: 0.001, momentum: 0.9, weight_decay: 0.0 },
                batch_size: 32,
                steps: 2,
                dtype: Dtype::Float32,
                seed: 0,
                techniques: Techniques {
                    accumulation: 1,
                    amp: Amp::Off,
                    checkpoint: Checkpoint::Every(1),
                    mode: Mode::Train,
                    history: History::LossValue,
                    optimizer_impl: None,
                },
            },
        };
        assert_eq!(
            spec.variants,
            [
                Variant { name: "wide_fp16".into(), config: wide.clone() },
                Variant { name: "sgd".into(), config: sgd.clone() }
            ]
        );
        assert_eq!(spec.configs(), [(Some("wide_fp16"), &wide), (Some("sgd"), &sgd)]);
    }

    #[test]
    fn a_variant_overrides_scaler_keys_one_by_one() {
        let text = format!(
            r#"{MINIMAL}amp = "fp16"
scaler = {{ init_scale = 1024.0, growth_interval = 10 }}

[[variant]]
name = "slow_growth"
[variant.training.scaler]
growth_interval = 500
backoff_factor = 0.25

[[variant]]
name = "same"
"#
        );
        let spec = parse_at(&text).unwrap();
        let base =
            ScalerSpec { init_scale: 1024.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 10 };
        assert_eq!(spec.base.training.techniques.amp, Amp::Fp16 { scaler: base });
        let slow =
            ScalerSpec { init_scale: 1024.0, growth_factor: 2.0, backoff_factor: 0.25, growth_interval: 500 };
        let mut want = spec.base.clone();
        want.training.techniques.amp = Amp::Fp16 { scaler: slow };
        assert_eq!(spec.variants[0], Variant { name: "slow_growth".into(), config: want });
        assert_eq!(spec.variants[1], Variant { name: "same".into(), config: spec.base.clone() });
        // A variant cannot remove a key: the base's scaler stays, and bf16 refuses it.
        let text = format!(
            "{MINIMAL}amp = \"fp16\"\nscaler = {{ init_scale = 1024.0 }}\n\n[[variant]]\nname = \"bf16\"\ntraining.amp = \"bf16\"\n"
        );
        assert_eq!(
            err(&text),
            r#"experiments/x.toml:17:10: in variant[0] "bf16" (line 19): training.scaler: only amp = "fp16" uses a grad scaler, and amp is "bf16"; remove scaler, or set amp = "fp16""#
        );
    }

    #[test]
    fn unknown_keys_in_a_variant_are_named() {
        let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\nhiden = 3\n"));
        assert_eq!(
            e,
            "experiments/x.toml:19:1: unknown key `hiden` in variant[0]; expected one of: name, model, data, training"
        );
        let text = format!(
            "{MINIMAL}\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"\n[variant.model]\nwidht = 3\n"
        );
        assert_eq!(
            err(&text),
            "experiments/x.toml:22:1: unknown key `widht` in variant[1].model; expected one of: hidden, depth"
        );
        let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\n[variant.run]\ndevice = \"cpu\"\n"));
        assert_eq!(
            e,
            "experiments/x.toml:19:10: unknown key `run` in variant[0]: [run] is the whole spec's and cannot be varied; move it out of the variant (a variant may set model, data and training)"
        );
        let e =
            err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\nsweep = {{ field = \"model.depth\" }}\n"));
        assert!(
            e.starts_with(
                "experiments/x.toml:19:1: unknown key `sweep` in variant[0]: [sweep] is the whole spec's"
            ),
            "{e}"
        );
        assert_eq!(
            err(&format!("{MINIMAL}\n[variant]\nname = \"a\"\n")),
            "experiments/x.toml:17:1: variant: must be a list, got [variant]; write each variant as a [[variant]] table"
        );
        assert_eq!(
            err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\n[variant.training]\namp = 3\n")),
            r#"experiments/x.toml:20:7: variant[0].training.amp: must be a string, got 3; set it to "off", "fp16" or "bf16", e.g. amp = "fp16""#
        );
    }

    #[test]
    fn an_invalid_variant_is_named_with_its_line() {
        let variant = |base: &str, keys: &str| err(&format!("{base}\n[[variant]]\nname = \"v\"\n{keys}\n"));
        // A value written in the variant: named variant[0].key, at its line.
        assert_eq!(
            variant(MINIMAL, "training.amp = \"fp8\""),
            r#"experiments/x.toml:19:16: variant[0].training.amp: must be one of "off", "fp16", "bf16", got "fp8"; e.g. amp = "fp16""#
        );
        assert_eq!(
            variant(MINIMAL, "training.batch_size = 256"),
            "experiments/x.toml:19:23: variant[0].training.batch_size 256 is larger than data.samples 128: a batch is drawn from the data set without repeats; raise data.samples"
        );
        assert_eq!(
            variant(&format!("{MINIMAL}accumulation = 4\n"), "training.mode = \"forward\""),
            r#"experiments/x.toml:20:17: variant[0].training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only"#
        );
        // A base value the variant breaks: placed at it, naming the variant and its line.
        let sgd = format!("{}momentum = 0.9\n", edit("\"adam\"", "\"sgd\""));
        assert_eq!(
            variant(&sgd, "training.optimizer = \"adam\""),
            r#"experiments/x.toml:16:12: in variant[0] "v" (line 18): training.momentum: only sgd uses momentum, but optimizer = "adam"; remove momentum, or set optimizer = "sgd""#
        );
        assert_eq!(
            variant(MINIMAL, "data.samples = 16"),
            r#"experiments/x.toml:15:14: in variant[0] "v" (line 17): training.batch_size 32 is larger than data.samples 16: a batch is drawn from the data set without repeats; raise data.samples"#
        );
        // The base must be valid by itself, even where a variant would fill the gap.
        let e = variant(&edit("depth = 2\n", ""), "model.depth = 3");
        assert!(e.starts_with("experiments/x.toml:4:1: model.depth is missing;"), "{e}");
    }

    #[test]
    fn variant_names_are_required_folder_safe_and_unique() {
        let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\n\n[[variant]]\nname = \"a\"\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:21:8: variant[1].name: "a" is already the name of variant[0]; give each variant its own name"#
        );
        let e = err(&format!("{MINIMAL}\n[[variant]]\nmodel.hidden = 8\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:17:1: variant[0].name is missing; add name = "fp16" under [[variant]] (a name of lowercase letters, digits, _ and -)"#
        );
        let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"FP16\"\n"));
        assert_eq!(
            e,
            r#"experiments/x.toml:18:8: variant[0].name: must be lowercase letters, digits, _ or -, got "FP16"; set it to a name of lowercase letters, digits, _ and -, e.g. name = "fp16""#
        );
    }

    #[test]
    fn sweep_bounds_are_checked_against_every_variant() {
        // Lines: 17 [[variant]] "small", 21 [sweep], 23 the sweep's values.
        let text = |mode: &str| {
            format!(
                "{MINIMAL}\n[[variant]]\nname = \"small\"\ndata.samples = 64\n\n[sweep]\nfield = \"training.batch_size\"\n{mode}\n"
            )
        };
        let spec = parse_at(&text("values = [16, 64]")).unwrap();
        let mut small = minimal_config();
        small.data = DataSpec::Synthetic { samples: 64, features: 4, classes: 3, seed: 0 };
        assert_eq!(spec.variants, [Variant { name: "small".into(), config: small }]);
        assert_eq!(
            err(&text("values = [16, 100]")),
            r#"experiments/x.toml:23:15: in variant[0] "small" (line 17): sweep.values[1]: training.batch_size 100 is larger than data.samples 64: a batch is drawn from the data set without repeats; raise data.samples"#
        );
        assert_eq!(
            err(&text("search = { start = 1, max = 100 }")),
            r#"experiments/x.toml:23:29: in variant[0] "small" (line 17): sweep.search.max: training.batch_size 100 is larger than data.samples 64: a batch is drawn from the data set without repeats; raise data.samples"#
        );
        assert_eq!(
            err(&text("halve = { start = 100 }")),
            r#"experiments/x.toml:23:19: in variant[0] "small" (line 17): sweep.halve.start: training.batch_size 100 is larger than data.samples 64: a batch is drawn from the data set without repeats; raise data.samples"#
        );
    }

    #[test]
    fn a_swept_field_may_be_left_out_of_variants_too() {
        let no_batch = edit("batch_size = 32\n", "");
        let text = format!(
            "{no_batch}\n[[variant]]\nname = \"deep\"\nmodel.depth = 8\n\n[sweep]\nfield = \"training.batch_size\"\nvalues = [16, 64]\n"
        );
        let spec = parse_at(&text).unwrap();
        assert_eq!(spec.base.training.batch_size, 16);
        let mut deep = minimal_config();
        deep.model.depth = 8;
        deep.training.batch_size = 16;
        assert_eq!(spec.variants, [Variant { name: "deep".into(), config: deep }]);
    }

    #[test]
    fn a_budget_per_device() {
        let spec = parse_at(&format!("{MINIMAL}[run]\nbudget = {{ cpu = \"128MiB\", cuda = \"192MiB\" }}\n"))
            .unwrap();
        assert_eq!((spec.run.budget_on(false), spec.run.budget_on(true)), (Some(128 << 20), Some(192 << 20)));
        let one = parse_at(&format!("{MINIMAL}[run]\nbudget = \"1GiB\"\n")).unwrap();
        assert_eq!((one.run.budget_on(false), one.run.budget_on(true)), (Some(1 << 30), Some(1 << 30)));
        let cuda_only = parse_at(&format!("{MINIMAL}[run]\nbudget = {{ cuda = \"2GiB\" }}\n")).unwrap();
        assert_eq!((cuda_only.run.budget_on(false), cuda_only.run.budget_on(true)), (None, Some(2 << 30)));
        let e = err(&format!("{MINIMAL}[run]\nbudget = {{ gpu = \"2GiB\" }}\n"));
        assert!(e.starts_with("experiments/x.toml:17:10: run.budget: unknown key `gpu`; a budget per device has keys cpu and cuda"), "{e}");
        let e = err(&format!("{MINIMAL}[run]\nbudget = {{ cuda = \"lots\" }}\n"));
        assert!(e.starts_with("experiments/x.toml:17:10: run.budget.cuda: \"lots\" is not a size"), "{e}");
        let e = err(&format!("{MINIMAL}[run]\nbudget = {{ cpu = 0 }}\n"));
        assert!(e.contains("run.budget.cpu") && e.contains("more than 0 bytes"), "{e}");
    }

    #[test]
    fn data_location_is_host_unless_asked() {
        assert_eq!(parse_at(MINIMAL).unwrap().base.location, DataLocation::Host);
        let text = MINIMAL.replace("classes = 3\n", "classes = 3\nlocation = \"device\"\n");
        assert_eq!(parse_at(&text).unwrap().base.location, DataLocation::Device);
        let e = err(&MINIMAL.replace("classes = 3\n", "classes = 3\nlocation = \"gpu\"\n"));
        assert!(
            e.starts_with(
                r#"experiments/x.toml:12:12: data.location: must be one of "host", "device", got "gpu""#
            ),
            "{e}"
        );
        let variant = format!("{MINIMAL}\n[[variant]]\nname = \"on-device\"\ndata.location = \"device\"\n");
        assert_eq!(parse_at(&variant).unwrap().variants[0].config.location, DataLocation::Device);
    }

    #[test]
    fn optimizer_impl_is_pytorchs_pick_unless_named() {
        let t = |spec: &Spec| spec.base.training.techniques.optimizer_impl;
        assert_eq!(t(&parse_at(MINIMAL).unwrap()), None);
        assert_eq!(OptimizerImpl::resolve(None, true), OptimizerImpl::Foreach);
        assert_eq!(OptimizerImpl::resolve(None, false), OptimizerImpl::ForLoop);
        let fused = parse_at(&format!("{MINIMAL}optimizer_impl = \"fused\"\n")).unwrap();
        assert_eq!(t(&fused), Some(OptimizerImpl::Fused));
        assert_eq!(OptimizerImpl::resolve(t(&fused), true), OptimizerImpl::Fused);
        let e = err(&format!("{MINIMAL}optimizer_impl = \"multi_tensor\"\n"));
        assert!(
            e.contains(r#"training.optimizer_impl: must be one of "for_loop", "foreach", "fused", got "multi_tensor""#),
            "{e}"
        );
    }
}
