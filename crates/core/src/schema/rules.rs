//! What each column of `summary.csv` and `trace.csv` may hold, for its meaning and not only its
//! type: one table per file, beside the columns' definitions, which every reader applies
//! (`results::experiment`). A results folder may have been edited by hand, cut by a full disk or
//! made by something else; a value that no run writes (a depth of -1, an OOM that says nowhere
//! where it struck, a step of 10^308 seconds) is refused naming its file, row and column, instead
//! of being drawn into a chart, compared and judged. Every column has a rule (a test holds the
//! tables to the files' headers) and every rule its bad values (a test feeds each column them).
//!
//! A rule is checked in two places: on the text of the cell as the file holds it ([`check_cell`],
//! whatever can be told from the value alone and the device), and on the whole row once parsed
//! ([`check_summary_row`]), for what depends on other columns or on the recorded spec.
use crate::spec::{Named, Spec};

use super::{Phase, Status, SummaryRow};

/// The longest a run may say a trial, a phase or a whole run took: 10^7 seconds, about four
/// months. No trial runs that long; a larger time is a damaged file, and would swamp every sum.
pub const MAX_SECONDS: f64 = 1e7;

/// More bytes than any tensor may hold (2^63, libtorch's `int64_t` sizes, as the estimate and
/// the spec's limits bound them).
pub const MAX_BYTES: u64 = 1 << 63;

/// What a column's values must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// The trial's number: 1, 2, 3... as written.
    Trial,
    /// A variant name a spec allows, and one of the recorded spec's (empty without variants).
    Variant,
    /// A key oomlab sweeps, the recorded spec's (empty without a sweep).
    Swept,
    /// The swept value: there exactly when a key is, and one that the recorded spec's own
    /// validation takes for that key in that variant.
    SweptValue,
    /// How the trial ended: an `oom` row says where (`oom_phase` and `oom_step`).
    Status,
    /// Where an OOM struck (or the estimate put one, for a skipped trial; where an error
    /// struck): never on a trial that fitted.
    Place,
    /// A step of the trial: at most the spec's steps for it (0: the set-up).
    Step,
    /// Bytes a device held: at most the device's capacity, as the manifest records it.
    Held,
    /// Bytes asked for, predicted or counted: at most 2^63.
    Bytes,
    /// Seconds a run measured: finite, not negative, at most [`MAX_SECONDS`]; a part of a trial
    /// (a step, its set-up) at most the trial's.
    Seconds,
    /// A whole number of things, at most this many.
    AtMost(u64),
    /// One of these words, or empty (files from before the column).
    OneOf(&'static [&'static str]),
    /// A finite number (a relative error, the grad scaler's scale).
    Finite,
    /// Any number: a loss, which a diverged trial's is infinite or NaN.
    AnyNumber,
    /// Words: a model's description, an error's message.
    Text,
}

use crate::spec::limits::{
    MAX_ACCUMULATION, MAX_BATCH_SIZE, MAX_CHANNELS, MAX_CLASSES, MAX_DEPTH, MAX_HIDDEN, MAX_IMAGE_SIZE,
    MAX_PHASES, MAX_ROUNDS, MAX_SAMPLES, MAX_SAMPLE_ELEMENTS, MAX_SEQ_LEN, MAX_STEPS, MAX_VOCAB,
    MAX_WORLD_SIZE,
};

