//! The upper bounds of `spec::limits`, met at parse time with the key, the place and the limit.
use super::*;

#[test]
fn every_bounded_key_is_refused_past_its_limit_where_it_is_written() {
    let cases = [
        (
            "depth = 2",
            "depth = 9223372036854775807",
            "experiments/x.toml:6:9: model.depth must be at most 10000, got 9223372036854775807; lower it",
        ),
        (
            "hidden = 64",
            "hidden = 2000000000",
            "experiments/x.toml:5:10: model.hidden must be at most 1000000, got 2000000000; lower it",
        ),
        (
            "samples = 128",
            "samples = 1000000001",
            "experiments/x.toml:9:11: data.samples must be at most 1000000000, got 1000000001; lower it",
        ),
        (
            "features = 4",
            "features = 1000001",
            "experiments/x.toml:10:12: data.features must be at most 1000000, got 1000001; lower it",
        ),
        (
            "classes = 3",
            "classes = 1000001",
            "experiments/x.toml:11:11: data.classes must be at most 1000000, got 1000001; lower it",
        ),
        (
            "batch_size = 32",
            "batch_size = 32\nsteps = 1000001",
            "experiments/x.toml:16:9: training.steps must be at most 1000000, got 1000001; lower it",
        ),
        (
            "batch_size = 32",
            "batch_size = 32\naccumulation = 10001",
            "experiments/x.toml:16:16: training.accumulation must be at most 10000, got 10001; lower it",
        ),
        (
            "batch_size = 32",
            "batch_size = 32\ncheckpoint = 10001",
            "experiments/x.toml:16:14: training.checkpoint must be at most 10000, got 10001; lower it",
        ),
    ];
    for (from, to, want) in cases {
        let e = err(&edit(from, to));
        assert!(e.starts_with(want), "{to}: {e}");
    }
    // Steps and accumulation each within their limits, but too many phases a trial together;
    // one below the bound passes.
    let e = err(&edit("batch_size = 32", "batch_size = 32\nsteps = 100000\naccumulation = 10"));
    assert!(e.contains("training.steps x training.accumulation makes 3200000 phases a trial"), "{e}");
    assert!(parse_at(&edit("batch_size = 32", "batch_size = 32\nsteps = 400000\naccumulation = 1")).is_ok());
    // A batch beyond its limit, with samples raised so that the batch is the only fault.
    let e =
        err(&edit("samples = 128", "samples = 1000000000")
            .replace("batch_size = 32", "batch_size = 100000001"));
    assert!(e.contains("training.batch_size must be at most 100000000"), "{e}");
}

#[test]
fn a_swept_value_past_a_limit_is_refused_at_the_value() {
    let spec = format!("{MINIMAL}\n[sweep]\nfield = \"model.depth\"\nvalues = [1, 20000]\n");
    let e = err(&spec);
    assert!(
        e.starts_with(
            "experiments/x.toml:19:14: sweep.values[1]: model.depth must be at most 10000, got 20000"
        ),
        "{e}"
    );
    let spec =
        format!("{MINIMAL}\n[sweep]\nfield = \"training.steps\"\nsearch = {{ start = 1, max = 9000000 }}\n");
    let e = err(&spec);
    assert!(e.contains("sweep.search.max: training.steps must be at most 1000000, got 9000000"), "{e}");
}

#[test]
fn names_longer_than_a_file_name_can_show_are_refused() {
    let long = "a".repeat(65);
    let e = err(&edit(r#"name = "x""#, &format!("name = {long:?}")));
    assert!(
        e.starts_with(
            "experiments/x.toml:2:8: experiment.name: must be at most 64 characters, got 65 characters"
        ),
        "{e}"
    );
    assert!(parse_at(&edit(r#"name = "x""#, &format!("name = {:?}", "a".repeat(64)))).is_ok());
    let spec = format!("{MINIMAL}\n[[variant]]\nname = {:?}\n", "v".repeat(300));
    let e = err(&spec);
    assert!(e.contains("variant[0].name: must be at most 64 characters, got 300 characters"), "{e}");
}

#[test]
fn no_tensor_a_valid_config_describes_passes_two_to_the_63_bytes() {
    let mut c = minimal_config();
    (c.model, c.training.batch_size) = (ModelSpec::mlp(crate::spec::limits::MAX_HIDDEN, 2), 1);
    c.data = DataSpec::Synthetic {
        samples: crate::spec::limits::MAX_SAMPLES,
        features: crate::spec::limits::MAX_FEATURES,
        classes: crate::spec::limits::MAX_CLASSES,
        seed: 0,
    };
    let bytes = crate::spec::limits::largest_tensor_bytes(&c).unwrap();
    assert!(bytes <= crate::spec::limits::MAX_TENSOR_BYTES, "{bytes}");
    c.check().unwrap();
}

/// Each variant is drawn and compared with every other: past 256 the spec is refused at the
/// first variant too many, with the count and the limit.
#[test]
fn too_many_variants_are_refused_at_the_first_too_many() {
    let variants = |n: usize| (0..n).map(|i| format!("[[variant]]\nname = \"v{i}\"\n")).collect::<String>();
    let e = err(&format!("{MINIMAL}\n{}", variants(crate::spec::limits::MAX_VARIANTS + 1)));
    assert!(e.contains("257 variants; a spec takes at most 256"), "{e}");
    let line = MINIMAL.lines().count() + 2 + 2 * crate::spec::limits::MAX_VARIANTS;
    assert!(e.starts_with(&format!("experiments/x.toml:{line}:")), "at the 257th: {e}");
    assert!(parse_at(&format!("{MINIMAL}\n{}", variants(crate::spec::limits::MAX_VARIANTS))).is_ok());
}
