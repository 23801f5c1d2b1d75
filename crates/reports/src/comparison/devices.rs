//! `oomlab compare` of device folders (`results/<device>`): each experiment that two or more of
//! them hold compared as [`compare_as`](super::compare_as) compares one experiment's folders,
//! and one `COMPARE.md` over them all: the folders' devices, hosts and revisions, a summary of
//! one headline figure per experiment, each experiment's section, and the experiments that only
//! one folder holds.
//!
//! Device folders are lettered A, B, C... in the order given, and an experiment's section uses
//! the same letters (an experiment in B and C only has columns B and C, and its ratios are over
//! B's); the summary's ratios are over A's.
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{ratio, section, Cell, Comparison};
use crate::markdown;
use crate::results::Manifest;

/// One device folder, for the header: what its experiments' manifests say.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSide {
    pub letter: String,
    pub dir: PathBuf,
    /// The distinct device names, hosts, CPUs of its experiments, in order first seen.
    pub devices: Vec<String>,
    pub hosts: Vec<String>,
    pub cpus: Vec<String>,
    /// Each revision its experiments ran at (12 characters, "-dirty" when it had changes) and
    /// how many ran at it, most first.
    pub revisions: Vec<(String, usize)>,
}

impl DeviceSide {
    /// From the manifests that could be read of the folder's experiments.
    pub fn new(letter: String, dir: PathBuf, manifests: &[Manifest]) -> DeviceSide {
        let distinct = |f: &dyn Fn(&Manifest) -> String| {
            let mut out: Vec<String> = Vec::new();
            for m in manifests {
                let v = f(m);
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            out
        };
        let mut revisions: Vec<(String, usize)> = Vec::new();
        for m in manifests {
            let mut r: String = m.git.revision.as_deref().unwrap_or("unknown").chars().take(12).collect();
            if m.git.dirty == Some(true) {
                r.push_str("-dirty");
            }
            match revisions.iter_mut().find(|(have, _)| *have == r) {
                Some((_, n)) => *n += 1,
                None => revisions.push((r, 1)),
            }
        }
        // Most experiments first; the order first seen among equals (a stable sort).
        revisions.sort_by_key(|r| std::cmp::Reverse(r.1));
        DeviceSide {
            letter,
            dir,
            devices: distinct(&|m| m.device.name.clone()),
            hosts: distinct(&|m| m.host.hostname.clone()),
            cpus: distinct(&|m| m.host.cpu.clone()),
            revisions,
        }
    }

    /// The folder's last part: "cpu-amd-epyc".
    pub fn name(&self) -> String {
        self.dir
            .file_name()
            .map_or_else(|| self.dir.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    fn revision_text(&self) -> String {
        match self.revisions.as_slice() {
            [] => "unknown".into(),
            [(r, _)] => r.clone(),
            many => many.iter().map(|(r, n)| format!("{r} ({n})")).collect::<Vec<_>>().join(", "),
        }
    }
}

/// Which experiments the device folders share: each folder's experiments (name and path).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shared {
    /// Experiments in two or more folders, by name: (folder index, path) in folder order.
    pub shared: Vec<(String, Vec<(usize, PathBuf)>)>,
    /// Experiments in one folder only, by name: (name, folder index, path).
    pub only_in_one: Vec<(String, usize, PathBuf)>,
}

/// Groups each folder's experiments (`listing[i]`: folder i's, as name and path) by name.
pub fn shared(listing: &[Vec<(String, PathBuf)>]) -> Shared {
    let mut by_name: BTreeMap<&str, Vec<(usize, PathBuf)>> = BTreeMap::new();
    for (i, experiments) in listing.iter().enumerate() {
        for (name, path) in experiments {
            by_name.entry(name).or_default().push((i, path.clone()));
        }
    }
    let mut out = Shared::default();
    for (name, mut at) in by_name {
        if at.len() >= 2 {
            out.shared.push((name.to_string(), at));
        } else if let Some((i, path)) = at.pop() {
            out.only_in_one.push((name.to_string(), i, path));
        }
    }
    out
}

/// The comparison of device folders, ready for [`markdown`].
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceComparison {
    pub folders: Vec<DeviceSide>,
    /// Each experiment compared, by name, with its charts' paths from `COMPARE.md`
    /// (`depth_sweep/compare_peak_vs_depth.png`).
    pub compared: Vec<(Comparison, Vec<String>)>,
    /// Experiments in one folder only: (name, folder index, path).
    pub only_in_one: Vec<(String, usize, PathBuf)>,
    /// An experiment folder that could not be read or compared, and what came of it.
    pub warnings: Vec<String>,
}

/// The one `COMPARE.md` of a comparison of device folders.
pub fn markdown(d: &DeviceComparison) -> String {
    let names: Vec<String> = d.folders.iter().map(DeviceSide::name).collect();
    let first = d.folders.first().map_or("A", |s| s.letter.as_str());
    let mut out = Vec::new();
    out.push(format!(
        "# {}: {} compared",
        names.join(" vs "),
        crate::units::count(d.compared.len(), "experiment")
    ));
    out.push(String::new());
    let list =
        |v: &[String]| if v.is_empty() { "unknown".to_string() } else { markdown::cell(&v.join(", ")) };
    let folders = d.folders.iter().map(|s| {
        [
            s.letter.clone(),
            list(&s.devices),
            list(&s.hosts),
            list(&s.cpus),
            markdown::cell(&s.revision_text()),
            format!("`{}`", s.dir.display()),
        ]
    });
    out.push(markdown::table(["", "device", "host", "CPU", "revision", "folder"], folders));
    out.push(String::new());
    out.push(
        "Device, host and CPU are as each folder's experiments' manifests name them; a folder whose experiments \
         ran at several revisions lists each, with how many experiments ran at it."
            .into(),
    );
    for w in &d.warnings {
        out.push(String::new());
        out.push(format!("> **Warning:** {}", markdown::cell(w)));
    }

    out.push(String::new());
    out.push("## Summary".into());
    out.push(String::new());
    out.push(format!(
        "One figure per experiment: the largest value that fit for a sweep, the peak allocated without one (of the \
         first variant where there are several), and the step time that goes with it; ratios are each folder's \
         figure over {first}'s. Each experiment's section below has all its figures."
    ));
    out.push(String::new());
    let letters: Vec<&str> = d.folders.iter().map(|s| s.letter.as_str()).collect();
    let mut head = vec!["experiment".to_string(), "figure".into()];
    head.extend(letters.iter().map(|l| l.to_string()));
    head.extend(letters.iter().skip(1).map(|l| format!("{l} / {first}")));
    head.extend(letters.iter().map(|l| format!("{l} step time")));
    head.extend(letters.iter().skip(1).map(|l| format!("step {l} / {first}")));
    let mut rows = Vec::new();
    for (c, _) in &d.compared {
        let differs = if c.spec_differs.is_empty() { "" } else { " (the spec files differ)" };
        let mut cells = vec![format!("{}{differs}", markdown::cell(&c.experiment))];
        match c.headline() {
            None => {
                cells.push("no rows".into());
                cells.extend(std::iter::repeat_n("—".to_string(), head.len() - 2));
            }
            Some(h) => {
                cells.push(markdown::cell(&h.name));
                for figure in [&h.figure, &h.step] {
                    // Each device folder's cell, by letter: an experiment may skip a folder.
                    let per_folder: Vec<Option<&Cell>> = letters
                        .iter()
                        .map(|l| {
                            let at = c.folders.iter().position(|s| s.letter == *l)?;
                            figure.cells.get(at)?.as_ref()
                        })
                        .collect();
                    let dash = || "—".to_string();
                    cells.extend(per_folder.iter().map(|c| c.map_or_else(dash, |c| markdown::cell(&c.text))));
                    let base = per_folder.first().copied().flatten();
                    cells.extend(per_folder.iter().skip(1).map(|c| ratio(base, *c)));
                }
            }
        }
        rows.push(cells);
    }
    out.push(markdown::table(head, rows));

    for (c, charts) in &d.compared {
        out.push(String::new());
        out.push(section(c, charts, 2).trim_end().to_string());
    }

    out.push(String::new());
    out.push("## Only in one folder".into());
    out.push(String::new());
    if d.only_in_one.is_empty() {
        out.push("None: every experiment is in two or more of the folders.".into());
    } else {
        out.push("Not compared: each is in one folder only.".into());
        out.push(String::new());
        for (name, i, path) in &d.only_in_one {
            let letter = d.folders.get(*i).map_or("?", |s| s.letter.as_str());
            out.push(format!("- {name}: only in {letter} (`{}`)", path.display()));
        }
    }
    out.push(String::new());
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparison::tests::{manifest, two_devices, GIB};
    use crate::comparison::{compare_as, letter};

    fn listing(names: &[&str], root: &str) -> Vec<(String, PathBuf)> {
        names.iter().map(|n| (n.to_string(), PathBuf::from(format!("{root}/{n}")))).collect()
    }

    #[test]
    fn experiments_group_by_name_into_shared_and_only_in_one() {
        let s = shared(&[
            listing(&["amp", "depth_sweep", "leak"], "a"),
            listing(&["depth_sweep", "leak", "memory_breakdown"], "b"),
            listing(&["leak"], "c"),
        ]);
        let names: Vec<(&str, Vec<usize>)> =
            s.shared.iter().map(|(n, at)| (n.as_str(), at.iter().map(|(i, _)| *i).collect())).collect();
        assert_eq!(names, [("depth_sweep", vec![0, 1]), ("leak", vec![0, 1, 2])]);
        assert_eq!(
            s.only_in_one,
            [
                ("amp".to_string(), 0, PathBuf::from("a/amp")),
                ("memory_breakdown".to_string(), 1, PathBuf::from("b/memory_breakdown"))
            ]
        );
    }

    #[test]
    fn the_header_names_devices_hosts_and_revisions() {
        let mut a = manifest("depth_sweep", "Tesla T4", None, 16 * GIB);
        a.git.revision = Some("c0e8e955d83de2681750d2fbcb39ffdab3861b6e".into());
        let mut b = a.clone();
        b.git.revision = Some("bb211bd059e40c69e67f69c60cadc3e7707c06de".into());
        b.git.dirty = Some(true);
        let side = DeviceSide::new("A".into(), "results/tesla-t4".into(), &[b, a.clone(), a]);
        assert_eq!(side.revisions, [("c0e8e955d83d".to_string(), 2), ("bb211bd059e4-dirty".to_string(), 1)]);
        assert_eq!(side.revision_text(), "c0e8e955d83d (2), bb211bd059e4-dirty (1)");
        assert_eq!(side.devices, ["Tesla T4"]);
        assert_eq!(side.name(), "tesla-t4");
        assert_eq!(DeviceSide::new("B".into(), "x".into(), &[]).revision_text(), "unknown");
    }

    #[test]
    fn the_summary_has_a_row_per_experiment_and_sections_follow() {
        let folders = two_devices();
        let letters: Vec<String> = (0..2).map(letter).collect();
        let c = compare_as(&folders, &letters).unwrap();
        let sides: Vec<DeviceSide> = folders
            .iter()
            .zip(&letters)
            .map(|(f, l)| {
                DeviceSide::new(l.clone(), f.dir.parent().unwrap().into(), std::slice::from_ref(&f.manifest))
            })
            .collect();
        // An experiment in B and a third folder only: its columns are B's and C's, lettered so.
        let mut third = sides[1].clone();
        third.letter = "C".into();
        third.dir = "results/cpu-other".into();
        let bc = compare_as(&folders, &["B".to_string(), "C".to_string()]).unwrap();
        let mut bc_named = bc.clone();
        bc_named.experiment = "zz_sweep".into();
        let d = DeviceComparison {
            folders: vec![sides[0].clone(), sides[1].clone(), third],
            compared: vec![(c, vec!["depth_sweep/compare_peak_vs_depth.png".into()]), (bc_named, vec![])],
            only_in_one: vec![("amp".into(), 1, "results/cpu-amd-epyc/amp".into())],
            warnings: vec!["`results/x/leak` not read: damaged; leak is not compared".into()],
        };
        let md = crate::markdown::squeezed(&markdown(&d));
        let lines: Vec<&str> = md.lines().collect();
        for line in [
            "# tesla-t4 vs cpu-amd-epyc vs cpu-other: 2 experiments compared",
            "| A | Tesla T4 | h | cpu | 0123456789ab | `results/tesla-t4` |",
            "> **Warning:** `results/x/leak` not read: damaged; leak is not compared",
            "## Summary",
            "| experiment | figure | A | B | C | B / A | C / A | A step time | B step time | C step time | step B / A | \
             step C / A |",
            "| depth_sweep | largest depth that fit | 40 | 4 | — | 0.10 | — | 0.320 s | 0.012 s | — | 0.037 | — |",
            // zz_sweep has no A: its B and C, and no ratio to A.
            "| zz_sweep | largest depth that fit | — | 40 | 4 | — | — | — | 0.320 s | 0.012 s | — | — |",
            "## depth_sweep: 2 results compared",
            "### model.depth",
            "| figure | A | B | B / A |",
            "### Charts",
            "![compare_peak_vs_depth.png](depth_sweep/compare_peak_vs_depth.png)",
            "## zz_sweep: 2 results compared",
            "| figure | B | C | C / B |",
            "## Only in one folder",
            "- amp: only in B (`results/cpu-amd-epyc/amp`)",
        ] {
            assert!(lines.contains(&line), "{line:?} not in\n{md}");
        }
        assert!(!md.contains("\n# depth_sweep"), "the sections' headings are demoted");
        assert!(md.contains("ratios are each folder's figure over B's."), "{md}");
    }
}
