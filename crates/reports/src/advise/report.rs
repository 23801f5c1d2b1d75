//! The advice in words: a table for the terminal, `advice.md` beside the results (with the
//! chart and where every number comes from), `advice.json` for tools, and the calibration used
//! (`calibration.json`, which `advise --calibration` reads back).
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Cell, CellAlignment, Table};

use super::evaluate::{Evaluated, Verdict};
use super::{Advice, TimingSource};
use crate::spec::{format_size, Named};

/// Fitting options listed in the table; the rest are in `advice.json`.
pub const SHOWN: usize = 12;
/// Options that do not fit listed after them, from the nearest miss.
pub const MISSES: usize = 4;

/// The files an advice is written to, in `dir`.
pub const FILES: [&str; 5] = ["advice.md", "advice.json", "calibration.json", "advice.png", "advice.svg"];

/// "1 x 2000, batch 1173000 (accumulation 1), Adam for_loop, float32, amp off, checkpoint none".
pub fn describe_config(a: &Advice) -> String {
    let c = &a.written.candidate.config;
    let t = &c.training;
    let cuda = a.target == crate::estimate::Target::Cuda;
    let implementation = crate::spec::OptimizerImpl::resolve(t.techniques.optimizer_impl, cuda);
    // An mse target has values, not classes.
    let target = match &c.model {
        crate::spec::ModelSpec::Torchscript(s) if s.loss == crate::spec::Loss::Mse => {
            "an mse target".to_string()
        }
        _ => format!("{} classes", a.data.classes),
    };
    format!(
        "{}, batch {} x {} micro-batch(es), {} ({}), {}, amp {}, checkpoint {}, data {} x {} ({target})",
        c.model.describe(),
        t.batch_size,
        t.techniques.accumulation,
        t.optimizer.name(),
        implementation.as_str(),
        t.dtype.as_str(),
        t.techniques.amp.as_str(),
        t.techniques.checkpoint.name(),
        a.data.samples,
        a.data.features,
    )
}

fn signed_size(b: i64) -> String {
    if b < 0 {
        format!("-{}", format_size(b.unsigned_abs()))
    } else {
        format_size(b as u64)
    }
}

fn seconds(s: Option<f64>) -> String {
    match s {
        Some(s) if s >= 1.0 => format!("{s:.2} s"),
        Some(s) => format!("{:.1} ms", s * 1e3),
        None => "-".into(),
    }
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}x"))
}

/// One option in a sentence: "#3 micro-batch 586500 x 2: peak 8.9 GiB, 7.0 GiB headroom, 1.04x the time".
pub fn sentence(o: &Evaluated) -> String {
    let time = match o.relative_time {
        Some(r) => format!(", {r:.2}x the time per sample (a step {})", seconds(o.step_seconds)),
        None => String::new(),
    };
    let training = match o.effect {
        super::Effect::Same => "",
        super::Effect::FullPrecision => " (autocast off: full precision)",
        super::Effect::Precision => " (lower precision)",
        super::Effect::Changed => " (CHANGES the training)",
    };
    format!(
        "#{} {}{training}: peak {}, {} headroom{time}",
        o.rank,
        o.describe,
        format_size(o.peak),
        signed_size(o.headroom)
    )
}

fn options_table(rows: &[&Evaluated], markdown: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(if markdown { presets::ASCII_MARKDOWN } else { presets::NOTHING });
    t.set_header([
        "#",
        "option",
        "training",
        "predicted",
        "peak",
        "headroom",
        "step",
        "per sample vs written",
    ]);
    for o in rows {
        t.add_row(vec![
            Cell::new(o.rank).set_alignment(CellAlignment::Right),
            Cell::new(&o.describe),
            Cell::new(o.effect.as_str()),
            Cell::new(o.verdict.as_str()),
            Cell::new(format_size(o.peak)).set_alignment(CellAlignment::Right),
            Cell::new(signed_size(o.headroom)).set_alignment(CellAlignment::Right),
            Cell::new(seconds(o.step_seconds)).set_alignment(CellAlignment::Right),
            Cell::new(ratio(o.relative_time)).set_alignment(CellAlignment::Right),
        ]);
    }
    t
}

