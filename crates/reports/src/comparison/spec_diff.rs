//! Where two runs' specs differ, key by key: what `compare`'s warning names, so that a reader
//! sees at once whether the difference matters ("training.batch_size: 32 in A, 64 in B") rather
//! than having to diff two manifests by hand.
//!
//! The validated spec (as the manifest records it) is walked leaf by leaf. A difference in the
//! base configuration shows in every variant's configuration too; those echoes are left out, so
//! that one change in the spec file is one line here. A base change that every variant overrides
//! ran nowhere and is no difference.
use serde_json::Value;

use crate::results::Manifest;

/// At most this many differences are named; the rest are counted.
const SHOWN: usize = 4;

/// One folder's differences from the first's.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecDiff {
    /// The folder's letter ("B").
    pub letter: String,
    /// "training.batch_size: 32 in A, 64 in B", one per differing key or input file.
    pub keys: Vec<String>,
}

impl SpecDiff {
    /// The differences, the first few named, the rest counted: "training.batch_size: 32 in
    /// A, 64 in B; and 3 more".
    pub fn summary(&self) -> String {
        let mut s = self.keys.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; ");
        if self.keys.len() > SHOWN {
            s.push_str(&format!("; and {} more", self.keys.len() - SHOWN));
        }
        s
    }
}

/// What a run ran, as two folders must share to compare: the validated spec without its file's
/// path, its description and its `[run]` table (the device and budget, which the folders show
/// and may differ in on purpose). A comment or a reworded description changes nothing; a width,
/// a batch or a swapped module file does.
fn what_ran(m: &Manifest) -> Value {
    let mut spec = m.spec.clone();
    if let Some(o) = spec.as_object_mut() {
        for key in ["path", "description", "run"] {
            o.remove(key);
        }
    }
    drop_defaults(&mut spec);
    spec
}

/// Removes, wherever a configuration holds it, a table that later oomlab records and earlier did
/// not, where it has the value that ran before it existed: a `parallel` of one process. Two runs
/// of the same spec file, recorded before and after the table was, then run the same.
fn drop_defaults(v: &mut Value) {
    let one_process = serde_json::to_value(crate::spec::Parallel::default()).unwrap_or(Value::Null);
    fn walk(v: &mut Value, key: &str, default: &Value) {
        match v {
            Value::Object(o) => {
                if o.get(key) == Some(default) {
                    o.remove(key);
                }
                o.values_mut().for_each(|x| walk(x, key, default));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, key, default)),
            _ => {}
        }
    }
    walk(v, "parallel", &one_process);
}

/// How `other` differs from `first` in what it runs; empty where it runs the same. `letters`
/// are the two folders' letters, first's first.
pub fn differences(first: &Manifest, other: &Manifest, letters: [&str; 2]) -> Vec<String> {
    let [a, b] = letters;
    // Manifests written before the validated spec was recorded: only their text compares.
    if first.spec.is_null() || other.spec.is_null() {
        return if first.spec_source == other.spec_source {
            Vec::new()
        } else {
            vec!["the spec text (one of the two manifests predates the recorded spec)".to_string()]
        };
    }
    let (left, right) = (what_ran(first), what_ran(other));
    let mut leaves = Vec::new();
    walk(String::new(), Some(&left), Some(&right), &mut leaves);
    let names = variant_names(&left);
    // With variants, the base never runs on its own: a base change that every variant overrides
    // changes nothing that ran. Where the variants differ in number, the array itself is named
    // and each base change is kept.
    let base_runs = names.is_empty() || variant_names(&right).len() != names.len();
    let mut keys: Vec<String> = leaves
        .iter()
        .filter(|(path, l, r)| !echoes_base(path, l, r, &leaves))
        .filter(|(path, l, r)| base_runs || !path.starts_with("base.") || echoed(path, l, r, &leaves))
        .map(|(path, l, r)| format!("{}: {} in {a}, {} in {b}", readable(path, &names), shown(l), shown(r)))
        .collect();
    let sha = |m: &Manifest| m.inputs.iter().map(|i| (i.path.clone(), i.sha256.clone())).collect::<Vec<_>>();
    let (mine, theirs) = (sha(first), sha(other));
    // A file is known by its path, or, at another path (another folder, another mount), by its
    // contents: the same bytes read from elsewhere are no difference.
    let same_bytes = |hash: &str, list: &[(String, String)]| list.iter().any(|(_, h)| h == hash);
    for (path, hash) in &theirs {
        match mine.iter().find(|(p, _)| p == path) {
            Some((_, h)) if h == hash => {}
            Some(_) => keys.push(format!("input file {path}: its contents differ")),
            None if same_bytes(hash, &mine) => {}
            None => keys.push(format!("input file {path}: read in {b} only")),
        }
    }
    for (path, hash) in &mine {
        if !theirs.iter().any(|(q, _)| q == path) && !same_bytes(hash, &theirs) {
            keys.push(format!("input file {path}: read in {a} only"));
        }
    }
    keys
}

