//! `[sweep]`: lists, searches and halvings, and swept values checked against the base.
use super::*;

#[test]
fn search_on_learning_rate_is_refused() {
    let text = format!("{MINIMAL}\n[sweep]\nfield = \"training.lr\"\nsearch = {{ start = 1, max = 8 }}\n");
    let e = err(&text);
    assert!(
        e.starts_with("experiments/x.toml:19:10: sweep.search: training.lr is not a whole-number field, so it cannot be searched;"),
        "{e}"
    );
}

#[test]
fn batch_search_past_samples_is_refused_up_front() {
    let text = format!(
        "{MINIMAL}\n[sweep]\nfield = \"training.batch_size\"\nsearch = {{ start = 1, max = 4096 }}\n"
    );
    let e = err(&text);
    assert!(
        e.starts_with("experiments/x.toml:19:29: sweep.search.max: training.batch_size 4096 is larger than data.samples 128"),
        "{e}"
    );
}

#[test]
fn search_bounds_are_checked() {
    let sweep = |s: &str| format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nsearch = {s}\n");
    let e = err(&sweep("{ start = 8, max = 4 }"));
    assert_eq!(
        e,
        "experiments/x.toml:18:29: sweep.search.max: must be >= start (8), got 4; raise max or lower start"
    );
    let e = err(&sweep("{ start = 0, max = 4 }"));
    assert!(
        e.starts_with("experiments/x.toml:18:20: sweep.search.start: must be a whole number >= 1, got 0;"),
        "{e}"
    );
    let e = err(&sweep("{ start = 1, factor = 1, max = 4 }"));
    assert!(
        e.starts_with("experiments/x.toml:18:32: sweep.search.factor: must be a whole number >= 2, got 1;"),
        "{e}"
    );
    let spec = parse_at(&sweep("{ start = 16, max = 4096 }")).unwrap();
    let mode =
        SweepMode::Search { start: 16, factor: 2, max: 4096, guided: true, anchor: None, implied_max: false };
    assert_eq!(spec.sweep, Some(Sweep { field: Field::Hidden, mode }));
}

#[test]
fn guidance_is_on_unless_turned_off() {
    let sweep = |s: &str| format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nsearch = {s}\n");
    let spec = parse_at(&sweep("{ start = 16, factor = 3, max = 4096, guided = false }")).unwrap();
    let mode = SweepMode::Search {
        start: 16,
        factor: 3,
        max: 4096,
        guided: false,
        anchor: None,
        implied_max: false,
    };
    assert_eq!(spec.sweep, Some(Sweep { field: Field::Hidden, mode }));
    let e = err(&sweep("{ start = 16, max = 4096, guided = \"no\" }"));
    assert_eq!(
        e,
        "experiments/x.toml:18:45: sweep.search.guided: must be true or false, got \"no\"; set it to true (probe \
         the estimate's predicted largest value first, where it covers the configuration) or false (bisect \
         without it), e.g. search = { start = 1, max = 4096, guided = false }"
    );
    let e = err(&sweep("{ start = 16, max = 4096, guide = false }"));
    assert_eq!(
        e,
        "experiments/x.toml:18:36: unknown key `guide` in sweep.search; did you mean `guided`? expected one of: start, factor, max, guided, anchor"
    );
}

#[test]
fn fractional_list_value_for_an_integer_field_names_its_index() {
    let text = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nvalues = [1, 2, 2.5]\n");
    assert_eq!(
        err(&text),
        "experiments/x.toml:18:17: sweep.values[2]: model.depth takes whole numbers, got 2.5; e.g. values = [1, 2, 4]"
    );
    let text = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nvalues = [1, \"two\"]\n");
    assert!(
        err(&text).starts_with("experiments/x.toml:18:14: sweep.values[1]: must be a number, got \"two\";")
    );
}

