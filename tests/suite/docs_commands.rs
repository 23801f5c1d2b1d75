//! Every command of the `sh` blocks in README.md and docs/*.md is one the tools take as written:
//! an `oomlab` command (through `cargo run --release --`, `target/release/oomlab`, `torchrun` or
//! `srun`) parses with the CLI's own parser, and each spec it names exists and validates, or is
//! written by a command before it in the same page (`scripts/export-model`, `cp`); a script
//! exists, is executable and knows each option given to it. And every link between the pages
//! leads to a file, and to a heading there, that exists.
//!
//! Parsing is what holds every command; three blocks are also run as written, by
//! `readme_quickstart.rs`: the first screen's quick start, "Your own model" and the 8-GPU answer.
//! The others train for minutes to hours, or need a GPU, Slurm or a network.
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir("docs")
        .expect("a docs folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The commands of a page's `sh` blocks, in order: comments dropped, lines continued with `\`
/// joined.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut inside, mut pending) = (false, String::new());
    for line in text.lines() {
        match line.trim() {
            "```sh" => inside = true,
            "```" => inside = false,
            l if inside && !l.is_empty() && !l.starts_with('#') => {
                let l = l.split(" # ").next().unwrap_or(l).trim_end();
                match l.strip_suffix('\\') {
                    Some(part) => pending.push_str(part),
                    None => {
                        pending.push_str(l);
                        out.push(std::mem::take(&mut pending));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Words as a shell splits a line without quotes, expansions or redirections in it; `None`
/// where it has any (a printf into a file), which the test leaves alone.
fn words(line: &str) -> Option<Vec<&str>> {
    (!line.contains(['\'', '"', '$', '>', '|', '`'])).then(|| line.split_whitespace().collect())
}

/// The spec an export writes: `--out X.pt` gives X.toml, else models/<name>.toml.
fn exported_spec(args: &[&str]) -> PathBuf {
    match args.iter().position(|a| *a == "--out") {
        Some(i) => Path::new(args[i + 1]).with_extension("toml"),
        None => {
            let name = args.iter().find(|a| !a.starts_with("--") && !a.contains(':')).expect("a model");
            Path::new("models").join(format!("{name}.toml"))
        }
    }
}

/// What a script takes: its own text and its Python's, where options are declared.
fn script_text(script: &Path) -> String {
    let mut text = std::fs::read_to_string(script).unwrap();
    for entry in std::fs::read_dir("scripts/reference").unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|x| x == "py") && text.contains(&name) {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    text
}

/// Checks one page's commands; returns what is wrong, a line each.
fn check_page(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut wrong = Vec::new();
    let mut written: BTreeSet<PathBuf> = BTreeSet::new();
    for line in commands(&text) {
        for part in line.split("&&").map(str::trim) {
            let Some(w) = words(part) else { continue };
            let Some(&first) = w.first() else { continue };
            let mut say = |what: String| wrong.push(format!("{}: `{part}`: {what}", page.display()));
            if first.starts_with("scripts/") {
                let script = Path::new(first);
                let executable = script
                    .metadata()
                    .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false);
                if !executable {
                    say(format!("{first} is not an executable script of the repository"));
                    continue;
                }
                let known = script_text(script);
                for option in w.iter().filter(|a| a.starts_with("--")) {
                    let name = option.split('=').next().unwrap();
                    // The whole option, not a prefix of a longer one (`--in` in `--input`).
                    let whole = known.match_indices(name).any(|(i, _)| {
                        !known[i + name.len()..]
                            .starts_with(|c: char| c.is_alphanumeric() || c == '-' || c == '_')
                    });
                    if !whole {
                        say(format!("{first} does not know {name}"));
                    }
                }
                if first == "scripts/export-model" {
                    written.insert(exported_spec(&w[1..]));
                }
            } else if first == "cp" && w.len() == 3 {
                written.insert(PathBuf::from(w[2]));
            } else if let Some(args) = oomlab_args(&w) {
                let argv = std::iter::once("oomlab").chain(args.iter().copied());
                if let Err(e) = oomlab::cli::Cli::try_parse_from(argv) {
                    say(format!("the CLI refuses it: {}", e.render()));
                }
                for spec in args.iter().filter(|a| a.ends_with(".toml")).map(PathBuf::from) {
                    if spec.is_file() {
                        if let Err(e) = oomlab::spec::load(&spec) {
                            say(format!("its spec does not validate: {e}"));
                        }
                    } else if !written.contains(&spec) {
                        say(format!(
                            "{} is not in the repository, and no command before it writes it",
                            spec.display()
                        ));
                    }
                }
            } else if first == "cargo" {
                if w.get(1) != Some(&"build") {
                    say("a cargo command that neither builds nor runs oomlab".into());
                }
            } else if !LAUNCHERS.contains(&first) {
                say(format!("`{first}` is a program this test does not know; teach it the command"));
            }
        }
    }
    wrong
}

/// Programs of others that the pages show beside oomlab's: launchers (their oomlab command is
/// checked), Slurm's queue, and printf adding variants to a spec.
const LAUNCHERS: [&str; 4] = ["torchrun", "srun", "squeue", "printf"];

/// The arguments after the program where `w` runs oomlab: `cargo run --release -- ARGS`, or a
/// launcher's `.../oomlab ARGS`.
fn oomlab_args<'a>(w: &[&'a str]) -> Option<Vec<&'a str>> {
    if w.first() == Some(&"cargo") {
        let at = w.iter().position(|a| *a == "--")?;
        return Some(w[at + 1..].to_vec());
    }
    let at = w.iter().position(|a| *a == "oomlab" || a.ends_with("/oomlab"))?;
    Some(w[at + 1..].to_vec())
}

#[test]
fn every_command_in_readme_and_docs_is_one_the_tools_take_as_written() {
    let pages = pages();
    assert!(pages.len() > 1, "README.md and docs/*.md: {pages:?}");
    let mut count = 0;
    let wrong: Vec<String> = pages
        .iter()
        .flat_map(|p| {
            count += commands(&std::fs::read_to_string(p).unwrap()).len();
            check_page(p)
        })
        .collect();
    assert!(count >= 10, "the pages' sh blocks hold {count} commands");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The check can fail: a renamed option, a spec that is not there and one written nowhere are
/// each refused.
#[test]
fn a_command_the_tools_would_refuse_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    let text = "```sh\ncargo run --release -- run experiments/depth_sweep.toml --budgett 2GiB\n\
                cargo run --release -- estimate experiments/no_such.toml\n\
                scripts/export-model resnet18 --input images:3x32x32 --class 10\n\
                cargo run --release -- estimate models/resnet18.toml --brief\n```\n";
    std::fs::write(&page, text).unwrap();
    let wrong = check_page(&page);
    assert_eq!(wrong.len(), 3, "{wrong:#?}");
    assert!(wrong[0].contains("the CLI refuses it") && wrong[0].contains("--budgett"), "{}", wrong[0]);
    assert!(wrong[1].contains("experiments/no_such.toml is not in the repository"), "{}", wrong[1]);
    assert!(wrong[2].contains("does not know --class"), "{}", wrong[2]);
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, punctuation but `-` and `_`
/// dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut inside = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            inside = !inside;
        } else if !inside && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_between_the_pages_leads_somewhere() {
    let mut wrong = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for target in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            if target.starts_with("http") || target.contains(char::is_whitespace) {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() { page.clone() } else { dir.join(path) };
            if !file.exists() {
                wrong.push(format!("{}: ({target}): no such file", page.display()));
            } else if !fragment.is_empty()
                && file.extension().is_some_and(|x| x == "md")
                && !anchors(&std::fs::read_to_string(&file).unwrap()).contains(fragment)
            {
                wrong.push(format!("{}: ({target}): no such heading", page.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
