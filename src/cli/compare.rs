//! `oomlab compare`: one experiment's folders from several devices or budgets side by side,
//! as `COMPARE.md` and overlaid charts.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::chart::{self, CompareSweep};
use crate::comparison::{self, COMPARE_MD};
use crate::results::ExperimentDir;

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Two or more results folders of the same experiment, e.g. from two devices or budgets.
    #[arg(required = true, num_args = 2.., value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Where to write COMPARE.md and the charts; default: compare/<experiment> beside the
    /// device folders of the first DIR (results/compare/<experiment>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: CompareArgs) -> Result<()> {
    let folders = args.dirs.iter().map(|d| ExperimentDir::read(d)).collect::<Result<Vec<_>>>()?;
    let c = comparison::compare(&folders)?;
    if !c.spec_differs.is_empty() {
        note!("warning: {} (noted in {COMPARE_MD})", comparison::spec_warning(&c));
    }
    let out = args.out.unwrap_or_else(|| default_out(&args.dirs[0], &c.experiment));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut names = Vec::new();
    let mut files = Vec::new();
    for chart in CompareSweep::from_comparison(&c) {
        let r = chart::render(&chart, &out)?;
        names.extend(r.png.file_name().map(|n| n.to_string_lossy().into_owned()));
        files.extend([r.png, r.svg]);
    }
    let md = out.join(COMPARE_MD);
    crate::results::fsio::write_atomic(&md, comparison::markdown(&c, &names).as_bytes())?;
    for s in &c.folders {
        say!("{}  {}", s.label(), s.dir.display());
    }
    say!("table: {}", md.display());
    for f in &files {
        say!("chart: {}", f.display());
    }
    Ok(())
}

/// `<root>/compare/<experiment>` for `<root>/<device>/<experiment>`; `compare/<experiment>`
/// when the folder has no parent to speak of.
fn default_out(first: &Path, experiment: &str) -> PathBuf {
    let root = first.parent().and_then(Path::parent).filter(|p| !p.as_os_str().is_empty());
    root.unwrap_or(Path::new(".")).join("compare").join(experiment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_goes_beside_the_device_folders() {
        assert_eq!(
            default_out(Path::new("results/tesla-t4/depth_sweep"), "depth_sweep"),
            Path::new("results/compare/depth_sweep")
        );
        assert_eq!(default_out(Path::new("depth_sweep"), "depth_sweep"), Path::new("./compare/depth_sweep"));
        assert_eq!(default_out(Path::new("a/depth_sweep"), "x"), Path::new("./compare/x"));
    }
}