/// The options on more GPUs (`advise::gpus`).
fn gpus_table(a: &Advice, markdown: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(if markdown { presets::ASCII_MARKDOWN } else { presets::NOTHING });
    t.set_header(["GPUs", "strategy", "batch a GPU", "predicted", "peak a GPU", "headroom", "sent a step"]);
    for o in &a.gpus.options {
        let (verdict, peak, headroom, sent) = match &o.error {
            Some(e) => (format!("unknown: {e}"), "-".into(), "-".into(), "-".into()),
            None => (
                o.verdict.as_str().to_string(),
                format_size(o.peak),
                signed_size(o.headroom),
                format_size(o.communicated),
            ),
        };
        t.add_row(vec![
            Cell::new(o.gpus).set_alignment(CellAlignment::Right),
            Cell::new(o.strategy_words()),
            Cell::new(o.batch_per_gpu).set_alignment(CellAlignment::Right),
            Cell::new(verdict),
            Cell::new(peak).set_alignment(CellAlignment::Right),
            Cell::new(headroom).set_alignment(CellAlignment::Right),
            Cell::new(sent).set_alignment(CellAlignment::Right),
        ]);
    }
    t
}

/// What the many-GPU table is, in a sentence.
const GPUS_WHAT: &str = "the same training with its batch split evenly over the GPUs (the ranks' mean gradient is the \
    whole batch's), each GPU's peak the estimate of a rank (ZeRO's: the rank with the largest shard), held to CPU \
    ranks over gloo and to PyTorch's DDP and ZeroRedundancyOptimizer; NCCL's own buffers come beside it and are not \
    counted, and no step time is predicted. \"sent a step\": what each GPU sends as ring collectives move it, the \
    gradients' all-reduce once a backward and, under ZeRO, the updated parameters' broadcast";

/// The furthest a verified step time is from its prediction, as a factor either way, where
/// that is more than 2x: `None` where every time is within it (or none was timed).
fn time_off(verified: &[super::verify::Verified]) -> Option<f64> {
    verified
        .iter()
        .filter_map(|v| {
            let (p, m) = (v.predicted_seconds?, v.measured_seconds?);
            (p > 0.0 && m > 0.0).then(|| (p / m).max(m / p))
        })
        .max_by(f64::total_cmp)
        .filter(|&off| off > 2.0)
}

fn verified_table(a: &Advice, markdown: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(if markdown { presets::ASCII_MARKDOWN } else { presets::NOTHING });
    t.set_header([
        "#",
        "option",
        "predicted",
        "measured",
        "peak predicted",
        "peak measured",
        "step predicted",
        "step measured",
        "fit agrees",
    ]);
    for v in &a.verified {
        let measured = match &v.phase {
            Some(p) => format!("{} in {p}", v.status),
            None => v.status.to_string(),
        };
        t.add_row(vec![
            Cell::new(v.rank),
            Cell::new(&v.describe),
            Cell::new(v.predicted.as_str()),
            Cell::new(measured),
            Cell::new(format_size(v.predicted_peak)).set_alignment(CellAlignment::Right),
            Cell::new(format_size(v.measured_peak)).set_alignment(CellAlignment::Right),
            Cell::new(seconds(v.predicted_seconds)).set_alignment(CellAlignment::Right),
            Cell::new(seconds(v.measured_seconds)).set_alignment(CellAlignment::Right),
            Cell::new(match v.agrees {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }),
        ]);
    }
    t
}

/// The rows a table shows: the first [`SHOWN`] that fit (leaving out those whose extra change
/// buys nothing: [`super::rank::adds_nothing`]), the borderline, the nearest misses.
fn shown(a: &Advice) -> Vec<&Evaluated> {
    let fit = a.options.iter().filter(|o| o.listed).take(SHOWN);
    let border = a.options.iter().filter(|o| o.verdict == Verdict::Borderline).take(MISSES);
    let miss = a.options.iter().filter(|o| o.verdict == Verdict::Oom).take(MISSES);
    fit.chain(border).chain(miss).collect()
}

