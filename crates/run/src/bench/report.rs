//! `BENCH.md` (what was run where, a table per configuration, every ratio against its target,
//! and for a miss by how much and why) and `bench.csv` (every timed step and phase of every
//! process, from which BENCH.md can be recomputed).
use std::fmt::Write as _;

use super::analysis::{Analysis, ConfigResult};
use super::runner::Sample;
use super::{format_seconds, Contender, BENCH_CHART};
use crate::schema::Phase;

/// The largest relative difference between two processes' final losses that BENCH.md lets pass
/// without a warning: the same seeds and kernels give the same bits on the CPU; a GPU's kernels
/// may add in another order from run to run.
pub const LOSS_TOLERANCE: f64 = 1e-3;

/// Where and with what the bench ran.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    pub machine: String,
    pub os: String,
    pub cpu: String,
    /// The device as oomlab names it.
    pub device: String,
    pub threads: i32,
    pub oomlab: String,
    pub tch: String,
    pub libtorch: String,
    /// `torch.__version__` and Python's, as the Python worker reported them.
    pub python_torch: String,
    pub python: String,
    pub revision: Option<String>,
    pub dirty: Option<bool>,
    pub date: String,
    pub command: String,
    /// The 1-minute load average before the first worker and after the last.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    /// Minutes the bench took.
    pub minutes: f64,
    pub rounds: usize,
    pub quick: bool,
    /// Cores the machine has, to judge the load by.
    pub cores: usize,
}

/// The whole of BENCH.md.
pub fn markdown(h: &Header, a: &Analysis) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# oomlab bench: {}\n", h.device);
    s += "How fast oomlab trains at each `--trace` level, against the PyTorch (Python) loop it replaces, \
          for the same model, data placement and optimizer implementation. Every ratio is of medians \
          measured in this run, with its target from issue 14. Written by `scripts/bench` \
          (`oomlab bench`); the raw samples are in `bench.csv`.\n\n";
    header_table(&mut s, h);
    summary(&mut s, a);
    what_was_run(&mut s, h, a);
    for c in &a.configs {
        config_section(&mut s, c);
    }
    s
}

fn header_table(s: &mut String, h: &Header) {
    let git = match (&h.revision, h.dirty) {
        (Some(r), Some(true)) => format!("{r} (uncommitted changes)"),
        (Some(r), _) => format!("{r} (clean)"),
        (None, _) => "unknown (not a git checkout)".into(),
    };
    let load = |l: Option<f64>| l.map_or("?".to_string(), |l| format!("{l:.2}"));
    let rows = [
        ("machine", format!("{} ({})", h.machine, h.os)),
        ("CPU", h.cpu.clone()),
        ("device", h.device.clone()),
        ("threads", format!("{} intra-op thread(s) on both sides", h.threads)),
        ("oomlab", format!("{}, git {git}", h.oomlab)),
        ("tch / libtorch", format!("{} / {}", h.tch, h.libtorch)),
        ("Python / torch", format!("{} / {}", h.python, h.python_torch)),
        ("date", h.date.clone()),
        ("command", format!("`{}`", h.command)),
        (
            "load average",
            format!("{} before, {} after, on {} cores", load(h.load_before), load(h.load_after), h.cores),
        ),
        ("took", format!("{:.1} minutes", h.minutes)),
    ];
    *s += "| | |\n| --- | --- |\n";
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    s.push('\n');
    if h.quick {
        *s += "**`--quick`**: tiny models, few steps, one round: a test of the bench, not a measurement.\n\n";
    }
    if let Some(l) = h.load_before.filter(|&l| h.cores > 0 && l > 0.5 * h.cores as f64) {
        let _ = writeln!(
            s,
            "**The machine was busy when the bench started** (load {l:.2} on {} cores): other processes \
             shared the cores, and a step whose OpenMP threads wait for a busy core can take many times \
             longer. Read these numbers as a busy machine's.\n",
            h.cores
        );
    }
}

