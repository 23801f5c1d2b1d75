//! The bench's pure logic on made-up samples: pooling, the same-model check, verdicts and the
//! text of BENCH.md and bench.csv.
use std::collections::BTreeMap;

use super::report::{csv, markdown};
use super::runner::Sample;
use super::*;

/// A report of `n` steps around `median` (spread +-2%), with per-phase times for the contenders
/// that time phases: `optimizer` of each step in optimizer_step, the rest in forward.
fn report(contender: Contender, median: f64, optimizer: f64, params: u64, loss: f64) -> Report {
    let steps: Vec<f64> = (0..10).map(|i| median * (0.98 + 0.004 * i as f64)).collect();
    let phase_seconds = if contender.times_phases() {
        BTreeMap::from([
            ("forward".to_string(), steps.iter().map(|s| s - optimizer).collect()),
            ("optimizer_step".to_string(), vec![optimizer; steps.len()]),
        ])
    } else {
        BTreeMap::new()
    };
    Report {
        step_seconds: steps,
        phase_seconds,
        param_count: params,
        final_loss: Some(loss),
        threads: 2,
        torch: "2.11.0".into(),
        python: if contender.python_mode().is_some() { "3.12.3".into() } else { String::new() },
        device_name: "CPU (AMD EPYC)".into(),
    }
}

/// The quick CPU plan's small for-loop configuration and its lesson configuration, two rounds of
/// every contender; oomlab 10% slower than PyTorch on the lesson's model, in optimizer_step.
fn samples(plan: &Plan) -> Vec<Sample> {
    let mut out = Vec::new();
    for round in 1..=2 {
        for c in &plan.configs {
            for k in Contender::ALL {
                let (oomlab, torch) = if c.role == Role::Lesson { (0.011, 0.010) } else { (0.002, 0.004) };
                let (median, optimizer) = match k {
                    Contender::OomlabOff | Contender::OomlabSteps => (oomlab, 0.0),
                    Contender::OomlabPhases => (oomlab * 1.01, 0.0),
                    Contender::OomlabSync => {
                        (oomlab * 1.1, if c.role == Role::Lesson { 0.006 } else { 0.001 })
                    }
                    Contender::Pytorch => (torch, 0.0),
                    Contender::PytorchSync => {
                        (torch * 1.1, if c.role == Role::Lesson { 0.004 } else { 0.002 })
                    }
                };
                let loss = if c.role == Role::Lesson { 0.5 } else { 0.25 };
                out.push(Sample {
                    config: c.name.clone(),
                    contender: k,
                    round,
                    report: report(k, median, optimizer, c.param_count(), loss),
                });
            }
        }
    }
    out
}

/// Two of the quick plan's configurations, 10 timed steps a process.
fn plan() -> Plan {
    let mut p = Plan::new(false, true).unwrap().only(&["3x16-for_loop".into(), "4x32".into()]).unwrap();
    for c in &mut p.configs {
        c.steps = 10;
    }
    p
}

fn header() -> Header {
    Header {
        machine: "box".into(),
        os: "linux x86_64".into(),
        cpu: "CPU (AMD EPYC)".into(),
        device: "CPU (AMD EPYC)".into(),
        threads: 2,
        oomlab: "0.1.0".into(),
        tch: "0.24.0".into(),
        libtorch: "2.11.0".into(),
        python_torch: "2.11.0+cu130".into(),
        python: "3.12.3".into(),
        revision: Some("abc123".into()),
        dirty: Some(true),
        date: "2025-01-01T00:00:00Z".into(),
        command: "oomlab bench --quick".into(),
        load_before: Some(0.1),
        load_after: Some(1.9),
        minutes: 1.5,
        rounds: 2,
        quick: true,
        cores: 2,
    }
}

#[test]
fn pools_every_process_of_a_contender() {
    let a = analyse(&plan(), &samples(&plan())).unwrap();
    assert_eq!(a.configs.len(), 2);
    let small = &a.configs[0];
    assert_eq!(small.name, "3x16-for_loop");
    let off = small.get(Contender::OomlabOff).unwrap();
    assert_eq!((off.spread.n, off.processes), (20, 2));
    assert!((off.spread.median - 0.002 * 0.998).abs() < 1e-12, "{:?}", off.spread);
    assert!(off.phases.is_empty());
    let sync = small.get(Contender::PytorchSync).unwrap();
    assert_eq!(sync.phases["optimizer_step"].median, 0.002);
    assert_eq!(small.contenders.len(), 6);
    assert_eq!(small.same_model.param_count, plan().configs[0].param_count());
    assert_eq!((small.same_model.oomlab_loss, small.same_model.pytorch_loss), (Some(0.25), Some(0.25)));
    assert_eq!(small.same_model.loss_difference, 0.0);
}