fn counts(a: &Advice) -> String {
    let n = |v: Verdict| a.options.iter().filter(|o| o.verdict == v).count();
    let mut s = format!(
        "{} options: {} fit, {} borderline, {} do not fit",
        a.options.len(),
        n(Verdict::Fits),
        n(Verdict::Borderline),
        n(Verdict::Oom)
    );
    let quiet = a.options.iter().filter(|o| o.verdict == Verdict::Fits && !o.listed).count();
    if quiet > 0 {
        // Without step times an extra change cannot be shown to buy time: it is left out for
        // changing more, not for what it costs.
        let timed = a.options.iter().any(|o| o.step_seconds.is_some());
        s += &if timed {
            format!(
                " ({quiet} that fit add a change to another for less than {:.0}% of the time: not listed)",
                super::rank::NO_GAIN * 100.0
            )
        } else {
            format!(" ({quiet} that fit add a change to another that fits, with no step time to weigh it: not listed)")
        };
    }
    if n(Verdict::Unknown) > 0 {
        s += &format!(", {} outside the estimate", n(Verdict::Unknown));
        for (why, k) in outside(a) {
            s += &format!("\n- {}: {why}", crate::units::count(k, "option"));
        }
    }
    s
}

/// The reasons options are outside the estimate, each once with how many it keeps out, in the
/// order first met.
fn outside(a: &Advice) -> Vec<(&str, usize)> {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for why in a.options.iter().filter_map(|o| o.error.as_deref()) {
        match out.iter_mut().find(|(w, _)| *w == why) {
            Some((_, k)) => *k += 1,
            None => out.push((why, 1)),
        }
    }
    out
}

/// The headline: the spec as written, the smallest change that fits, the fastest.
fn headline(a: &Advice) -> Vec<String> {
    headline_of(&a.written, &a.options, a.smallest)
}

/// The headline from the spec as written, the ranked options and the smallest change's rank.
fn headline_of(w: &Evaluated, options: &[Evaluated], smallest: Option<usize>) -> Vec<String> {
    let mut out = Vec::new();
    let verdict = match (&w.verdict, &w.over_in) {
        (Verdict::Oom, Some(at)) => format!("out of memory in {at}, over by {}", signed_size(-w.headroom)),
        (Verdict::Fits, _) => format!("fits, {} headroom", signed_size(w.headroom)),
        (v, _) => v.as_str().to_string(),
    };
    let step = w.step_seconds.map(|t| format!("; step {}", seconds(Some(t)))).unwrap_or_default();
    out.push(format!("As written: peak {} ({verdict}){step}.", format_size(w.peak)));
    match smallest.and_then(|r| options.get(r - 1)) {
        Some(o) => out.push(format!("Smallest change that fits: {}.", sentence(o))),
        None if w.verdict == Verdict::Fits => out.push("Nothing needs to change: it fits as written.".into()),
        None => out.push("No option is predicted to fit: a smaller model, or a larger budget.".into()),
    }
    // Only an option the table lists (and --verify trains) is named; when the spec fits as
    // written, only one predicted to be faster is worth a line.
    let first_fit = options.iter().find(|o| o.verdict == Verdict::Fits && o.listed);
    let worth = |o: &&Evaluated| {
        Some(o.rank) != smallest && (w.verdict != Verdict::Fits || o.relative_time.is_some_and(|r| r < 1.0))
    };
    if let Some(o) = first_fit.filter(worth) {
        let which = if o.step_seconds.is_some() { "Fastest" } else { "First ranked" };
        out.push(format!("{which} that fits: {}.", sentence(o)));
    }
    out
}

