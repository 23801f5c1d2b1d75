//! `oomlab slurm`: the sbatch scripts that run a spec's shards as a Slurm job array, one task per
//! shard, and merge them in a job that waits for the array (`--dependency=afterany`, so that it
//! runs, and names the missing shards, even when a task failed).
//!
//! Everything a script needs is written into it as an absolute path (the binary, the spec, the
//! results root, the logs): a task starts on another node, in another folder, and those paths
//! must be on storage every node sees. The environment goes with the job (`--export=ALL`), so
//! `LIBTORCH`, `LD_LIBRARY_PATH` or `OMP_NUM_THREADS` set where `oomlab slurm` runs hold in the
//! tasks too.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::shell::quote;

/// What a job asks Slurm for, as given on the command line (checked by [`check_value`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub partition: Option<String>,
    pub time: Option<String>,
    pub account: Option<String>,
    /// The array's tasks only: the merge needs no GPU.
    pub gres: Option<String>,
    /// The array's tasks only.
    pub cpus_per_task: Option<u32>,
    /// More sbatch options, as written (`--qos=short`), for the array and the merge.
    pub extra: Vec<String>,
}

/// A value that goes into an `#SBATCH` line: one word, no quotes (sbatch splits those lines on
/// blanks, and a line break would start a line of the script).
pub fn check_value(flag: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control() || "'\"\\".contains(c)) {
        return Err(format!(
            "{flag} {value:?}: give one word without blanks, quotes or backslashes (it goes into an #SBATCH \
             line)"
        ));
    }
    Ok(())
}

/// One spec's job array and its merge (for one GPU kind, with `--per-gpu-kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayJob {
    /// The job's name: `oomlab-<experiment>[-<kind>]`; the merge is `oomlab-merge-...`.
    pub name: String,
    pub experiment: String,
    /// The spec, absolute.
    pub spec: PathBuf,
    pub shards: usize,
    /// The results root the tasks write under, absolute.
    pub out: PathBuf,
    /// The oomlab binary the tasks run, absolute.
    pub oomlab: PathBuf,
    /// More arguments for `oomlab run` (`--device cpu`, `--budget ...`, `--force`).
    pub run_args: Vec<String>,
    /// More arguments for `oomlab merge` (`--force`).
    pub merge_args: Vec<String>,
    pub resources: Resources,
    /// Where Slurm writes the tasks' output, absolute.
    pub logs: PathBuf,
}

fn path(p: &Path) -> String {
    quote(&p.to_string_lossy())
}

impl ArrayJob {
    /// The merge job's name.
    pub fn merge_name(&self) -> String {
        self.name.replacen("oomlab-", "oomlab-merge-", 1)
    }

    /// The `#SBATCH` lines both jobs share: partition, time, account, the extra options.
    fn common(&self, out: &mut String) {
        let r = &self.resources;
        for (flag, v) in [("partition", &r.partition), ("time", &r.time), ("account", &r.account)] {
            if let Some(v) = v {
                *out += &format!("#SBATCH --{flag}={v}\n");
            }
        }
        for e in &r.extra {
            *out += &format!("#SBATCH {e}\n");
        }
    }

    /// The job array: task I runs `oomlab run SPEC --shard I/N`.
    pub fn array_script(&self) -> String {
        let n = self.shards;
        let mut s = format!(
            "#!/bin/bash\n\
             # Written by `oomlab slurm` (oomlab {version}): {spec} as a job array of {n} shards, one task\n\
             # per shard. Task I runs `oomlab run SPEC --shard I/{n}` into its own folder,\n\
             # {out}/<device>/{exp}/shards/I-of-{n}/; the merge job waits for the array and merges them.\n\
             # The paths must be on storage every node sees.\n\
             #SBATCH --job-name={name}\n\
             #SBATCH --array=1-{n}\n\
             #SBATCH --output={logs}/%x-%A_%a.out\n\
             #SBATCH --export=ALL\n",
            version = env!("CARGO_PKG_VERSION"),
            spec = self.spec.display(),
            out = self.out.display(),
            exp = self.experiment,
            name = self.name,
            logs = self.logs.display(),
        );
        self.common(&mut s);
        if let Some(g) = &self.resources.gres {
            s += &format!("#SBATCH --gres={g}\n");
        }
        if let Some(c) = self.resources.cpus_per_task {
            s += &format!("#SBATCH --cpus-per-task={c}\n");
        }
        let args: String = self.run_args.iter().map(|a| format!(" {}", quote(a))).collect();
        s += &format!(
            "set -euo pipefail\n\
             exec {oomlab} run {spec} --shard \"${{SLURM_ARRAY_TASK_ID}}/{n}\" --out {out}{args}\n",
            oomlab = path(&self.oomlab),
            spec = path(&self.spec),
            out = path(&self.out),
        );
        s
    }