#[test]
fn list_values_are_checked_against_the_base() {
    let text = format!("{MINIMAL}[sweep]\nfield = \"training.batch_size\"\nvalues = [16, 64, 512]\n");
    let e = err(&text);
    assert!(
        e.starts_with("experiments/x.toml:18:19: sweep.values[2]: training.batch_size 512 is larger than data.samples 128"),
        "{e}"
    );
    let text = format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nvalues = [0, 4]\n");
    assert_eq!(
        err(&text),
        "experiments/x.toml:18:11: sweep.values[0]: model.hidden must be at least 1; change this value or remove it"
    );
}

#[test]
fn learning_rates_may_be_listed() {
    let text = format!("{MINIMAL}[sweep]\nfield = \"training.lr\"\nvalues = [0.1, 1e-3]\n");
    let spec = parse_at(&text).unwrap();
    assert_eq!(spec.sweep.unwrap().mode, SweepMode::List(vec![0.1, 0.001]));
}

#[test]
fn swept_field_may_be_left_out_of_its_table() {
    let no_depth = edit("depth = 2\n", "");
    let spec = parse_at(&format!("{no_depth}[sweep]\nfield = \"model.depth\"\nvalues = [3, 5]\n")).unwrap();
    assert_eq!(spec.base.model, ModelSpec::mlp(64, 3));
    let no_batch = edit("batch_size = 32\n", "");
    let text =
        format!("{no_batch}[sweep]\nfield = \"training.batch_size\"\nsearch = {{ start = 4, max = 64 }}\n");
    assert_eq!(parse_at(&text).unwrap().base.training.batch_size, 4);
    // ... but only the swept one.
    let e = err(&format!("{no_depth}[sweep]\nfield = \"model.hidden\"\nvalues = [3, 5]\n"));
    assert!(e.starts_with("experiments/x.toml:4:1: model.depth is missing;"), "{e}");
}

#[test]
fn omitted_swept_samples_take_the_first_value_and_are_checked() {
    let no_samples = edit("samples = 128\n", "");
    let text = format!("{no_samples}[sweep]\nfield = \"data.samples\"\nvalues = [16, 256]\n");
    let e = err(&text);
    assert!(
        e.starts_with("experiments/x.toml:17:11: sweep.values[0]: training.batch_size 32 is larger than data.samples 16"),
        "{e}"
    );
}

#[test]
fn sweep_needs_exactly_one_of_values_search_and_halve() {
    let sweep = |modes: &str| format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\n{modes}");
    let both = sweep("values = [1]\nsearch = { start = 1, max = 2 }\n");
    assert_eq!(
        err(&both),
        "experiments/x.toml:19:10: sweep: give one of values, search and halve, not both values and search; remove all but one"
    );
    let e = err(&sweep("values = [1]\nhalve = { start = 2 }\n"));
    assert_eq!(e, "experiments/x.toml:19:9: sweep: give one of values, search and halve, not both values and halve; remove all but one");
    // Placed at the one written last.
    let e = err(&sweep("halve = { start = 2 }\nsearch = { start = 1, max = 2 }\n"));
    assert_eq!(e, "experiments/x.toml:19:10: sweep: give one of values, search and halve, not both search and halve; remove all but one");
    let e = err(&sweep("values = [1]\nhalve = { start = 2 }\nsearch = { start = 1, max = 2 }\n"));
    assert_eq!(e, "experiments/x.toml:20:10: sweep: give one of values, search and halve, not all three; remove all but one");
    let neither = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\n");
    assert_eq!(
        err(&neither),
        "experiments/x.toml:16:1: sweep: no values, search or halve to sweep model.depth over; add e.g. values = [1, 2, 4], search = { start = 1, factor = 2, max = 4096 } or halve = { start = 4096 }"
    );
    let empty = format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nvalues = []\n");
    assert!(err(&empty).starts_with("experiments/x.toml:18:10: sweep.values: the list is empty"));
    let bad = format!("{MINIMAL}[sweep]\nfield = \"model.width\"\nvalues = [1]\n");
    assert!(err(&bad).starts_with("experiments/x.toml:17:9: sweep.field: \"model.width\" is not a field that can be swept; use one of: model.depth,"));
}