/// The terminal's text.
pub fn text(a: &Advice) -> String {
    let mut s =
        format!("{}: advice for {} with a budget of {}\n", a.experiment, a.device, format_size(a.budget));
    if let Some(v) = &a.variant {
        s += &format!("variant: {v}\n");
    }
    if let Some(p) = &a.point {
        s += &format!("at {} = {}: {}\n", p.field, p.value, p.why);
    }
    s += &format!("configuration: {}\n", describe_config(a));
    s += &format!("step times: {}\n\n", a.timing.describe());
    for line in headline(a) {
        s += &format!("{line}\n");
    }
    s += &format!("\n{}\n{}\n", counts(a), options_table(&shown(a), false));
    if !a.verified.is_empty() {
        s += &format!("\nverified by training on {}:\n{}\n", a.device, verified_table(a, false));
    }
    match &a.gpus.none_because {
        Some(why) => s += &format!("\non more GPUs: none offered: {why}\n"),
        None => {
            s += &format!(
            "\non more GPUs: the same training, its batch split evenly; a GPU's peak by the estimate of a \
                 rank; NCCL's buffers not counted (advice.md says more):\n{}\n",
            gpus_table(a, false)
        )
        }
    }
    for n in &a.notes {
        s += &format!("note: {n}\n");
    }
    s
}

/// `advice.md`.
pub fn markdown(a: &Advice, chart: Option<&str>) -> String {
    let p = &a.provenance;
    let mut s = format!("# Advice: {}\n\n", a.experiment);
    s += "What to change so that this training fits its budget, and what each option costs: every combination of \
          gradient accumulation (same effective batch), mixed precision, activation checkpointing and the optimizer's \
          implementation, held against the budget by oomlab's estimate; a smaller batch and another optimizer offered \
          apart, as they change the training. Written by `oomlab advise`.\n\n";
    let mut facts: Vec<[String; 2]> = Vec::new();
    let mut row = |k: &str, v: String| facts.push([k.to_string(), crate::markdown::cell(&v)]);
    row("spec", format!("`{}`", a.spec_path));
    if let Some(v) = &a.variant {
        row("variant", v.clone());
    }
    if let Some(pt) = &a.point {
        row("advised at", format!("{} = {} ({})", pt.field, pt.value, pt.why));
    }
    row("configuration", describe_config(a));
    let allocator = match a.target {
        crate::estimate::Target::Cpu => "oomlab's counting allocator: exact bytes",
        crate::estimate::Target::Cuda => "libtorch's caching allocator, replayed",
    };
    row("device", format!("{} (estimate: {allocator})", a.device));
    row("budget", format_size(a.budget));
    row("step times", a.timing.describe());
    row("machine", format!("{} ({})", p.hostname, p.cpu));
    row("oomlab / libtorch", format!("{} / {}", p.oomlab, p.libtorch));
    row(
        "git",
        format!(
            "{}{}",
            p.git_revision.as_deref().unwrap_or("unknown"),
            match p.git_dirty {
                Some(true) => " (with local changes)",
                Some(false) => " (clean)",
                None => "",
            }
        ),
    );
    row("date", p.date.clone());
    row("command", format!("`{}`", p.command));
    s += &crate::markdown::table(["", ""], facts);
    s += "\n\n## The answer\n\n";
    for line in headline(a) {
        s += &format!("- {line}\n");
    }
    if let Some(c) = chart {
        s += &format!("\n![predicted peak against predicted step time for every option]({c})\n");
    }
    s += &format!("\n## Options\n\n{}; the table shows the first {SHOWN} that fit, then the nearest misses (all of them are in `advice.json`). \"training\": `same` keeps the computation, `lower precision` runs it in 16 bits, `full precision` turns the spec's autocast off, `CHANGED` trains another way (accumulation through a ResNet's BatchNorm is CHANGED: each micro-batch is normalised by its own statistics; a TorchScript module's own BatchNorm layers are not seen). The peak is what the budget caps: allocated bytes on the CPU, reserved on CUDA, workspaces included.\n\n", counts(a));
    s += &format!("{}\n", options_table(&shown(a), true));
    if !a.verified.is_empty() {
        s += &format!(
            "\n## Verified\n\nTrained on {} under the budget, {} steps each (the spec's, at least 3, so that a step time leaves out the first): \
             the top options that fit and the nearest misses.\n\n{}\n",
            a.device,
            a.verified.iter().map(|v| v.steps).max().unwrap_or(0),
            verified_table(a, true)
        );
        if let Some(off) = time_off(&a.verified) {
            s += &format!(
                "\n\"fit agrees\" judges the memory only. The step times are predicted from calibration runs of a \
                 smaller model and scaled; here they are off by up to {off:.1}x: they rank the options, their values \
                 are not this device's.\n"
            );
        }
    }
    match &a.gpus.none_because {
        Some(why) => s += &format!("\n## On more GPUs\n\nNone offered: {why}.\n"),
        None => {
            s += &format!(
                "\n## On more GPUs\n\nBeside the options on one device: {GPUS_WHAT}.\n\n{}\n",
                gpus_table(a, true)
            )
        }
    }
    if let TimingSource::Calibrated { .. } | TimingSource::File { .. } = a.timing {
        s += &format!("\n## How step times are predicted\n\n{}\n", timing_method());
        s += "\nEvery run was timed in two interleaved rounds, the faster kept, and the result checked against rules \
              no quiet machine breaks (a larger batch not faster a pass, recomputation not faster than none, low \
              precision not faster than fp32 on a CPU without its instructions); times that break them are not \
              used.";
        if let Some([before, after]) = a.calibration.as_ref().and_then(|c| c.load_average) {
            s += &format!(" The load average was {before:.2} before calibrating and {after:.2} after.");
        }
        s += "\n";
    }
    if !a.notes.is_empty() {
        s += "\n## Notes\n\n";
        for n in &a.notes {
            s += &format!("- {n}\n");
        }
    }
    s
}