    /// The merge: every device folder of the root that holds this experiment's shards.
    pub fn merge_script(&self) -> String {
        let mut s = format!(
            "#!/bin/bash\n\
             # Written by `oomlab slurm` (oomlab {version}): merges the shards of {exp} under {out} into\n\
             # {out}/<device>/{exp}/ (summary.csv, trace.csv, trace.json, manifest.json, charts).\n\
             # Submitted with --dependency=afterany on the array: it runs whatever became of the tasks,\n\
             # and names any shard that is missing.\n\
             #SBATCH --job-name={name}\n\
             #SBATCH --output={logs}/%x-%j.out\n\
             #SBATCH --export=ALL\n",
            version = env!("CARGO_PKG_VERSION"),
            exp = self.experiment,
            out = self.out.display(),
            name = self.merge_name(),
            logs = self.logs.display(),
        );
        self.common(&mut s);
        let args: String = self.merge_args.iter().map(|a| format!(" {}", quote(a))).collect();
        s += &format!(
            "set -uo pipefail\n\
             found=0\n\
             status=0\n\
             for dir in {out}/*/{exp}; do\n\
             \x20 [ -d \"$dir/shards\" ] || continue\n\
             \x20 found=1\n\
             \x20 {oomlab} merge \"$dir\"{args} || status=1\n\
             done\n\
             if [ \"$found\" = 0 ]; then\n\
             \x20 printf 'oomlab merge: no shards of %s under %s: did the array run? Its logs are in %s\\n' {exp} {out} {logs} >&2\n\
             \x20 exit 1\n\
             fi\n\
             exit \"$status\"\n",
            out = path(&self.out),
            exp = quote(&self.experiment),
            oomlab = path(&self.oomlab),
            logs = path(&self.logs),
        );
        s
    }
}

/// Where one array's scripts go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub job: ArrayJob,
    pub array: PathBuf,
    pub merge: PathBuf,
}

impl Written {
    /// The two steps to submit by hand, as shell lines: the array, then the merge after it.
    pub fn submit_lines(&self) -> [String; 2] {
        [
            format!(
                "jid=$(sbatch --parsable {}) && jid=${{jid%%;*}} && echo \"array $jid\"",
                path(&self.array)
            ),
            format!("sbatch --dependency=afterany:$jid {}", path(&self.merge)),
        ]
    }
}

/// `submit.sh`: every array and its merge, in order.
pub fn submit_script(written: &[Written]) -> String {
    let mut s = String::from(
        "#!/bin/bash\n# Written by `oomlab slurm`: submits each job array, then its merge to run after it.\nset -euo pipefail\n",
    );
    for w in written {
        let [array, merge] = w.submit_lines();
        s += &format!("# {}\n{array}\n{merge}\n", w.job.name);
    }
    s
}

/// Writes one array's two scripts into `dir`.
pub fn write(job: ArrayJob, dir: &Path) -> Result<Written> {
    let stem = job.name.trim_start_matches("oomlab-").to_string();
    let array = dir.join(format!("{stem}.sbatch"));
    let merge = dir.join(format!("{stem}-merge.sbatch"));
    for (p, text) in [(&array, job.array_script()), (&merge, job.merge_script())] {
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(Written { job, array, merge })
}

/// Job ids of a submitted array and its merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub array: String,
    pub merge: String,
}

/// Submits the array with `sbatch --parsable`, then the merge to run after it.
pub fn submit(w: &Written) -> Result<Submitted> {
    let array = sbatch(&[], &w.array)?;
    // The array is queued by now: a failed merge submission must say so, or a second --submit
    // would queue the array twice.
    let merge = sbatch(&[format!("--dependency=afterany:{array}")], &w.merge).with_context(|| {
        format!(
            "array job {array} ({}) is queued without its merge: submit the merge with `sbatch \
             --dependency=afterany:{array} {}` (not --submit again, which would queue the array twice)",
            w.job.name,
            path(&w.merge)
        )
    })?;
    Ok(Submitted { array, merge })
}