/// `summary.csv`'s columns, in the file's order, each with its rule.
pub const SUMMARY: &[(&str, Rule)] = &[
    ("trial", Rule::Trial),
    ("variant", Rule::Variant),
    ("field", Rule::Swept),
    ("value", Rule::SweptValue),
    ("status", Rule::Status),
    ("oom_phase", Rule::Place),
    ("oom_step", Rule::Step),
    ("model", Rule::Text),
    ("model_kind", Rule::OneOf(&["mlp", "cnn", "transformer", "torchscript"])),
    ("depth", Rule::AtMost(MAX_DEPTH as u64)),
    ("hidden", Rule::AtMost(MAX_HIDDEN as u64)),
    ("arch", Rule::OneOf(&["plain", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"])),
    ("channels", Rule::AtMost(MAX_CHANNELS as u64)),
    ("d_model", Rule::AtMost(MAX_HIDDEN as u64)),
    ("nhead", Rule::AtMost(MAX_HIDDEN as u64)),
    ("num_layers", Rule::AtMost(MAX_DEPTH as u64)),
    ("dim_feedforward", Rule::AtMost(MAX_HIDDEN as u64)),
    ("batch_size", Rule::AtMost(MAX_BATCH_SIZE as u64)),
    ("samples", Rule::AtMost(MAX_SAMPLES as u64)),
    ("features", Rule::AtMost(MAX_SAMPLE_ELEMENTS as u64)),
    // A token data set's classes are its vocabulary.
    ("classes", Rule::AtMost(if MAX_CLASSES > MAX_VOCAB { MAX_CLASSES } else { MAX_VOCAB } as u64)),
    ("image_channels", Rule::AtMost(MAX_CHANNELS as u64)),
    ("image_size", Rule::AtMost(MAX_IMAGE_SIZE as u64)),
    ("seq_len", Rule::AtMost(MAX_SEQ_LEN as u64)),
    ("vocab", Rule::AtMost(MAX_VOCAB as u64)),
    ("optimizer", Rule::OneOf(&["sgd", "sgd_momentum", "adam", "adamw"])),
    ("optimizer_impl", Rule::OneOf(&["for_loop", "foreach", "fused"])),
    ("dtype", Rule::OneOf(&["float32", "float64", "bfloat16", "float16"])),
    ("accumulation", Rule::AtMost(MAX_ACCUMULATION as u64)),
    ("amp", Rule::OneOf(&["off", "fp16", "bf16"])),
    ("checkpoint", Rule::Text),
    ("mode", Rule::OneOf(&["train", "forward", "forward_no_grad"])),
    ("history", Rule::OneOf(&["none", "loss_tensor", "loss_value"])),
    ("max_memory_allocated", Rule::Held),
    ("max_memory_reserved", Rule::Held),
    ("predicted_peak", Rule::Bytes),
    ("predicted_error", Rule::Finite),
    ("baseline_allocated", Rule::Held),
    ("after_allocated", Rule::Held),
    ("released_reserved", Rule::Held),
    ("emptied_reserved", Rule::Held),
    ("param_count", Rule::AtMost(MAX_BYTES)),
    ("param_bytes", Rule::Bytes),
    ("step_seconds", Rule::Seconds),
    ("data_seconds", Rule::Seconds),
    ("model_seconds", Rule::Seconds),
    ("steps_total_seconds", Rule::Seconds),
    ("trial_seconds", Rule::Seconds),
    ("final_loss", Rule::AnyNumber),
    ("skipped_steps", Rule::AtMost(MAX_STEPS as u64)),
    ("final_scale", Rule::Finite),
    ("oom_requested", Rule::Bytes),
    ("oom_total_capacity", Rule::Bytes),
    ("oom_free", Rule::Held),
    ("oom_allocated", Rule::Held),
    ("oom_reserved", Rule::Held),
    ("message", Rule::Text),
    ("round", Rule::AtMost(MAX_ROUNDS as u64)),
    ("trace_rows", Rule::AtMost(MAX_PHASES as u64)),
    ("world_size", Rule::AtMost(MAX_WORLD_SIZE as u64)),
    ("rank", Rule::AtMost(MAX_WORLD_SIZE as u64)),
];

/// `trace.csv`'s columns, in the file's order, each with its rule. (A trace row's trial must be
/// one of summary.csv's, in order, and its step and micro-batch within a spec's: the reader
/// checks those against the rows.)
pub const TRACE: &[(&str, Rule)] = &[
    ("trial", Rule::Trial),
    ("variant", Rule::Variant),
    ("value", Rule::SweptValue),
    ("step", Rule::Step),
    ("micro", Rule::AtMost(MAX_ACCUMULATION as u64)),
    ("phase", Rule::OneOf(PHASES)),
    ("memory_allocated", Rule::Held),
    ("memory_reserved", Rule::Held),
    ("max_memory_allocated", Rule::Held),
    ("max_memory_reserved", Rule::Held),
    ("device_used", Rule::Held),
    ("phase_seconds", Rule::Seconds),
    ("elapsed_seconds", Rule::Seconds),
    ("predicted_peak", Rule::Bytes),
    ("page_faults", Rule::AtMost(MAX_BYTES)),
    ("rank", Rule::AtMost(MAX_WORLD_SIZE as u64)),
];

/// Columns by the names older files gave them: `summary.csv` called `oom_phase` and `oom_step`
/// `phase` and `step` before 2026-11-26.
const OLD_NAMES: &[(&str, &str)] = &[("phase", "oom_phase"), ("step", "oom_step")];

/// The rule of column `name` in `table`, under its name of now or of an older file.
pub fn rule_for(table: &[(&str, Rule)], name: &str) -> Option<Rule> {
    let find = |n: &str| table.iter().find(|(c, _)| *c == n).map(|&(_, r)| r);
    find(name).or_else(|| OLD_NAMES.iter().find(|(old, _)| *old == name).and_then(|&(_, now)| find(now)))
}

/// The phases' words, as `Phase::as_str` writes them.
const PHASES: &[&str] =
    &["data", "model", "wrap", "to_device", "forward", "backward", "optimizer_step", "zero_grad", "step"];

/// What the cells are checked against: the device's capacity as the manifest records it (0 or
/// unknown: only 2^63 bounds what it held).
#[derive(Debug, Clone, Copy, Default)]
pub struct Device {
    pub capacity: u64,
}

/// Checks one cell's text (`""`: empty) against its column's rule, as far as the value alone
/// and the device tell; `Err` says why, in words that follow the column's name.
pub fn check_cell(rule: Rule, text: &str, device: Device) -> Result<(), String> {
    if text.is_empty() {
        // An empty cell is a column that does not apply, or a file from before it; a whole
        // row's rules say where one must not be empty.
        return Ok(());
    }
    let number = || text.parse::<f64>().map_err(|_| format!("{text:?} is not a number"));
    let whole = || text.parse::<u64>().map_err(|_| format!("{text:?} is not a whole number"));
    match rule {
        Rule::Trial => {
            if whole()? == 0 {
                return Err("trial 0: trials are numbered from 1".into());
            }
        }
        Rule::Step => {
            whole()?;
        }
        Rule::AtMost(limit) => {
            let n = whole()?;
            if n > limit {
                return Err(format!("{n} is more than any run writes (at most {limit})"));
            }
        }
        Rule::Held => {
            let n = whole()?;
            if n > MAX_BYTES {
                return Err(format!("{n} bytes is more memory than any device has"));
            }
            if device.capacity > 0 && n > device.capacity {
                return Err(format!(
                    "{n} bytes is more than the device holds ({} bytes, as manifest.json records it)",
                    device.capacity
                ));
            }
        }
        Rule::Bytes => {
            let n = whole()?;
            if n > MAX_BYTES {
                return Err(format!("{n} bytes is more memory than any device has"));
            }
        }
        Rule::Seconds => {
            let s = number()?;
            if !(0.0..=MAX_SECONDS).contains(&s) {
                return Err(format!(
                    "{s} is not a time a run measures (finite, not negative, at most {MAX_SECONDS:e} s)"
                ));
            }
        }
        Rule::Finite => {
            let x = number()?;
            if !x.is_finite() {
                return Err(format!("{x} is not a finite number"));
            }
        }
        Rule::SweptValue => {
            let x = number()?;
            if !x.is_finite() {
                return Err(format!("{x} is not a finite number"));
            }
        }
        Rule::AnyNumber => {
            number()?;
        }
        Rule::OneOf(words) => {
            if !words.contains(&text) {
                return Err(format!(
                    "{text:?} is not one of the words oomlab writes there ({})",
                    words.join(", ")
                ));
            }
        }
        // Told by the whole row, or by the spec: [`check_summary_row`] and the reader.
        Rule::Variant | Rule::Swept | Rule::Status | Rule::Place | Rule::Text => {}
    }
    Ok(())
}

/// Checks a parsed row against the rules that tell by other columns or by the recorded spec
/// (`None`: a spec that no longer parses, which the reader refuses before): the swept value
/// there with its key and one the spec's validation takes, an OOM with where it struck, a step
/// within the spec's steps, a trial's parts within its time. `Err` names the column and why.
pub fn check_summary_row(row: &SummaryRow, spec: Option<&Spec>) -> Result<(), (&'static str, String)> {
    match (row.field, row.value) {
        (Some(f), None) => return Err(("value", format!("empty, on a row that sweeps {}", f.key()))),
        (None, Some(v)) => {
            return Err(("value", format!("{v} on a row that sweeps nothing (`field` is empty)")))
        }
        _ => {}
    }
    // The trial's configuration as the spec makes it: what bounds its steps.
    let config = match (spec, row.field, row.value) {
        (Some(spec), field, value) => {
            let Some((_, base)) = spec.configs().into_iter().find(|(v, _)| v.unwrap_or("") == row.variant)
            else {
                return Err((
                    "variant",
                    format!("{:?} is not a variant of the spec manifest.json records", row.variant),
                ));
            };
            match (field, value) {
                (Some(f), Some(v)) => Some(base.with(f, v).map_err(|e| {
                    (
                        "value",
                        format!(
                            "{} is not a value of {} that the recorded spec takes: {e}",
                            show(v),
                            f.key()
                        ),
                    )
                })?),
                _ => Some(base.clone()),
            }
        }
        (None, Some(f), Some(v)) => {
            if f.is_integer() && (v.fract() != 0.0 || v < 0.0) {
                return Err((
                    "value",
                    format!("{} is not a value of {}: it takes whole numbers", show(v), f.key()),
                ));
            }
            None
        }
        (None, ..) => None,
    };
    let steps = config.as_ref().map_or(MAX_STEPS, |c| c.training.steps);
    match row.status {
        Status::Oom if row.phase.is_none() => {
            return Err((
                "oom_phase",
                "empty on an `oom` row: an out-of-memory is recorded with where it struck".into(),
            ))
        }
        Status::Oom if row.step.is_none() => {
            return Err((
                "oom_step",
                "empty on an `oom` row: an out-of-memory is recorded with its step".into(),
            ))
        }
        Status::Ok | Status::Diverged if row.phase.is_some() || row.step.is_some() => {
            let column = if row.phase.is_some() { "oom_phase" } else { "oom_step" };
            return Err((column, format!("set on a trial that fitted (`status` {})", row.status)));
        }
        _ => {}
    }
    if let (Some(step), Some(phase)) = (row.step, row.phase) {
        let setup = matches!(phase, Phase::Data | Phase::Model);
        if setup != (step == 0) {
            return Err((
                "oom_step",
                format!("step {step} for the phase {phase} (0 is the set-up's, and only its)"),
            ));
        }
    }
    if let Some(step) = row.step.filter(|&s| s > steps) {
        return Err(("oom_step", format!("step {step}, past the trial's {steps} steps")));
    }
    if let Some(skipped) = row.skipped_steps.filter(|&s| s > steps) {
        return Err(("skipped_steps", format!("{skipped} skipped of the trial's {steps} steps")));
    }
    // A part of a trial is no longer than the trial (with room for the clocks' rounding).
    if let Some(trial) = row.trial_seconds {
        let parts = [
            ("step_seconds", row.step_seconds),
            ("data_seconds", row.data_seconds),
            ("model_seconds", row.model_seconds),
            ("steps_total_seconds", row.steps_total_seconds),
        ];
        if let Some((column, s)) =
            parts.iter().find_map(|&(c, s)| s.filter(|&s| s > trial * 1.01 + 1e-3).map(|s| (c, s)))
        {
            return Err((column, format!("{s} s, longer than the whole trial (trial_seconds {trial})")));
        }
    }
    Ok(())
}

/// A swept value as a spec writes it: `4`, not `4.0`.
fn show(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The rules' bad values, for a column of `rule` in a folder whose device holds `capacity`
/// bytes: what the tests feed each column, each of which a reader must refuse naming it.
/// (Values of the rules that tell by the row or the spec are in the tests that know the row.)
pub fn bad_values(rule: Rule, capacity: u64) -> Vec<String> {
    let s = |v: &[&str]| v.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    match rule {
        Rule::Trial => s(&["0", "-1", "x"]),
        Rule::Step => s(&["-1", "x"]),
        Rule::AtMost(limit) => vec![(limit as u128 + 1).to_string(), "-1".into(), "1.5".into()],
        Rule::Held => {
            vec![(capacity as u128 + 1).to_string(), (MAX_BYTES as u128 + 1).to_string(), "-1".into()]
        }
        Rule::Bytes => vec![(MAX_BYTES as u128 + 1).to_string(), "-1".into()],
        Rule::Seconds => s(&["-1", "NaN", "inf", "1e308"]),
        Rule::Finite => s(&["NaN", "inf", "x"]),
        Rule::SweptValue => s(&["-1", "1e308", "NaN", "0.5"]),
        Rule::AnyNumber => s(&["x"]),
        Rule::OneOf(_) => s(&["bogus"]),
        Rule::Variant => s(&["../x", "nonexistent"]),
        Rule::Swept => s(&["training.lr", "model.nonsense"]),
        Rule::Status => s(&["bogus"]),
        Rule::Place => s(&["bogus"]),
        Rule::Text => Vec::new(),
    }
}

/// The words each closed column takes, from the spec's own tables where the spec has one: a
/// word the spec learns is a word the reader takes (held by a test).
pub fn words_of<T: Named>() -> Vec<&'static str> {
    T::ALL.iter().map(|c| c.as_str()).collect()
}

/// The first of `columns` that is not a time a run measures (finite, not negative, at most
/// [`MAX_SECONDS`]), with its name: readers divide and scale by these, so one NaN or negative would turn a verdict.
pub fn not_a_time<K: Copy>(columns: &[(K, Option<f64>)]) -> Option<(K, f64)> {
    let bad = |v: &f64| !v.is_finite() || *v < 0.0 || *v > MAX_SECONDS;
    columns.iter().find_map(|&(c, v)| v.filter(bad).map(|v| (c, v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Dtype, Field, History, Mode, ModelKind, OptimizerImpl};

    fn rule(table: &[(&str, Rule)], column: &str) -> Rule {
        table.iter().find(|(c, _)| *c == column).unwrap_or_else(|| panic!("no rule for {column}")).1
    }

    /// Each file's table names its columns in the file's order, and nothing else: a column added
    /// without its rule fails here.
    #[test]
    fn every_column_of_both_files_has_a_rule() {
        use crate::schema::tests::{a_record, header};
        let summary = header(&SummaryRow::default());
        assert_eq!(summary, SUMMARY.iter().map(|(c, _)| c.to_string()).collect::<Vec<_>>());
        let trace = header(&a_record());
        assert_eq!(trace, TRACE.iter().map(|(c, _)| c.to_string()).collect::<Vec<_>>());
    }

    /// The closed columns take exactly the words the spec and the schema write.
    #[test]
    fn closed_columns_take_the_words_oomlab_writes() {
        let words = |c: &str| match rule(SUMMARY, c) {
            Rule::OneOf(w) => w.to_vec(),
            r => panic!("{c}: {r:?}"),
        };
        assert_eq!(words("dtype"), words_of::<Dtype>());
        assert_eq!(words("optimizer_impl"), words_of::<OptimizerImpl>());
        assert_eq!(words("mode"), words_of::<Mode>());
        assert_eq!(words("model_kind"), words_of::<ModelKind>());
        assert_eq!(words("history"), words_of::<History>());
        let phases: Vec<&str> = [
            Phase::Data,
            Phase::Model,
            Phase::Wrap,
            Phase::ToDevice,
            Phase::Forward,
            Phase::Backward,
            Phase::OptimizerStep,
            Phase::ZeroGrad,
            Phase::Step,
        ]
        .map(Phase::as_str)
        .to_vec();
        assert_eq!(PHASES, phases);
    }

    /// Every rule's bad values are refused by the cell check or, for the rules that need the
    /// row, are the row tests' (a value a cell check lets through is listed only where the row
    /// check catches it).
    #[test]
    fn each_rules_bad_values_are_refused_by_the_cell_check() {
        let device = Device { capacity: 1 << 30 };
        for &(column, rule) in SUMMARY.iter().chain(TRACE) {
            for bad in bad_values(rule, device.capacity) {
                let by_cell = check_cell(rule, &bad, device).is_err();
                let by_row = matches!(
                    rule,
                    Rule::Variant | Rule::Swept | Rule::Status | Rule::Place | Rule::SweptValue
                );
                assert!(by_cell || by_row, "{column} ({rule:?}) takes {bad:?}");
            }
        }
        assert!(check_cell(Rule::Seconds, "0.25", device).is_ok());
        assert!(check_cell(Rule::Held, &(1u64 << 30).to_string(), device).is_ok());
        assert!(check_cell(Rule::Held, "", device).is_ok(), "an empty cell is a column that does not apply");
    }

    fn row(status: Status) -> SummaryRow {
        SummaryRow { trial: 1, status, ..SummaryRow::default() }
    }

    #[test]
    fn a_row_is_checked_against_its_other_columns() {
        let mut oom = row(Status::Oom);
        assert_eq!(check_summary_row(&oom, None).unwrap_err().0, "oom_phase");
        oom.phase = Some(Phase::Backward);
        assert_eq!(check_summary_row(&oom, None).unwrap_err().0, "oom_step");
        oom.step = Some(1);
        assert!(check_summary_row(&oom, None).is_ok());
        oom.step = Some(0);
        assert_eq!(check_summary_row(&oom, None).unwrap_err().0, "oom_step", "step 0 is the set-up's");
        let mut ok = row(Status::Ok);
        ok.phase = Some(Phase::Forward);
        ok.step = Some(1);
        assert_eq!(check_summary_row(&ok, None).unwrap_err().0, "oom_phase");
        let mut swept = row(Status::Ok);
        swept.field = Some(Field::Depth);
        assert_eq!(check_summary_row(&swept, None).unwrap_err().0, "value");
        swept.value = Some(-1.0);
        assert_eq!(check_summary_row(&swept, None).unwrap_err().0, "value");
        swept.value = Some(3.0);
        assert!(check_summary_row(&swept, None).is_ok());
        let mut timed = row(Status::Ok);
        (timed.trial_seconds, timed.step_seconds) = (Some(1.0), Some(5.0));
        assert_eq!(check_summary_row(&timed, None).unwrap_err().0, "step_seconds");
    }

    #[test]
    fn a_swept_value_is_one_the_recorded_spec_takes() {
        let spec = crate::spec::parse(
            "[experiment]\nname = \"x\"\n[model]\nhidden = 8\ndepth = 1\n[data]\nsamples = 8\nfeatures = 4\n\
             classes = 2\n[training]\noptimizer = \"adam\"\nbatch_size = 4\nsteps = 2\n[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n",
            std::path::Path::new("x.toml"),
        )
        .unwrap();
        let mut r = row(Status::Ok);
        r.field = Some(Field::Depth);
        for (value, fine) in [(2.0, true), (0.0, false), (-1.0, false), (1e308, false), (2.5, false)] {
            r.value = Some(value);
            let got = check_summary_row(&r, Some(&spec));
            assert_eq!(got.is_ok(), fine, "depth {value}: {got:?}");
        }
        r.value = Some(2.0);
        let mut oom =
            SummaryRow { status: Status::Oom, phase: Some(Phase::Backward), step: Some(3), ..r.clone() };
        assert_eq!(
            check_summary_row(&oom, Some(&spec)).unwrap_err().0,
            "oom_step",
            "past the spec's 2 steps"
        );
        oom.step = Some(2);
        assert!(check_summary_row(&oom, Some(&spec)).is_ok());
        r.variant = "other".into();
        assert_eq!(check_summary_row(&r, Some(&spec)).unwrap_err().0, "variant");
    }
}