#[test]
fn csv_data_fields_cannot_be_swept() {
    let csv = edit(
        "samples = 128\nfeatures = 4\nclasses = 3\n",
        "kind = \"csv\"\npath = \"a.csv\"\nlabel = \"y\"\n",
    );
    let e = err(&format!("{csv}[sweep]\nfield = \"data.samples\"\nvalues = [64]\n"));
    assert!(e.starts_with("experiments/x.toml:17:9: sweep.field: data.samples does not apply to this spec's mlp 2x64 and csv data"), "{e}");
}

#[test]
fn halve_sweeps_from_a_start() {
    let sweep =
        |field: &str, halve: &str| format!("{MINIMAL}[sweep]\nfield = \"{field}\"\nhalve = {halve}\n");
    let spec = parse_at(&sweep("training.batch_size", "{ start = 64 }")).unwrap();
    let want = Sweep { field: Field::BatchSize, mode: SweepMode::Halve { start: 64 } };
    assert_eq!(spec.sweep, Some(want));
    assert_eq!(spec.base, minimal_config());
    assert_eq!(
        err(&sweep("training.batch_size", "{ start = 4096 }")),
        "experiments/x.toml:18:19: sweep.halve.start: training.batch_size 4096 is larger than data.samples 128: a batch is drawn from the data set without repeats; raise data.samples"
    );
    assert_eq!(
        err(&sweep("training.batch_size", "{ start = 0 }")),
        "experiments/x.toml:18:19: sweep.halve.start: must be a whole number >= 1, got 0; set it to the first value, at least 1, e.g. halve = { start = 4096 }"
    );
    assert_eq!(
        err(&sweep("training.batch_size", "{}")),
        "experiments/x.toml:18:9: sweep.halve.start is missing; write it as halve = { start = 4096 }"
    );
    assert_eq!(
        err(&sweep("training.lr", "{ start = 1 }")),
        "experiments/x.toml:18:9: sweep.halve: training.lr is not a whole-number field, so it cannot be halved; list its values instead, e.g. values = [0.0001, 0.001, 0.01]"
    );
    assert_eq!(
        err(&sweep("training.batch_size", "{ start = 8, min = 1 }")),
        "experiments/x.toml:18:22: unknown key `min` in sweep.halve; expected one of: start"
    );
    // The swept field left out of its table starts at the start.
    let no_batch = edit("batch_size = 32\n", "");
    let text = format!("{no_batch}[sweep]\nfield = \"training.batch_size\"\nhalve = {{ start = 64 }}\n");
    assert_eq!(parse_at(&text).unwrap().base.training.batch_size, 64);
}

#[test]
fn accumulation_can_be_swept() {
    let text = format!(
        "{MINIMAL}accumulation = 2\n[sweep]\nfield = \"training.accumulation\"\nvalues = [1, 2, 8]\n"
    );
    let spec = parse_at(&text).unwrap();
    assert_eq!(spec.base.training.techniques.accumulation, 2);
    let want = Sweep { field: Field::Accumulation, mode: SweepMode::List(vec![1.0, 2.0, 8.0]) };
    assert_eq!(spec.sweep, Some(want));
    // Left out, it starts at the sweep's first value.
    let text = format!("{MINIMAL}[sweep]\nfield = \"training.accumulation\"\nhalve = {{ start = 16 }}\n");
    let spec = parse_at(&text).unwrap();
    assert_eq!(spec.base.training.techniques.accumulation, 16);
    assert_eq!(spec.sweep.unwrap().mode, SweepMode::Halve { start: 16 });
    let text = format!("{MINIMAL}[sweep]\nfield = \"training.accumulation\"\nvalues = [0, 2]\n");
    assert_eq!(
        err(&text),
        "experiments/x.toml:18:11: sweep.values[0]: training.accumulation must be at least 1; change this value or remove it"
    );
    let text =
        format!("{MINIMAL}mode = \"forward\"\n[sweep]\nfield = \"training.accumulation\"\nvalues = [1, 4]\n");
    assert_eq!(
        err(&text),
        r#"experiments/x.toml:19:14: sweep.values[1]: training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only; change this value or remove it"#
    );
}