fn sbatch(args: &[String], script: &Path) -> Result<String> {
    let out = Command::new("sbatch").arg("--parsable").args(args).arg(script).output().map_err(|e| {
        anyhow::anyhow!(
            "cannot run sbatch ({e}): submit from a machine with Slurm's commands (a login node), or later with \
             the scripts written"
        )
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "1234" or "1234;cluster".
    let id = text.trim().split(';').next().unwrap_or_default().to_string();
    if !out.status.success() || id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        bail!(
            "sbatch {} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> ArrayJob {
        ArrayJob {
            name: "oomlab-depth_sweep-a100".into(),
            experiment: "depth_sweep".into(),
            spec: "/shared/oomlab/experiments/depth_sweep.toml".into(),
            shards: 4,
            out: "/shared/results/a100".into(),
            oomlab: "/shared/oomlab/target/release/oomlab".into(),
            run_args: vec!["--budget".into(), "15.90GiB".into()],
            merge_args: vec![],
            resources: Resources {
                partition: Some("gpu".into()),
                time: Some("01:00:00".into()),
                account: Some("hep".into()),
                gres: Some("gpu:a100:1".into()),
                cpus_per_task: Some(4),
                extra: vec!["--qos=short".into()],
            },
            logs: "/shared/results/slurm/logs".into(),
        }
    }

    #[test]
    fn the_array_runs_one_shard_per_task_with_what_was_asked_for() {
        let s = job().array_script();
        for line in [
            "#SBATCH --job-name=oomlab-depth_sweep-a100\n",
            "#SBATCH --array=1-4\n",
            "#SBATCH --output=/shared/results/slurm/logs/%x-%A_%a.out\n",
            "#SBATCH --export=ALL\n",
            "#SBATCH --partition=gpu\n",
            "#SBATCH --time=01:00:00\n",
            "#SBATCH --account=hep\n",
            "#SBATCH --qos=short\n",
            "#SBATCH --gres=gpu:a100:1\n",
            "#SBATCH --cpus-per-task=4\n",
            "exec /shared/oomlab/target/release/oomlab run /shared/oomlab/experiments/depth_sweep.toml \
             --shard \"${SLURM_ARRAY_TASK_ID}/4\" --out /shared/results/a100 --budget 15.90GiB\n",
        ] {
            assert!(s.contains(line), "no {line:?} in\n{s}");
        }
        assert!(s.starts_with("#!/bin/bash\n"));
        // sbatch stops reading #SBATCH lines at the first command.
        let last_sbatch = s.rfind("#SBATCH").unwrap();
        assert!(s.find("set -euo").unwrap() > last_sbatch);
    }

    #[test]
    fn the_merge_needs_no_gpu_and_merges_every_device_folder() {
        let s = job().merge_script();
        assert!(s.contains("#SBATCH --job-name=oomlab-merge-depth_sweep-a100\n"), "{s}");
        assert!(s.contains("#SBATCH --partition=gpu\n") && s.contains("#SBATCH --time=01:00:00\n"));
        assert!(!s.contains("--gres") && !s.contains("--cpus-per-task"), "{s}");
        assert!(s.contains("for dir in /shared/results/a100/*/depth_sweep; do\n"), "{s}");
        assert!(s.contains("/shared/oomlab/target/release/oomlab merge \"$dir\" || status=1\n"), "{s}");
    }

    /// The merge's message when no shard is found names --out as the user wrote it, and runs
    /// nothing a quote or backtick in it could start.
    #[test]
    fn the_merge_script_quotes_every_path_it_prints() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("b`touch PWNED`\"q");
        let mut j = job();
        (j.out, j.logs) = (out.clone(), tmp.path().join("logs"));
        let script = tmp.path().join("merge.sbatch");
        std::fs::write(&script, j.merge_script()).unwrap();
        let ran = std::process::Command::new("bash").arg(&script).current_dir(tmp.path()).output().unwrap();
        let said = String::from_utf8_lossy(&ran.stderr);
        assert_eq!(ran.status.code(), Some(1), "{said}");
        assert!(said.contains(&format!("no shards of depth_sweep under {}", out.display())), "{said}");
        assert!(!tmp.path().join("PWNED").exists(), "a backtick in --out ran a command");
    }

    #[test]
    fn words_are_quoted_for_the_shell_and_sbatch_values_are_one_word() {
        assert_eq!(quote("/a/b-c_d.toml"), "/a/b-c_d.toml");
        assert_eq!(quote("my results"), "'my results'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert!(check_value("--partition", "gpu").is_ok());
        for bad in ["", "a b", "a\nb", "x'y"] {
            let err = check_value("--partition", bad).unwrap_err();
            assert!(err.contains("--partition") && err.contains("one word"), "{err}");
        }
    }

    #[test]
    fn submitting_by_hand_chains_the_merge_after_the_array() {
        let w = Written { job: job(), array: "/s/a.sbatch".into(), merge: "/s/a-merge.sbatch".into() };
        let [array, merge] = w.submit_lines();
        assert_eq!(array, "jid=$(sbatch --parsable /s/a.sbatch) && jid=${jid%%;*} && echo \"array $jid\"");
        assert_eq!(merge, "sbatch --dependency=afterany:$jid /s/a-merge.sbatch");
        let all = submit_script(&[w]);
        assert!(all.contains("set -euo pipefail\n# oomlab-depth_sweep-a100\njid=$(sbatch"), "{all}");
    }
}