/// Every leaf (path, left, right) where the two values differ; a missing side is `None`.
fn walk(path: String, left: Option<&Value>, right: Option<&Value>, out: &mut Vec<(String, Value, Value)>) {
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    // A key written as null is a key left out.
    let (left, right) = (left.filter(|v| !v.is_null()), right.filter(|v| !v.is_null()));
    match (left, right) {
        (Some(Value::Object(l)), Some(Value::Object(r))) => {
            let mut keys: Vec<&String> = l.keys().collect();
            keys.extend(r.keys().filter(|k| !l.contains_key(*k)));
            for k in keys {
                walk(join(k), l.get(k), r.get(k), out);
            }
        }
        (Some(Value::Array(l)), Some(Value::Array(r))) if l.len() == r.len() => {
            for (i, (x, y)) in l.iter().zip(r).enumerate() {
                walk(format!("{path}[{i}]"), Some(x), Some(y), out);
            }
        }
        (l, r) if l != r => {
            out.push((path, l.cloned().unwrap_or(Value::Null), r.cloned().unwrap_or(Value::Null)))
        }
        _ => {}
    }
}

/// The key under a variant's configuration: `training.dtype` for `variants[1].config.training.dtype`.
fn variant_key(path: &str) -> Option<&str> {
    path.strip_prefix("variants[").and_then(|p| p.split_once("].config.")).map(|(_, key)| key)
}

/// Whether `path` is a variant's copy of a base difference: `variants[i].config.X` where
/// `base.X` differs in the same way.
fn echoes_base(path: &str, l: &Value, r: &Value, all: &[(String, Value, Value)]) -> bool {
    let Some(key) = variant_key(path) else { return false };
    all.iter().any(|(p, bl, br)| p.strip_prefix("base.") == Some(key) && bl == l && br == r)
}

/// Whether the base difference at `path` shows in some variant's configuration, that is,
/// whether some variant inherits it.
fn echoed(path: &str, l: &Value, r: &Value, all: &[(String, Value, Value)]) -> bool {
    let Some(key) = path.strip_prefix("base.") else { return false };
    all.iter().any(|(p, vl, vr)| variant_key(p) == Some(key) && vl == l && vr == r)
}

/// The variants' names, by index, from the first folder's spec.
fn variant_names(spec: &Value) -> Vec<String> {
    let Some(variants) = spec.get("variants").and_then(Value::as_array) else { return Vec::new() };
    variants.iter().map(|v| v.get("name").and_then(Value::as_str).unwrap_or("").to_string()).collect()
}

/// A path as a spec's reader knows it: `base.training.batch_size` is `training.batch_size`;
/// `variants[1].config.training.dtype` is `variant "fp16": training.dtype`.
fn readable(path: &str, names: &[String]) -> String {
    if let Some(rest) = path.strip_prefix("base.") {
        return rest.to_string();
    }
    if let Some((index, rest)) = path.strip_prefix("variants[").and_then(|p| p.split_once(']')) {
        let name = index.parse::<usize>().ok().and_then(|i| names.get(i)).filter(|n| !n.is_empty());
        let rest = rest.strip_prefix(".config.").or_else(|| rest.strip_prefix('.')).unwrap_or(rest);
        return match name {
            Some(n) => format!("variant {n:?}: {rest}"),
            None => format!("variant {}: {rest}", index.parse::<usize>().map_or(0, |i| i + 1)),
        };
    }
    path.to_string()
}

