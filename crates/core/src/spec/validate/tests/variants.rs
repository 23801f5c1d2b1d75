//! `[[variant]]`: keys laid over the base, and errors that say which variant they break.
use super::*;

#[test]
fn variants_lay_their_keys_over_the_base() {
    // Lines: 17 [[variant]] "wide_fp16", 25 [[variant]] "sgd".
    let text = format!(
        r#"{MINIMAL}
[[variant]]
name = "wide_fp16"
[variant.model]
hidden = 1024
[variant.training]
amp = "fp16"
accumulation = 2

[[variant]]
name = "sgd"
training = {{ optimizer = "sgd", momentum = 0.9, checkpoint = 1, history = "loss_value" }}
data = {{ samples = 256, seed = 3 }}
"#
    );
    let spec = parse_at(&text).unwrap();
    assert_eq!(spec.base, minimal_config());
    let mut wide = minimal_config();
    wide.model = ModelSpec::mlp(1024, 2);
    wide.training.techniques.accumulation = 2;
    wide.training.techniques.amp = Amp::Fp16 { scaler: ScalerSpec::default() };
    let sgd = Config {
        model: ModelSpec::mlp(64, 2),
        data: DataSpec::Synthetic { samples: 256, features: 4, classes: 3, seed: 3 },
        location: DataLocation::Host,
        parallel: Default::default(),
        training: TrainingSpec {
            optimizer: OptimizerSpec::Sgd { lr: 0.001, momentum: 0.9, weight_decay: 0.0 },
            batch_size: 32,
            steps: 2,
            dtype: Dtype::Float32,
            seed: 0,
            techniques: Techniques {
                accumulation: 1,
                amp: Amp::Off,
                checkpoint: Checkpoint::Every(1),
                mode: Mode::Train,
                history: History::LossValue,
                optimizer_impl: None,
            },
        },
    };
    assert_eq!(
        spec.variants,
        [
            Variant { name: "wide_fp16".into(), config: wide.clone(), skip_on_cpu_without: None },
            Variant { name: "sgd".into(), config: sgd.clone(), skip_on_cpu_without: None }
        ]
    );
    assert_eq!(spec.configs(), [(Some("wide_fp16"), &wide), (Some("sgd"), &sgd)]);
}

#[test]
fn a_variant_overrides_scaler_keys_one_by_one() {
    let text = format!(
        r#"{MINIMAL}amp = "fp16"
scaler = {{ init_scale = 1024.0, growth_interval = 10 }}

[[variant]]
name = "slow_growth"
[variant.training.scaler]
growth_interval = 500
backoff_factor = 0.25

[[variant]]
name = "same"
"#
    );
    let spec = parse_at(&text).unwrap();
    let base =
        ScalerSpec { init_scale: 1024.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 10 };
    assert_eq!(spec.base.training.techniques.amp, Amp::Fp16 { scaler: base });
    let slow =
        ScalerSpec { init_scale: 1024.0, growth_factor: 2.0, backoff_factor: 0.25, growth_interval: 500 };
    let mut want = spec.base.clone();
    want.training.techniques.amp = Amp::Fp16 { scaler: slow };
    assert_eq!(
        spec.variants[0],
        Variant { name: "slow_growth".into(), config: want, skip_on_cpu_without: None }
    );
    assert_eq!(
        spec.variants[1],
        Variant { name: "same".into(), config: spec.base.clone(), skip_on_cpu_without: None }
    );
    // A variant cannot remove a key: the base's scaler stays, and bf16 refuses it.
    let text = format!(
        "{MINIMAL}amp = \"fp16\"\nscaler = {{ init_scale = 1024.0 }}\n\n[[variant]]\nname = \"bf16\"\ntraining.amp = \"bf16\"\n"
    );
    assert_eq!(
        err(&text),
        r#"experiments/x.toml:17:10: in variant[0] "bf16" (line 19): training.scaler: only amp = "fp16" uses a grad scaler, and amp is "bf16"; remove scaler, or set amp = "fp16""#
    );
}