fn summary(s: &mut String, a: &Analysis) {
    *s += "## Targets\n\n| configuration | ratio | measured (90% interval) | target | verdict |\n| --- | --- | --- | --- | --- |\n";
    for c in &a.configs {
        for v in &c.verdicts {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} ({:.3}-{:.3}) | <= {} | {} |",
                c.name,
                v.target.kind.label(),
                v.ratio,
                v.interval.0,
                v.interval.1,
                v.target.limit,
                if v.met() { "met".to_string() } else { format!("**{}**", v.word()) }
            );
        }
    }
    let missed: Vec<String> = a
        .configs
        .iter()
        .flat_map(|c| {
            c.verdicts
                .iter()
                .filter(|v| !v.met())
                .map(move |v| format!("{} ({})", c.name, v.target.kind.label()))
        })
        .collect();
    if missed.is_empty() {
        *s += "\nEvery target met.\n\n";
    } else {
        let _ = writeln!(
            s,
            "\nMissed: {}. Each configuration's section says by how much and why.\n",
            missed.join("; ")
        );
    }
}

fn what_was_run(s: &mut String, h: &Header, a: &Analysis) {
    *s += "## What was run\n\n";
    for c in Contender::ALL {
        let _ = writeln!(s, "- **{c}**: {}", c.describe());
    }
    let _ = writeln!(
        s,
        "\nEach contender ran in a process of its own, launched fresh for every configuration in each of {} \
         round(s), the order of the contenders rotated each round. A process trains its warm-up steps, then \
         the timed ones; its steps are pooled with the same contender's other processes. A step's time is the \
         host's clock from one step's end to the next, the device waited for at each end, the same way on \
         both sides. Medians and spreads (p10-p90, and the interquartile range) are over the pooled steps; \
         a ratio's interval is the 5th-95th percentiles of the ratio of medians over 2000 bootstrap \
         resamples, of the processes and then of each drawn process's steps (a process's steps share its \
         memory layout, thread placement and minute, so they vary less than processes do).\n",
        h.rounds
    );
    let rows = if h.quick { "64 rows under `--quick`" } else { "1024 rows" };
    *s += &format!("Data: the lesson's small tabular set ({rows} of 20 features, 2 classes, seeded), in host memory \
           (`data.location = \"host\"`, a DataLoader's way) on both sides: each step's batch of 32 is gathered \
           on the host and moved to the device");
    *s += if a.cuda { ".\n" } else { "; on the CPU the host is the device, so the move is a no-op.\n" };
    *s += "Both sides train the same model the same way: the Python worker \
           (`scripts/reference/bench_loop.py`) builds the data, model, optimizer, autocast and checkpointing \
           with the functions of `scripts/reference/train.py`, the oracle the tests hold oomlab to, from \
           the same validated configuration; each configuration says the parameters and final losses both \
           sides reported.\n";
    if !a.cuda && !h.quick {
        *s += "\nOn the CPU: mixed precision is bf16 autocast, since x86 CPUs have no fp16 matrix-product \
               kernels worth timing (and a grad scaler is for fp16 only); the AMP and checkpointing variants \
               run at 8 x 1024, not the lesson's 8 x 5000, whose bf16 backward alone takes over a minute on a \
               CPU without bf16 instructions; and the lesson's 8 x 5000 (about 1.5 s a step on 2 cores) runs \
               one warm-up step and 6 timed steps a process, so that the bench takes about 15 minutes.\n";
    }
    let _ = writeln!(
        s,
        "\n![each contender's median step time against PyTorch's, per configuration]({BENCH_CHART}.png)\n"
    );
}

