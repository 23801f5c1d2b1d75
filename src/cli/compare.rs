//! `oomlab compare`: one experiment's folders from several devices or budgets side by side,
//! as `COMPARE.md` and overlaid charts; or device folders, experiment by experiment, into one
//! `COMPARE.md`.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::chart;
use crate::comparison::devices::{self, DeviceComparison, DeviceSide};
use crate::comparison::{self, COMPARE_MD};
use crate::results::{ExperimentDir, Manifest};

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Two or more results folders of the same experiment, e.g. from two devices or budgets
    /// (results/nvidia-h200/depth_sweep); or two or more device folders (results/nvidia-h200), for
    /// each experiment that two or more of them hold. Not a mix of the two.
    #[arg(required = true, num_args = 2.., value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Where to write COMPARE.md and the charts; default: runs/compare/<experiment> under the
    /// working folder, where `run` writes (never beside the folders compared, which may be a
    /// checkout's committed results/); for device folders, runs/compare/<A>_vs_<B>
    /// (runs/compare/nvidia-h200_vs_cpu-amd-epyc), each experiment's charts in a folder of its
    /// own there.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// For device folders: replace an earlier comparison in the output folder (its COMPARE.md
    /// and the experiments' chart folders), which is otherwise refused. A comparison of
    /// experiment folders replaces its files in any case.
    #[arg(long)]
    pub force: bool,
}

/// What a DIR argument is.
enum Kind {
    /// It has a manifest.json (or is neither: read as one, for its error).
    Experiment,
    /// No manifest.json, but experiment folders in it: (name, path), sorted.
    Device(Vec<(String, PathBuf)>),
}

fn kind(dir: &Path) -> Kind {
    let experiments = experiments_in(dir);
    if dir.join(crate::results::MANIFEST).exists() || experiments.is_empty() {
        Kind::Experiment
    } else {
        Kind::Device(experiments)
    }
}

/// The experiment folders directly in `dir` (those with a manifest), sorted, with their names;
/// a device's folder is recognised as `plot` recognises one.
fn experiments_in(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(crate::results::MANIFEST).is_file())
        .filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), p)))
        .collect();
    found.sort();
    found
}

pub fn run(args: CompareArgs) -> Result<()> {
    let kinds: Vec<Kind> = args.dirs.iter().map(|d| kind(d)).collect();
    let device = |k: &Kind| matches!(k, Kind::Device(_));
    if kinds.iter().any(device) {
        if let Some(at) = kinds.iter().position(|k| !device(k)) {
            let d = kinds.iter().position(device).unwrap_or_default();
            let (dir, other) = (&args.dirs[at], &args.dirs[d]);
            if dir.join(crate::results::MANIFEST).exists() {
                bail!(
                    "{} is an experiment's results folder, but {} is a device's (a folder of experiment \
                     folders): give experiment folders of one experiment ({}/<experiment> ...), or device \
                     folders only, to compare each experiment they share",
                    dir.display(),
                    other.display(),
                    other.display()
                );
            }
            bail!(
                "{} is not a device's results folder (no experiment folder with a manifest.json in it), \
                 unlike {}: give device folders only (results/<device>), or experiment folders of one \
                 experiment",
                dir.display(),
                other.display()
            );
        }
        let listing = kinds
            .into_iter()
            .map(|k| match k {
                Kind::Device(e) => e,
                Kind::Experiment => Vec::new(),
            })
            .collect();
        not_twice(&args.dirs)?;
        return run_devices(&args, listing);
    }
    // Read first: a damaged folder is named for what is wrong in it, even when given twice.
    let folders = args.dirs.iter().map(|d| ExperimentDir::read(d)).collect::<Result<Vec<_>>>()?;
    not_twice(&args.dirs)?;
    let c = comparison::compare(&folders)?;
    if !c.spec_differs.is_empty() {
        note!("warning: {} (noted in {COMPARE_MD})", comparison::spec_warning(&c));
    }
    let out = args.out.clone().unwrap_or_else(|| default_out(&c.experiment));
    not_into_an_input(&out, &args.dirs)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut names = Vec::new();
    let mut files = Vec::new();
    for chart in crate::comparison::chart::sweeps(&c) {
        let r = chart::render(&chart, &out)?;
        names.extend(r.png.file_name().map(|n| n.to_string_lossy().into_owned()));
        files.extend([r.png, r.svg]);
    }
    let md = out.join(COMPARE_MD);
    crate::fsio::write_atomic(&md, comparison::markdown(&c, &names).as_bytes())?;
    for s in &c.folders {
        say!("{}  {}", s.label(), s.dir.display());
    }
    say!("table: {}", md.display());
    for f in &files {
        say!("chart: {}", f.display());
    }
    Ok(())
}