#[test]
fn verdicts_per_configuration() {
    let a = analyse(&plan(), &samples(&plan())).unwrap();
    let words = |i: usize| a.configs[i].verdicts.iter().map(|v| v.word()).collect::<Vec<_>>();
    assert_eq!(words(0), ["met", "met"], "phases 1% over off; oomlab half of PyTorch");
    assert_eq!(words(1), ["met", "missed by 10.0%"], "the lesson's model: 1.1x on the CPU");
    let why = a.configs[1].verdicts[1].why.as_deref().unwrap();
    assert!(why.contains("The largest excess is in optimizer_step (+2.00 ms)"), "{why}");
}

#[test]
fn a_process_that_trained_another_model_stops_the_analysis() {
    let p = plan();
    let mut s = samples(&p);
    s[3].report.param_count += 1;
    let err = analyse(&p, &s).unwrap_err().to_string();
    assert!(err.contains("did not train the same model") && err.contains("3x16-for_loop"), "{err}");
}

#[test]
fn differing_losses_are_measured() {
    let p = plan();
    let mut s = samples(&p);
    s[4].report.final_loss = Some(0.26);
    let a = analyse(&p, &s).unwrap();
    assert!((a.configs[0].same_model.loss_difference - 0.01 / 0.26).abs() < 1e-12);
    let md = markdown(&header(), &a);
    assert_eq!(md.matches("**The final losses differ by more than 0.1%**").count(), 1, "{md}");
}

#[test]
fn bench_md_names_the_machine_the_targets_and_the_misses() {
    let a = analyse(&plan(), &samples(&plan())).unwrap();
    let md = markdown(&header(), &a);
    for part in [
        "# oomlab bench: CPU (AMD EPYC)",
        "| oomlab | 0.1.0, git abc123 (uncommitted changes) |",
        "| tch / libtorch | 0.24.0 / 2.11.0 |",
        "| Python / torch | 3.12.3 / 2.11.0+cu130 |",
        "| command | `oomlab bench --quick` |",
        "| load average | 0.10 before, 1.90 after, on 2 cores |",
        "**`--quick`**",
        "| 4x32 | oomlab-off / pytorch | 1.100 (",
        "| <= 1 | **missed by 10.0%** |",
        "Missed: 4x32 (oomlab-off / pytorch).",
        "## 3x16-for_loop: 3 x 16, batch 32, Adam (for-loop)",
        "1 warm-up + 10 timed steps a process, 2 process(es) a contender: 20 timed steps each.",
        "| pytorch | 3.99 ms | 3.93 ms-4.05 ms | 2.0% | 20 | 2.000 | 1.000 |",
        "| optimizer_step | 6.00 ms | 4.00 ms | +2.00 ms |",
        "final loss 2.500000000e-1 (oomlab) and 2.500000000e-1 (PyTorch), largest relative difference between any two processes 0.0e0.",
        "![each contender's median step time against PyTorch's, per configuration](bench.png)",
    ] {
        assert!(md.contains(part), "{part:?} not in:\n{md}");
    }
    assert!(!md.contains("The machine was busy"), "load 0.1 on 2 cores is quiet");
    assert!(!md.contains("final losses differ"));
    let busy = markdown(&Header { load_before: Some(3.5), ..header() }, &a);
    assert!(busy.contains("**The machine was busy when the bench started** (load 3.50 on 2 cores)"));
    assert!(md.contains("(64 rows under `--quick` of 20 features"));
    let full = markdown(&Header { quick: false, ..header() }, &a);
    assert!(
        full.contains("On the CPU: mixed precision is bf16 autocast") && full.contains("(1024 rows of 20")
    );
    assert!(!full.contains("**`--quick`**"));
}

#[test]
fn bench_csv_holds_every_step_and_phase() {
    let s = samples(&plan());
    let text = csv(&s);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "config,contender,round,step,phase,seconds");
    let steps = s.iter().map(|x| x.report.step_seconds.len()).sum::<usize>();
    let phases = s.iter().flat_map(|x| x.report.phase_seconds.values()).map(Vec::len).sum::<usize>();
    assert_eq!(lines.len(), 1 + steps + phases);
    assert_eq!(lines[1], "3x16-for_loop,oomlab-off,1,1,step,0.001960000");
    assert!(text.contains("4x32,pytorch-sync,2,10,optimizer_step,0.004000000"));
}