#[test]
fn rounds_repeat_a_list_and_are_refused_for_a_search() {
    let list = "[sweep]\nfield = \"training.batch_size\"\nvalues = [4, 8]\n";
    let spec = parse_at(&format!("{MINIMAL}[run]\nrounds = 3\n{list}")).unwrap();
    assert_eq!(spec.run.rounds, 3);
    assert_eq!(parse_at(MINIMAL).unwrap().run.rounds, 1);
    let search = "[sweep]\nfield = \"training.batch_size\"\nsearch = { start = 1, max = 8 }\n";
    let e = err(&format!("{MINIMAL}[run]\nrounds = 2\n{search}"));
    assert!(e.contains("run.rounds: repeats the trials of a list of values"), "{e}");
    let e = err(&format!("{MINIMAL}[run]\nrounds = 0\n"));
    assert!(e.contains("run.rounds: must be a whole number >= 1, got 0"), "{e}");
    let e = err(&format!("{MINIMAL}[run]\nrounds = 21\n"));
    assert!(e.contains("run.rounds: must be at most 20, got 21"), "{e}");
}

#[test]
fn an_anchor_lies_within_the_search() {
    let sweep = |s: &str| format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nsearch = {s}\n");
    let spec = parse_at(&sweep("{ start = 16, max = 4096, anchor = 64 }")).unwrap();
    let mode = SweepMode::Search {
        start: 16,
        factor: 2,
        max: 4096,
        guided: true,
        anchor: Some(64),
        implied_max: false,
    };
    assert_eq!(spec.sweep, Some(Sweep { field: Field::Hidden, mode }));
    let e = err(&sweep("{ start = 16, max = 4096, anchor = 5000 }"));
    assert!(
        e.contains("sweep.search.anchor: must be <= max (4096), got 5000; lower the anchor or raise max"),
        "{e}"
    );
    let e = err(&sweep("{ start = 16, max = 4096, anchor = 0 }"));
    assert!(e.contains("sweep.search.anchor"), "{e}");
}

/// Without `max` a search is bounded by what its configs take: a width by oomlab's limit, a batch
/// by the data set's samples (in every variant: the smallest), and an anchor past that is refused.
#[test]
fn a_search_without_max_reaches_the_largest_value_every_config_takes() {
    let implied = |text: &str| match parse_at(text).unwrap().sweep.unwrap().mode {
        SweepMode::Search { max, implied_max, .. } => (max, implied_max),
        m => panic!("{m:?}"),
    };
    let hidden = format!("{MINIMAL}[sweep]\nfield = \"model.hidden\"\nsearch = {{ start = 16 }}\n");
    assert_eq!(implied(&hidden), (crate::spec::limits::MAX_HIDDEN as u64, true));
    let batch = format!("{MINIMAL}[sweep]\nfield = \"training.batch_size\"\nsearch = {{ start = 1 }}\n");
    let (max, _) = implied(&batch);
    assert_eq!(max, 128, "MINIMAL's data set has 128 samples");
    let variant = format!("{batch}\n[[variant]]\nname = \"small\"\ndata = {{ samples = 100 }}\n");
    assert_eq!(implied(&variant).0, 100, "the smallest data set of the variants");
    let anchored = format!(
        "{MINIMAL}[sweep]\nfield = \"training.batch_size\"\nsearch = {{ start = 1, anchor = 200 }}\n"
    );
    let e = err(&anchored);
    assert!(
        e.contains("sweep.search.anchor: training.batch_size 200 is larger than data.samples 128"),
        "{e}"
    );
}