#[test]
fn unknown_keys_in_a_variant_are_named() {
    let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\nhiden = 3\n"));
    assert_eq!(
        e,
        "experiments/x.toml:19:1: unknown key `hiden` in variant[0]; expected one of: name, skip_on_cpu_without, model, data, training, parallel"
    );
    let text = format!(
        "{MINIMAL}\n[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"\n[variant.model]\nwidht = 3\n"
    );
    assert_eq!(
        err(&text),
        "experiments/x.toml:22:1: unknown key `widht` in variant[1].model; did you mean `widths`? expected one of: kind, hidden, depth, widths, arch, channels, conv, kernel, d_model, nhead, num_layers, dim_feedforward, dropout, norm_first, path, loss, units"
    );
    let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\n[variant.run]\ndevice = \"cpu\"\n"));
    assert_eq!(
        e,
        "experiments/x.toml:19:10: unknown key `run` in variant[0]: [run] is the whole spec's and cannot be varied; move it out of the variant (a variant may set model, data and training)"
    );
    let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\nsweep = {{ field = \"model.depth\" }}\n"));
    assert!(
        e.starts_with(
            "experiments/x.toml:19:1: unknown key `sweep` in variant[0]: [sweep] is the whole spec's"
        ),
        "{e}"
    );
    assert_eq!(
        err(&format!("{MINIMAL}\n[variant]\nname = \"a\"\n")),
        "experiments/x.toml:17:1: variant: must be a list, got [variant]; write each variant as a [[variant]] table"
    );
    assert_eq!(
        err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\n[variant.training]\namp = 3\n")),
        r#"experiments/x.toml:20:7: variant[0].training.amp: must be a string, got 3; set it to "off", "fp16" or "bf16", e.g. amp = "fp16""#
    );
}

#[test]
fn an_invalid_variant_is_named_with_its_line() {
    let variant = |base: &str, keys: &str| err(&format!("{base}\n[[variant]]\nname = \"v\"\n{keys}\n"));
    // A value written in the variant: named variant[0].key, at its line.
    assert_eq!(
        variant(MINIMAL, "training.amp = \"fp8\""),
        r#"experiments/x.toml:19:16: variant[0].training.amp: must be one of "off", "fp16", "bf16", got "fp8"; e.g. amp = "fp16""#
    );
    assert_eq!(
        variant(MINIMAL, "training.batch_size = 256"),
        "experiments/x.toml:19:23: variant[0].training.batch_size 256 is larger than data.samples 128: a batch is drawn from the data set without repeats; raise data.samples"
    );
    assert_eq!(
        variant(&format!("{MINIMAL}accumulation = 4\n"), "training.mode = \"forward\""),
        r#"experiments/x.toml:20:17: variant[0].training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only"#
    );
    // A base value the variant breaks: placed at it, naming the variant and its line.
    let sgd = format!("{}momentum = 0.9\n", edit("\"adam\"", "\"sgd\""));
    assert_eq!(
        variant(&sgd, "training.optimizer = \"adam\""),
        r#"experiments/x.toml:16:12: in variant[0] "v" (line 18): training.momentum: only sgd uses momentum, but optimizer = "adam"; remove momentum, or set optimizer = "sgd""#
    );
    assert_eq!(
        variant(MINIMAL, "data.samples = 16"),
        r#"experiments/x.toml:15:14: in variant[0] "v" (line 17): training.batch_size 32 is larger than data.samples 16: a batch is drawn from the data set without repeats; raise data.samples"#
    );
    // The base must be valid by itself, even where a variant would fill the gap.
    let e = variant(&edit("depth = 2\n", ""), "model.depth = 3");
    assert!(e.starts_with("experiments/x.toml:4:1: model.depth is missing;"), "{e}");
}