/// A value, short: `32`, `"adam"`, `absent`; a long one cut at 40 characters.
fn shown(v: &Value) -> String {
    let s = match v {
        Value::Null => "absent".to_string(),
        v => v.to_string(),
    };
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(39).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::fixtures::manifest;
    use serde_json::json;

    fn pair(a: Value, b: Value) -> Vec<String> {
        let (mut x, mut y) = (manifest("e", "d", None, 1), manifest("e", "d", None, 1));
        x.spec = a;
        y.spec = b;
        differences(&x, &y, ["A", "B"])
    }

    #[test]
    fn a_base_key_is_named_once_not_again_in_every_variant() {
        let spec = |batch: u64| {
            let config = json!({"training": {"batch_size": batch, "dtype": "float32"}});
            json!({"base": config, "variants": [{"name": "fp16", "config": config}, {"name": "bf16", "config": config}]})
        };
        assert_eq!(pair(spec(32), spec(64)), ["training.batch_size: 32 in A, 64 in B"]);
        assert!(pair(spec(32), spec(32)).is_empty());
        // A variant's own change is named with the variant.
        let mut b = spec(32);
        b["variants"][1]["config"]["training"]["dtype"] = json!("bfloat16");
        assert_eq!(pair(spec(32), b), [r#"variant "bf16": training.dtype: "float32" in A, "bfloat16" in B"#]);
    }

    #[test]
    fn a_base_key_every_variant_overrides_is_no_difference() {
        let spec = |base_dtype: &str| {
            let variant =
                |d: &str| json!({"name": d, "config": {"training": {"batch_size": 32, "dtype": d}}});
            json!({"base": {"training": {"batch_size": 32, "dtype": base_dtype}}, "variants": [variant("float16"), variant("bfloat16")]})
        };
        assert!(pair(spec("float32"), spec("float64")).is_empty(), "the base's dtype never ran");
        // One variant that inherits it makes it a difference again, named once.
        let mut a = spec("float32");
        let mut b = spec("float64");
        a["variants"][1]["config"]["training"]["dtype"] = json!("float32");
        b["variants"][1]["config"]["training"]["dtype"] = json!("float64");
        assert_eq!(pair(a, b), [r#"training.dtype: "float32" in A, "float64" in B"#]);
        // Without variants the base is what ran.
        let plain = |d: &str| json!({"base": {"training": {"dtype": d}}});
        assert_eq!(pair(plain("float32"), plain("float64")).len(), 1);
    }

    #[test]
    fn path_description_and_run_are_not_differences_but_a_missing_key_is() {
        let a = json!({"path": "a.toml", "description": "x", "run": {"device": "cpu"}, "sweep": {"field": "model.depth"}});
        let b = json!({"path": "b.toml", "description": "y", "run": {"device": "cuda"}, "seed": null});
        assert_eq!(pair(a, b), [r#"sweep: {"field":"model.depth"} in A, absent in B"#], "a null is absent");
    }

    /// A run recorded before `parallel` was (no table) and one after it (one process) ran the
    /// same; two ranks against none is a difference.
    #[test]
    fn a_parallel_table_of_one_process_is_what_ran_before_it_was_recorded() {
        let one = serde_json::to_value(crate::spec::Parallel::default()).unwrap();
        let before = json!({"base": {"training": {"batch_size": 32}}});
        let after = json!({"base": {"training": {"batch_size": 32}, "parallel": one}});
        assert!(pair(before.clone(), after.clone()).is_empty(), "the same run");
        let mut two = after;
        two["base"]["parallel"]["world_size"] = json!(2);
        assert_eq!(pair(before, two).len(), 1, "two ranks differ");
    }

    #[test]
    fn changed_input_files_are_named() {
        let input = |path: &str, sha: &str| crate::results::inputs::InputFile {
            path: path.into(),
            bytes: 1,
            sha256: sha.into(),
        };
        let (mut x, mut y) = (manifest("e", "d", None, 1), manifest("e", "d", None, 1));
        x.inputs = vec![input("m.pt", "aa"), input("data.csv", "cc"), input("/a/same.csv", "ee")];
        y.inputs = vec![input("m.pt", "bb"), input("other.csv", "dd"), input("/mnt/b/same.csv", "ee")];
        assert_eq!(
            differences(&x, &y, ["A", "C"]),
            [
                "input file m.pt: its contents differ",
                "input file other.csv: read in C only",
                "input file data.csv: read in A only"
            ]
        );
    }

    #[test]
    fn the_summary_names_four_and_counts_the_rest() {
        let d = SpecDiff { letter: "B".into(), keys: (1..=6).map(|i| format!("k{i}")).collect() };
        assert_eq!(d.summary(), "k1; k2; k3; k4; and 2 more");
    }
}