/// Compares device folders (`listing[i]`: DIR i's experiments) experiment by experiment. A
/// folder that cannot be read (damaged files) is left out with a warning, on stderr and in
/// COMPARE.md, and the rest are compared; an error when no experiment could be compared.
fn run_devices(args: &CompareArgs, listing: Vec<Vec<(String, PathBuf)>>) -> Result<()> {
    let letters: Vec<String> = (0..args.dirs.len()).map(comparison::letter).collect();
    let names: Vec<String> = args.dirs.iter().map(|d| folder_name(d)).collect();
    let grouped = devices::shared(&listing);
    if grouped.shared.is_empty() {
        bail!(
            "no experiment is in two or more of these device folders ({}), so none compares; each holds: {}",
            names.join(", "),
            listing
                .iter()
                .zip(&names)
                .map(|(e, n)| format!(
                    "{n}: {}",
                    e.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ")
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let out = args.out.clone().unwrap_or_else(|| default_devices_out(&names));
    not_into_an_input(&out, &args.dirs)?;
    // An earlier comparison there is replaced only with --force.
    let md = out.join(COMPARE_MD);
    let mut there: Vec<String> = Vec::new();
    if md.symlink_metadata().is_ok() {
        there.push(COMPARE_MD.into());
    }
    for (name, _) in &grouped.shared {
        if out.join(name).symlink_metadata().is_ok() {
            there.push(format!("{name}/"));
        }
    }
    if !there.is_empty() && !args.force {
        bail!(
            "{} already holds a comparison ({}); pass --force to replace it, or --out for another folder",
            out.display(),
            there.join(", ")
        );
    }

    let folders: Vec<DeviceSide> = args
        .dirs
        .iter()
        .zip(&listing)
        .zip(&letters)
        .map(|((dir, experiments), letter)| {
            let manifests: Vec<Manifest> =
                experiments.iter().filter_map(|(_, p)| Manifest::read(p).ok()).collect();
            DeviceSide::new(letter.clone(), dir.clone(), &manifests)
        })
        .collect();
    let mut warnings = Vec::new();
    let mut compared = Vec::new();
    let mut files = Vec::new();
    for (name, at) in &grouped.shared {
        let mut read = Vec::new();
        let mut lost = Vec::new();
        for (i, path) in at {
            match ExperimentDir::read(path) {
                Ok(f) => read.push((letters[*i].clone(), f)),
                Err(e) => lost.push(format!("`{}` not read ({:#})", path.display(), e)),
            }
        }
        let fate = if read.len() >= 2 {
            format!("{name} is compared without it")
        } else {
            format!("{name} is not compared")
        };
        for l in lost {
            warnings.push(format!("{l}; {fate}"));
        }
        if read.len() < 2 {
            continue;
        }
        let (these, exps): (Vec<String>, Vec<ExperimentDir>) = read.into_iter().unzip();
        let c = match comparison::compare_as(&exps, &these) {
            Ok(c) => c,
            Err(e) => {
                warnings.push(format!("{name} is not compared: {e:#}"));
                continue;
            }
        };
        if !c.spec_differs.is_empty() {
            note!("warning: {name}: {} (noted in {COMPARE_MD})", comparison::spec_warning(&c));
        }
        let mut charts = Vec::new();
        for chart in crate::comparison::chart::sweeps(&c) {
            let r = chart::render(&chart, &out.join(name))?;
            charts.extend(r.png.file_name().map(|n| format!("{name}/{}", n.to_string_lossy())));
            files.extend([r.png, r.svg]);
        }
        compared.push((c, charts));
    }
    for w in &warnings {
        note!("warning: {w}");
    }
    if compared.is_empty() {
        bail!("no experiment could be compared: {}", warnings.join("; "));
    }
    let d = DeviceComparison { folders, compared, only_in_one: grouped.only_in_one, warnings };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    crate::fsio::write_atomic(&md, devices::markdown(&d).as_bytes())?;
    for s in &d.folders {
        say!("{}: {}  {}", s.letter, s.devices.join(", "), s.dir.display());
    }
    say!(
        "{} compared, {} in one folder only",
        crate::units::count(d.compared.len(), "experiment"),
        d.only_in_one.len()
    );
    say!("table: {}", md.display());
    say!("{} in {}", crate::units::count(files.len(), "chart file"), out.display());
    Ok(())
}

/// The folder's last part ("cpu-amd-epyc"), of its full path for "." and the like.
fn folder_name(dir: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(dir).or_else(|| dir.canonicalize().ok().as_deref().and_then(name)).unwrap_or_else(|| "device".into())
}

/// `runs/compare/<a>_vs_<b>` for device folders `<a>` and `<b>`, under the working folder as a
/// run's `runs/`: never beside the folders compared, which may be a checkout's committed
/// `results/`.
fn default_devices_out(names: &[String]) -> PathBuf {
    Path::new(crate::results::DEFAULT_OUT).join("compare").join(names.join("_vs_"))
}

/// Refuses a folder given twice (by the same path, or by two paths to one folder): its ratios
/// against itself would all read 1.00, which says nothing, and a user who typed it meant
/// another folder.
fn not_twice(dirs: &[PathBuf]) -> Result<()> {
    let real: Vec<Option<PathBuf>> = dirs.iter().map(|d| d.canonicalize().ok()).collect();
    for (j, b) in real.iter().enumerate() {
        let Some(b) = b else { continue };
        if let Some(i) = real[..j].iter().position(|a| a.as_ref() == Some(b)) {
            let (a, b) = (comparison::letter(i), comparison::letter(j));
            let which = if dirs[i] == dirs[j] {
                format!("{} is given twice, as {a} and {b}", dirs[i].display())
            } else {
                format!(
                    "the same folder is given as {a} ({}) and {b} ({})",
                    dirs[i].display(),
                    dirs[j].display()
                )
            };
            bail!(
                "{which}: a folder compared with itself shows ratios of 1.00 and nothing else; give another \
                 device's or budget's results folder in its place"
            );
        }
    }
    Ok(())
}

/// Refuses an output folder that is one of the folders compared, or inside one: COMPARE.md and
/// its charts would be written among a run's results.
fn not_into_an_input(out: &Path, dirs: &[PathBuf]) -> Result<()> {
    let Some(out_at) = nearest_existing(out) else { return Ok(()) };
    for dir in dirs {
        if let Ok(d) = dir.canonicalize() {
            if out_at.starts_with(&d) {
                anyhow::bail!(
                    "--out {} is inside {}, a folder compared: a comparison is written beside results, not among \
                     them; give another --out",
                    out.display(),
                    dir.display()
                );
            }
        }
    }
    Ok(())
}

/// `path` resolved through its nearest folder that exists (what it will be made under).
fn nearest_existing(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut at = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = at.canonicalize() {
            return Some(rest.iter().rev().fold(real, |p: PathBuf, c: &&std::ffi::OsStr| p.join(c)));
        }
        rest.push(at.file_name()?);
        at = at.parent()?;
    }
}

/// `runs/compare/<experiment>`, as [`default_devices_out`].
fn default_out(experiment: &str) -> PathBuf {
    Path::new(crate::results::DEFAULT_OUT).join("compare").join(experiment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_goes_under_runs_never_beside_the_folders_compared() {
        assert_eq!(default_out("depth_sweep"), Path::new("runs/compare/depth_sweep"));
    }

    #[test]
    fn a_comparison_is_not_written_into_a_folder_compared() {
        let tmp = tempfile::tempdir().unwrap();
        let exp = tmp.path().join("results/cpu/depth_sweep");
        std::fs::create_dir_all(&exp).unwrap();
        let refused =
            not_into_an_input(&exp.join("charts"), std::slice::from_ref(&exp)).unwrap_err().to_string();
        assert!(refused.contains("a folder compared"), "{refused}");
        assert!(not_into_an_input(&tmp.path().join("results/compare/x"), &[exp]).is_ok());
    }

    #[test]
    fn a_folder_given_twice_is_refused_by_any_path_to_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("cpu/depth_sweep"), tmp.path().join("gpu/depth_sweep"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        assert!(not_twice(&[a.clone(), b.clone()]).is_ok());
        let err = not_twice(&[a.clone(), b.clone(), a.clone()]).unwrap_err().to_string();
        assert!(err.contains("given twice, as A and C"), "{err}");
        let other_path = tmp.path().join("gpu/../cpu/depth_sweep/");
        let err = not_twice(&[a.clone(), other_path.clone()]).unwrap_err().to_string();
        let both =
            format!("the same folder is given as A ({}) and B ({})", a.display(), other_path.display());
        assert!(err.contains(&both), "{err}");
        // A folder that does not exist is left to the reading, which names it.
        let missing = tmp.path().join("nowhere");
        assert!(not_twice(&[missing.clone(), missing]).is_ok());
    }

    #[test]
    fn device_folders_compare_into_a_vs_b_under_runs() {
        let names = ["cpu-amd-epyc".to_string(), "tesla-t4".to_string()];
        assert_eq!(default_devices_out(&names), Path::new("runs/compare/cpu-amd-epyc_vs_tesla-t4"));
        assert_eq!(folder_name(Path::new("results/tesla-t4/")), "tesla-t4");
    }
}