/// Writes the advice's files into `dir` (made if missing). Files from an earlier advice are
/// replaced only with `force`.
pub fn write(dir: &Path, a: &Advice, force: bool) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let existing: Vec<&str> = FILES.iter().copied().filter(|f| dir.join(f).exists()).collect();
    if !existing.is_empty() && !force {
        bail!(
            "{} already holds an advice ({}); pass --force to replace it, or --out DIR to write elsewhere",
            dir.display(),
            existing.join(", ")
        );
    }
    for f in existing {
        std::fs::remove_file(dir.join(f)).with_context(|| format!("removing {}", dir.join(f).display()))?;
    }
    let put = |name: &str, text: String| -> Result<PathBuf> {
        let path = dir.join(name);
        crate::fsio::write_atomic(&path, text.as_bytes())?;
        Ok(path)
    };
    let mut written = vec![put("advice.json", serde_json::to_string_pretty(a)? + "\n")?];
    if let Some(cal) = &a.calibration {
        written.push(put("calibration.json", serde_json::to_string_pretty(cal)? + "\n")?);
    }
    let chart = super::chart::chart(a);
    let rendered = crate::chart::render(&chart, dir)?;
    let stem = rendered.png.file_name().map(|f| f.to_string_lossy().into_owned());
    written.push(put("advice.md", markdown(a, stem.as_deref()))?);
    written.extend([rendered.png, rendered.svg]);
    Ok(written)
}