fn config_section(s: &mut String, c: &ConfigResult) {
    let _ = writeln!(s, "## {}: {}\n", c.name, c.title);
    let (processes, pooled) = c.contenders.first().map_or((0, 0), |r| (r.processes, r.spread.n));
    let _ = writeln!(
        s,
        "{} warm-up + {} timed steps a process, {processes} process(es) a contender: {pooled} timed steps each.\n",
        c.warmup, c.steps
    );
    let off = c.get(Contender::OomlabOff).map(|r| r.spread.median);
    let torch = c.get(Contender::Pytorch).map(|r| r.spread.median);
    let ratio =
        |x: f64, base: Option<f64>| base.filter(|b| *b > 0.0).map_or("".into(), |b| format!("{:.3}", x / b));
    *s += "| contender | median | p10-p90 | IQR | steps | / oomlab-off | / pytorch |\n\
           | --- | --- | --- | --- | --- | --- | --- |\n";
    for r in &c.contenders {
        let p = &r.spread;
        let _ = writeln!(
            s,
            "| {} | {} | {}-{} | {:.1}% | {} | {} | {} |",
            r.contender,
            format_seconds(p.median),
            format_seconds(p.p10),
            format_seconds(p.p90),
            100.0 * p.relative_iqr(),
            p.n,
            ratio(p.median, off),
            ratio(p.median, torch)
        );
    }
    let m = &c.same_model;
    let loss = |l: Option<f64>| l.map_or("none".into(), |l| format!("{l:.9e}"));
    let _ = writeln!(
        s,
        "\nSame model: {} parameters on both sides; final loss {} (oomlab) and {} (PyTorch), largest relative \
         difference between any two processes {:.1e}.\n",
        m.param_count,
        loss(m.oomlab_loss),
        loss(m.pytorch_loss),
        m.loss_difference
    );
    if m.loss_difference > LOSS_TOLERANCE {
        let _ = writeln!(
            s,
            "**The final losses differ by more than {}%**: the processes did not all train the same way \
             (kernels that add in another order differ in the last bits; more than that is another \
             training), so their times may not compare.\n",
            100.0 * LOSS_TOLERANCE
        );
    }
    for v in &c.verdicts {
        let _ = writeln!(
            s,
            "- {} = {:.3} (90% interval {:.3}-{:.3}), target <= {}: **{}**{}",
            v.target.kind.label(),
            v.ratio,
            v.interval.0,
            v.interval.1,
            v.target.limit,
            v.word(),
            v.why.as_ref().map_or(String::new(), |w| format!(". {w}"))
        );
    }
    phase_table(s, c);
}

/// The synchronised contenders' medians per phase, side by side.
fn phase_table(s: &mut String, c: &ConfigResult) {
    let (Some(a), Some(b)) = (c.get(Contender::OomlabSync), c.get(Contender::PytorchSync)) else {
        s.push('\n');
        return;
    };
    *s += "\nWhere a step's time goes, synchronised at every phase's end (medians):\n\n\
           | phase | oomlab-sync | pytorch-sync | difference |\n| --- | --- | --- | --- |\n";
    for phase in Phase::TRAINING.map(Phase::as_str) {
        if let (Some(x), Some(y)) = (a.phases.get(phase), b.phases.get(phase)) {
            let _ = writeln!(
                s,
                "| {phase} | {} | {} | {}{} |",
                format_seconds(x.median),
                format_seconds(y.median),
                if x.median >= y.median { "+" } else { "" },
                format_seconds(x.median - y.median)
            );
        }
    }
    s.push('\n');
}

/// `bench.csv`: one row per timed step (`phase` = "step") and per phase of a timed step.
pub fn csv(samples: &[Sample]) -> String {
    let mut s = String::from("config,contender,round,step,phase,seconds\n");
    for x in samples {
        for (i, secs) in x.report.step_seconds.iter().enumerate() {
            let _ = writeln!(s, "{},{},{},{},step,{secs:.9}", x.config, x.contender, x.round, i + 1);
        }
        for (phase, secs) in &x.report.phase_seconds {
            for (i, t) in secs.iter().enumerate() {
                let _ = writeln!(s, "{},{},{},{},{phase},{t:.9}", x.config, x.contender, x.round, i + 1);
            }
        }
    }
    s
}