#[test]
fn variant_names_are_required_folder_safe_and_unique() {
    let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"a\"\n\n[[variant]]\nname = \"a\"\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:21:8: variant[1].name: "a" is already the name of variant[0]; give each variant its own name"#
    );
    let e = err(&format!("{MINIMAL}\n[[variant]]\nmodel.hidden = 8\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:17:1: variant[0].name is missing; add name = "fp16" under [[variant]] (a name of lowercase letters, digits, _ and -)"#
    );
    let e = err(&format!("{MINIMAL}\n[[variant]]\nname = \"FP16\"\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:18:8: variant[0].name: must be lowercase letters, digits, _ or -, got "FP16"; set it to a name of lowercase letters, digits, _ and -, e.g. name = "fp16""#
    );
}

#[test]
fn sweep_bounds_are_checked_against_every_variant() {
    // Lines: 17 [[variant]] "small", 21 [sweep], 23 the sweep's values.
    let text = |mode: &str| {
        format!(
            "{MINIMAL}\n[[variant]]\nname = \"small\"\ndata.samples = 64\n\n[sweep]\nfield = \"training.batch_size\"\n{mode}\n"
        )
    };
    let spec = parse_at(&text("values = [16, 64]")).unwrap();
    let mut small = minimal_config();
    small.data = DataSpec::Synthetic { samples: 64, features: 4, classes: 3, seed: 0 };
    assert_eq!(spec.variants, [Variant { name: "small".into(), config: small, skip_on_cpu_without: None }]);
    assert_eq!(
        err(&text("values = [16, 100]")),
        r#"experiments/x.toml:23:15: in variant[0] "small" (line 17): sweep.values[1]: training.batch_size 100 is larger than data.samples 64: a batch is drawn from the data set without repeats; raise data.samples"#
    );
    assert_eq!(
        err(&text("search = { start = 1, max = 100 }")),
        r#"experiments/x.toml:23:29: in variant[0] "small" (line 17): sweep.search.max: training.batch_size 100 is larger than data.samples 64: a batch is drawn from the data set without repeats; raise data.samples"#
    );
    assert_eq!(
        err(&text("halve = { start = 100 }")),
        r#"experiments/x.toml:23:19: in variant[0] "small" (line 17): sweep.halve.start: training.batch_size 100 is larger than data.samples 64: a batch is drawn from the data set without repeats; raise data.samples"#
    );
}

#[test]
fn a_swept_field_may_be_left_out_of_variants_too() {
    let no_batch = edit("batch_size = 32\n", "");
    let text = format!(
        "{no_batch}\n[[variant]]\nname = \"deep\"\nmodel.depth = 8\n\n[sweep]\nfield = \"training.batch_size\"\nvalues = [16, 64]\n"
    );
    let spec = parse_at(&text).unwrap();
    assert_eq!(spec.base.training.batch_size, 16);
    let mut deep = minimal_config();
    deep.model = ModelSpec::mlp(64, 8);
    deep.training.batch_size = 16;
    assert_eq!(spec.variants, [Variant { name: "deep".into(), config: deep, skip_on_cpu_without: None }]);
}

#[test]
fn a_variant_can_be_left_out_on_a_cpu_without_its_precision() {
    let text = format!("{MINIMAL}\n[[variant]]\nname = \"half\"\nskip_on_cpu_without = \"bf16\"\ntraining.amp = \"bf16\"\n\n[[variant]]\nname = \"full\"\n");
    let spec = parse_at(&text).unwrap();
    let (half, full) = (&spec.variants[0], &spec.variants[1]);
    assert_eq!(half.skip_on_cpu_without, Some(crate::device::HalfPrecision::Bf16));
    assert_eq!(full.skip_on_cpu_without, None);
    let (none, bf16) = (
        crate::device::CpuCaps { bf16: false, fp16: true },
        crate::device::CpuCaps { bf16: true, fp16: false },
    );
    let why = half.skipped_on(none).unwrap();
    assert!(why.contains("no bf16 matrix instructions (AVX512-BF16 or AMX-BF16)"), "{why}");
    assert!(why.contains("remove it to run the variant anyway"), "{why}");
    assert_eq!(half.skipped_on(bf16), None);
    assert_eq!(full.skipped_on(none), None);
    let bad = text.replace("skip_on_cpu_without = \"bf16\"", "skip_on_cpu_without = \"int8\"");
    let e = err(&bad);
    assert!(e.contains("skip_on_cpu_without: must be one of \"bf16\", \"fp16\", got \"int8\""), "{e}");
}

/// The sweep sets its key for every trial: a variant that sets it too (inline or as a table)
/// would have its value silently replaced, so it is refused, naming the variant and the key.
#[test]
fn a_variant_may_not_set_the_swept_key() {
    for variant in ["model = { depth = 3 }", "[variant.model]\ndepth = 3"] {
        let text = format!(
            "{MINIMAL}\n[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n\n[[variant]]\nname = \"a\"\n\n\
             [[variant]]\nname = \"b\"\n{variant}\n"
        );
        let e = err(&text);
        assert!(e.contains("variant[1].model.depth") && e.contains("the sweep sets model.depth"), "{e}");
    }
    // Another key of the same table is the variant's to set.
    let text = format!(
        "{MINIMAL}\n[sweep]\nfield = \"model.depth\"\nvalues = [1, 2]\n\n[[variant]]\nname = \"a\"\nmodel = {{ hidden = 8 }}\n"
    );
    assert!(parse_at(&text).is_ok());
}