/// How a calibrated step time is made, in words that name the calibration model's real size.
fn timing_method() -> String {
    use crate::estimate::timing::{CALIBRATION_DEPTH, CALIBRATION_WIDTH};
    format!(
        "Each option's step is its micro-batches' passes plus one update: `k * (alpha + beta * m) + update`. \
         A pass (gather, forward, backward, with checkpointing's recompute) was timed on an MLP of the spec's \
         data shape, precision and techniques, with at most {CALIBRATION_DEPTH} hidden layers of the spec's width \
         capped at {CALIBRATION_WIDTH} units, at two micro-batch sizes, with the device synchronised at each \
         phase; `alpha` scales with the number of layers and `beta` with the multiply-adds per sample, so a wider \
         or deeper model's times are extrapolated from it. The update (optimizer step and zero_grad) was timed \
         per optimizer and implementation and scales with the parameters. These are extrapolations: the Verified \
         table says how far off they were. The measurements are in `calibration.json`."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::rank::{rank, tests::evaluated};

    /// advice.md describes the calibration model that `calibration_config` really builds: for
    /// the lesson's 5000-wide, 6-deep MLP, the one the text names.
    #[test]
    fn the_timing_method_names_the_model_really_timed() {
        use crate::estimate::timing::calibration_config;
        use crate::estimate::DataShape;
        let adam = crate::spec::OptimizerSpec::Adam { lr: 0.001, weight_decay: 0.0 };
        let spec = crate::spec::examples::mlp(6, 5000, 32, adam);
        let shape = DataShape { samples: 32, features: 5000, classes: 10 };
        let timed = calibration_config(&spec, shape, 32, None);
        let (depth, width) = (timed.model.units(), timed.model.width());
        let text = timing_method();
        assert!(text.contains(&format!("at most {depth} hidden layers")), "{depth}: {text}");
        assert!(text.contains(&format!("capped at {width} units")), "{width}: {text}");
    }

    /// A verified step time far from its prediction is said, whichever way; within 2x, nothing.
    #[test]
    fn step_times_off_by_more_than_twice_are_said() {
        use crate::advise::verify::Verified;
        use crate::schema::Status;
        let verified = |p: f64, m: f64| Verified {
            rank: 1,
            describe: "x".into(),
            predicted: Verdict::Fits,
            status: Status::Ok,
            phase: None,
            predicted_peak: 1,
            measured_peak: 1,
            predicted_seconds: Some(p),
            measured_seconds: Some(m),
            agrees: Some(true),
            steps: 3,
            message: String::new(),
        };
        let off = |p, m| time_off(&[verified(0.1, 0.1), verified(p, m)]).map(|x| (x * 10.0).round() / 10.0);
        assert_eq!(off(0.1181, 0.0133), Some(8.9));
        assert_eq!(off(0.01, 0.05), Some(5.0));
        assert_eq!(off(0.1, 0.15), None);
    }

    fn lines(written: Evaluated, options: Vec<Evaluated>) -> String {
        let (ranked, smallest) = rank(options, &written);
        let smallest = smallest.filter(|_| written.verdict != Verdict::Fits);
        headline_of(&written, &ranked, smallest).join("\n")
    }

    #[test]
    fn the_headline_names_only_listed_options_and_a_faster_one_when_nothing_must_change() {
        // Two changes 1% faster than one of them alone are not listed: ranked first, not named.
        let oom = evaluated("written", Verdict::Oom, 100, Some(2.0), 0);
        let two = evaluated("two", Verdict::Fits, 10, Some(1.0), 2);
        let mut one = evaluated("one", Verdict::Fits, 90, Some(1.01), 1);
        one.candidate.changes = two.candidate.changes[..1].to_vec();
        let text = lines(oom, vec![one, two]);
        assert!(text.contains("Smallest change that fits: #2 one"), "{text}");
        assert!(!text.contains("#1 two"), "{text}");
        // A spec that fits: an option is named only when it is predicted faster.
        let fits = evaluated("written", Verdict::Fits, 100, Some(2.0), 0);
        let text = lines(fits.clone(), vec![evaluated("slower", Verdict::Fits, 90, Some(3.0), 1)]);
        assert!(text.contains("Nothing needs to change") && !text.contains("that fits: #"), "{text}");
        let text = lines(fits, vec![evaluated("faster", Verdict::Fits, 90, Some(1.0), 1)]);
        assert!(text.contains("Fastest that fits: #1"), "{text}");
        let untimed = evaluated("written", Verdict::Fits, 100, None, 0);
        let text = lines(untimed, vec![evaluated("one", Verdict::Fits, 90, None, 1)]);
        assert!(!text.contains("First ranked"), "{text}");
    }
}
