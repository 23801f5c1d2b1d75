//! The base's tables (experiment, model, data, training, run): unknown, missing and bad keys.
use super::*;

#[test]
fn unknown_key_names_the_key_table_line_and_choices() {
    assert_eq!(
        err(&edit("depth = 2\n", "depth = 2\nwidht = 3\n")),
        "experiments/x.toml:7:1: unknown key `widht` in [model]; did you mean `widths`? expected one of: kind, hidden, depth, widths, arch, channels, conv, kernel, d_model, nhead, num_layers, dim_feedforward, dropout, norm_first, path, loss, units"
    );
}

#[test]
fn unknown_table_is_refused() {
    assert_eq!(
        err(&format!("{MINIMAL}\n[modle]\nhidden = 3\n")),
        "experiments/x.toml:17:2: unknown table [modle]; did you mean [model]? expected one of: [experiment], [model], [data], [training], [run], [sweep], [parallel], [[variant]]"
    );
}

#[test]
fn unknown_key_in_an_inline_table_names_the_inline_table() {
    let text = format!(
        "{MINIMAL}\n[sweep]\nfield = \"model.depth\"\nsearch = {{ start = 1, fctor = 2, max = 8 }}\n"
    );
    assert_eq!(
        err(&text),
        "experiments/x.toml:19:23: unknown key `fctor` in sweep.search; did you mean `factor`? expected one of: start, factor, max, guided, anchor"
    );
}

#[test]
fn bad_size_names_run_budget() {
    let text = format!("{MINIMAL}\n[run]\nbudget = \"16 gigs\"\n");
    let e = err(&text);
    assert!(e.starts_with("experiments/x.toml:18:10: run.budget: \"16 gigs\" is not a size"), "{e}");
    assert!(e.contains(r#"write it like "15.90GiB", "512MiB" or "16GB""#), "{e}");
}

#[test]
fn a_quoted_number_without_a_unit_is_refused_with_the_unit_it_likely_meant() {
    let e = err(&format!("{MINIMAL}[run]\nbudget = \"2048\"\n"));
    assert!(e.starts_with("experiments/x.toml:17:10: run.budget: \"2048\" has no unit"), "{e}");
    assert!(e.contains("\"2048GiB\"") && e.contains("run.budget = 2048 without quotes"), "{e}");
    assert_eq!(parse_at(&format!("{MINIMAL}[run]\nbudget = \"2048B\"\n")).unwrap().run.budget, Some(2048));
}

#[test]
fn budget_may_be_bytes_but_not_zero_or_negative() {
    let spec = parse_at(&format!("{MINIMAL}[run]\nbudget = 1048576\n")).unwrap();
    assert_eq!(spec.run.budget, Some(1 << 20));
    let e = err(&format!("{MINIMAL}[run]\nbudget = 0\n"));
    assert!(e.starts_with("experiments/x.toml:17:10: run.budget: must be more than 0 bytes, got 0"), "{e}");
    let e = err(&format!("{MINIMAL}[run]\nbudget = -5\n"));
    assert!(
        e.starts_with(
            "experiments/x.toml:17:10: run.budget: must be a size or a whole number of bytes, got -5"
        ),
        "{e}"
    );
}

#[test]
fn negative_depth_names_the_key_and_line() {
    assert_eq!(
        err(&edit("depth = 2", "depth = -3")),
        "experiments/x.toml:6:9: model.depth: must be a whole number >= 0, got -3; set it to the number of hidden layers (an MLP) or conv blocks (a plain CNN), e.g. depth = 4"
    );
}

#[test]
fn wrong_type_names_the_key() {
    assert_eq!(
        err(&edit("hidden = 64", "hidden = \"big\"")),
        "experiments/x.toml:5:10: model.hidden: must be a whole number, got \"big\"; set it to the width of each hidden layer, e.g. hidden = 512"
    );
    assert!(err(&edit("hidden = 64", "hidden = 2.5"))
        .starts_with("experiments/x.toml:5:10: model.hidden: must be a whole number, got 2.5;"));
    // A derived struct would take a list by position; a table must be a table.
    let e = err(&format!("{MINIMAL}[sweep]\nfield = \"model.depth\"\nsearch = [1, 2, 8]\n"));
    let want = "experiments/x.toml:18:10: sweep.search: must be a table, got [1, 2, 8];";
    assert!(e.starts_with(want), "{e}");
    let e = err(&edit("[model]", "[[model]]"));
    let want = "experiments/x.toml:4:1: model: must be a table, got [[model]]; write it as a [model] table";
    assert_eq!(e, want);
}

#[test]
fn integers_too_large_for_i64_name_the_key() {
    let e = err(&edit("hidden = 64", "hidden = 9223372036854775808"));
    let want = "experiments/x.toml:5:10: model.hidden: must be a whole number, got 9223372036854775808;";
    assert!(e.starts_with(want), "{e}");
}

#[test]
fn missing_required_key_names_it_and_where_to_add_it() {
    assert_eq!(
        err(&edit("hidden = 64\n", "")),
        "experiments/x.toml:4:1: model.hidden is missing; add hidden = 512 under [model] (the width of each hidden layer)"
    );
    let no_training = &MINIMAL[..MINIMAL.find("[training]").unwrap()];
    assert_eq!(
        err(no_training),
        r#"experiments/x.toml: training.optimizer is missing; add optimizer = "adam" under [training] ("sgd", "adam" or "adamw")"#
    );
    assert!(err("").starts_with(
        "experiments/x.toml: experiment.name is missing; add name = \"depth_sweep\" under [experiment]"
    ));
}

#[test]
fn momentum_is_only_for_sgd() {
    assert_eq!(
        err(&format!("{MINIMAL}momentum = 0.9\n")),
        r#"experiments/x.toml:16:12: training.momentum: only sgd uses momentum, but optimizer = "adam"; remove momentum, or set optimizer = "sgd""#
    );
    let sgd = edit("\"adam\"", "\"sgd\"");
    let e = err(&format!("{sgd}momentum = 1.0\n"));
    assert!(
        e.starts_with("experiments/x.toml:16:12: training.momentum: must be a number in 0 <= m < 1, got 1;"),
        "{e}"
    );
    let spec = parse_at(&format!("{sgd}momentum = 0.5\n")).unwrap();
    assert_eq!(
        spec.base.training.optimizer,
        OptimizerSpec::Sgd { lr: 0.001, momentum: 0.5, weight_decay: 0.0 }
    );
}

#[test]
fn learning_rate_must_be_positive() {
    let e = err(&format!("{MINIMAL}lr = 0\n"));
    assert!(
        e.starts_with("experiments/x.toml:16:6: training.lr: must be a number in 0 < lr <= 10, got 0;"),
        "{e}"
    );
    assert!(err(&format!("{MINIMAL}lr = nan\n"))
        .contains("training.lr: must be a number in 0 < lr <= 10, got NaN"));
    assert!(err(&format!("{MINIMAL}lr = 1e308\n"))
        .contains("training.lr: must be a number in 0 < lr <= 10, got 1e308"));
}

#[test]
fn words_list_their_choices() {
    assert_eq!(
        err(&edit("\"adam\"", "\"rmsprop\"")),
        r#"experiments/x.toml:14:13: training.optimizer: must be one of "sgd", "adam", "adamw", got "rmsprop"; e.g. optimizer = "adam""#
    );
    let e = err(&format!("{MINIMAL}[run]\ndevice = \"gpu\"\n"));
    assert!(e.starts_with("experiments/x.toml:17:10: run.device: `gpu` is not a device"), "{e}");
}

#[test]
fn experiment_name_must_be_folder_safe() {
    let e = err(&edit("name = \"x\"", "name = \"Depth Sweep\""));
    assert!(e.starts_with("experiments/x.toml:2:8: experiment.name: must be lowercase letters, digits, _ or -, got \"Depth Sweep\";"), "{e}");
}

#[test]
fn batch_size_larger_than_samples_is_refused() {
    let e = err(&edit("batch_size = 32", "batch_size = 256"));
    assert!(
        e.starts_with("experiments/x.toml:15:14: training.batch_size 256 is larger than data.samples 128"),
        "{e}"
    );
}

#[test]
fn csv_path_is_resolved_against_the_spec_folder() {
    let csv = edit(
        "samples = 128\nfeatures = 4\nclasses = 3\n",
        "kind = \"csv\"\npath = \"data/iris.csv\"\nlabel = \"species\"\n",
    );
    let spec = parse_at(&csv).unwrap();
    assert_eq!(
        spec.base.data,
        DataSpec::Csv { path: PathBuf::from("experiments/data/iris.csv"), label: "species".into() }
    );
    let abs = csv.replace("data/iris.csv", "/srv/iris.csv");
    let spec = parse_at(&abs).unwrap();
    assert!(matches!(spec.base.data, DataSpec::Csv { ref path, .. } if path == Path::new("/srv/iris.csv")));
    // Bare file name: no folder to resolve against.
    let spec = parse(&csv, Path::new("x.toml")).unwrap();
    assert!(matches!(spec.base.data, DataSpec::Csv { ref path, .. } if path == Path::new("data/iris.csv")));
}

#[test]
fn keys_of_the_other_data_kind_are_refused() {
    let e = err(&edit("classes = 3\n", "classes = 3\npath = \"a.csv\"\n"));
    assert!(e.starts_with("experiments/x.toml:12:8: data.path is only read for kind = \"csv\""), "{e}");
    let csv = edit("samples = 128\n", "kind = \"csv\"\npath = \"a.csv\"\nlabel = \"y\"\n");
    let e = err(&csv);
    assert!(
        e.starts_with("experiments/x.toml:12:12: data.features is only read for kind = \"synthetic\""),
        "{e}"
    );
    let e = err(&edit("samples = 128\nfeatures = 4\nclasses = 3\n", "kind = \"csv\"\npath = \"a.csv\"\n"));
    assert!(
        e.starts_with("experiments/x.toml:8:1: data.label is missing; add label = \"species\" under [data]"),
        "{e}"
    );
}

#[test]
fn duplicate_keys_and_tables_are_named() {
    let e = err(&edit("depth = 2\n", "depth = 2\ndepth = 3\n"));
    assert_eq!(e, "experiments/x.toml:7:1: model.depth is written twice; keep one of them");
    let e = err(&format!("{MINIMAL}[model]\n"));
    assert_eq!(e, "experiments/x.toml:16:2: [model] is written twice; merge the two into one table");
}

#[test]
fn syntax_errors_have_a_line() {
    let e = err(&edit("hidden = 64", "hidden = "));
    assert!(e.starts_with("experiments/x.toml:5:10: not valid TOML at model.hidden: "), "{e}");
}

#[test]
fn a_budget_per_device() {
    let spec =
        parse_at(&format!("{MINIMAL}[run]\nbudget = {{ cpu = \"128MiB\", cuda = \"192MiB\" }}\n")).unwrap();
    assert_eq!((spec.run.budget_on(false), spec.run.budget_on(true)), (Some(128 << 20), Some(192 << 20)));
    let one = parse_at(&format!("{MINIMAL}[run]\nbudget = \"1GiB\"\n")).unwrap();
    assert_eq!((one.run.budget_on(false), one.run.budget_on(true)), (Some(1 << 30), Some(1 << 30)));
    let cuda_only = parse_at(&format!("{MINIMAL}[run]\nbudget = {{ cuda = \"2GiB\" }}\n")).unwrap();
    assert_eq!((cuda_only.run.budget_on(false), cuda_only.run.budget_on(true)), (None, Some(2 << 30)));
    let e = err(&format!("{MINIMAL}[run]\nbudget = {{ gpu = \"2GiB\" }}\n"));
    assert!(e.starts_with("experiments/x.toml:17:10: run.budget: unknown key `gpu`; a budget per device has keys cpu and cuda"), "{e}");
    let e = err(&format!("{MINIMAL}[run]\nbudget = {{ cuda = \"lots\" }}\n"));
    assert!(e.starts_with("experiments/x.toml:17:10: run.budget.cuda: \"lots\" is not a size"), "{e}");
    let e = err(&format!("{MINIMAL}[run]\nbudget = {{ cpu = 0 }}\n"));
    assert!(e.contains("run.budget.cpu") && e.contains("more than 0 bytes"), "{e}");
}

#[test]
fn data_location_is_host_unless_asked() {
    assert_eq!(parse_at(MINIMAL).unwrap().base.location, DataLocation::Host);
    let text = MINIMAL.replace("classes = 3\n", "classes = 3\nlocation = \"device\"\n");
    assert_eq!(parse_at(&text).unwrap().base.location, DataLocation::Device);
    let e = err(&MINIMAL.replace("classes = 3\n", "classes = 3\nlocation = \"gpu\"\n"));
    assert!(
        e.starts_with(
            r#"experiments/x.toml:12:12: data.location: must be one of "host", "device", got "gpu""#
        ),
        "{e}"
    );
    let variant = format!("{MINIMAL}\n[[variant]]\nname = \"on-device\"\ndata.location = \"device\"\n");
    assert_eq!(parse_at(&variant).unwrap().variants[0].config.location, DataLocation::Device);
}

#[test]
fn optimizer_impl_is_pytorchs_pick_unless_named() {
    let t = |spec: &Spec| spec.base.training.techniques.optimizer_impl;
    assert_eq!(t(&parse_at(MINIMAL).unwrap()), None);
    assert_eq!(OptimizerImpl::resolve(None, true), OptimizerImpl::Foreach);
    assert_eq!(OptimizerImpl::resolve(None, false), OptimizerImpl::ForLoop);
    let fused = parse_at(&format!("{MINIMAL}optimizer_impl = \"fused\"\n")).unwrap();
    assert_eq!(t(&fused), Some(OptimizerImpl::Fused));
    assert_eq!(OptimizerImpl::resolve(t(&fused), true), OptimizerImpl::Fused);
    let e = err(&format!("{MINIMAL}optimizer_impl = \"multi_tensor\"\n"));
    assert!(
        e.contains(
            r#"training.optimizer_impl: must be one of "for_loop", "foreach", "fused", got "multi_tensor""#
        ),
        "{e}"
    );
}

#[test]
fn a_torchscript_model_takes_a_path_and_none_of_the_built_in_kinds_keys() {
    let script = edit("hidden = 64\ndepth = 2\n", "kind = \"torchscript\"\npath = \"models/mine.pt\"\n");
    let spec = parse_at(&script).unwrap();
    let ModelSpec::Torchscript(s) = &spec.base.model else { panic!("{:?}", spec.base.model) };
    assert_eq!(s.path, Path::new("experiments/models/mine.pt"), "relative to the spec's folder");
    assert_eq!(spec.base.model.describe(), "torchscript mine.pt");
    assert_eq!(spec.base.model.units(), 1, "one unit: checkpointing recomputes it whole");
    let e = err(&edit("hidden = 64\ndepth = 2\n", "kind = \"torchscript\"\n"));
    assert!(e.starts_with("experiments/x.toml:4:1: model.path is missing"), "{e}");
    let e = err(&edit("hidden = 64\ndepth = 2\n", "kind = \"torchscript\"\npath = \"m.pt\"\ndepth = 2\n"));
    assert!(e.starts_with("experiments/x.toml:7:9: model.depth is the module's own"), "{e}");
    let e = err(&edit("depth = 2\n", "depth = 2\npath = \"m.pt\"\n"));
    assert!(
        e.starts_with("experiments/x.toml:7:8: model.path is only read for kind = \"torchscript\""),
        "{e}"
    );
    // It reads any data kind its forward takes.
    let images = script.replace(
        "samples = 128\nfeatures = 4\nclasses = 3\n",
        "kind = \"images\"\nsamples = 64\nchannels = 3\nsize = 8\nclasses = 3\n",
    );
    assert!(matches!(parse_at(&images).unwrap().base.data, DataSpec::Images { .. }));
}

/// MINIMAL with a TorchScript model (its loss `loss`, if any) and `data` for its [data] table.
fn script_with(loss: &str, data: &str) -> String {
    let model = format!("kind = \"torchscript\"\npath = \"m.pt\"\n{loss}");
    edit("hidden = 64\ndepth = 2\n", &model).replace("samples = 128\nfeatures = 4\nclasses = 3\n", data)
}

#[test]
fn tensors_data_gives_each_input_and_the_target_as_the_loss_reads_it() {
    use crate::spec::{InputDtype, Loss, TensorInput};
    let data = "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [3, 8, 8] }, { name = \"ids\", shape = [16], \
                dtype = \"int64\", high = 100 }, { shape = [16], dtype = \"bool\" }]\nclasses = 5\ntarget = [16]\n";
    let spec = parse_at(&script_with("", data)).unwrap();
    let DataSpec::Tensors { samples, inputs, target, classes, seed } = &spec.base.data else { panic!() };
    assert_eq!((*samples, target.as_slice(), *classes, *seed), (64, &[16][..], Some(5), 0));
    let input =
        |name: &str, shape: &[usize], dtype| TensorInput { name: name.into(), shape: shape.to_vec(), dtype };
    assert_eq!(
        inputs,
        &[
            input("input0", &[3, 8, 8], InputDtype::Float),
            input("ids", &[16], InputDtype::Int64 { high: 100 }),
            input("input2", &[16], InputDtype::Bool)
        ]
    );
    // mse: a float target of data.target's shape, no classes.
    let mse = "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [20] }]\ntarget = [1]\n";
    let spec = parse_at(&script_with("loss = \"mse\"\n", mse)).unwrap();
    let ModelSpec::Torchscript(s) = &spec.base.model else { panic!() };
    assert_eq!(s.loss, Loss::Mse);
    assert!(matches!(&spec.base.data, DataSpec::Tensors { classes: None, target, .. } if target == &[1]));

    // Each way to get it wrong names the key and what to write.
    let cases = [
        (
            "loss = \"mse\"\n",
            "samples = 64\nfeatures = 4\nclasses = 3\n",
            "data.kind must be \"tensors\" for model.loss = \"mse\"",
        ),
        (
            "loss = \"mse\"\n",
            &mse.replace("target = [1]\n", "target = [1]\nclasses = 3\n"),
            "data.classes is not read with model.loss = \"mse\"",
        ),
        ("loss = \"mse\"\n", &mse.replace("target = [1]\n", ""), "data.target is missing"),
        ("", &mse.replace("target = [1]\n", ""), "data.classes is missing"),
        ("loss = \"l1\"\n", mse, "model.loss: must be one of \"cross_entropy\", \"mse\""),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = []\nclasses = 3\n",
            "data.inputs: must be 1 to 16 inputs",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ name = \"x\" }]\nclasses = 3\n",
            "data.inputs[0] has no shape",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [0] }]\nclasses = 3\n",
            "data.inputs: must be a whole number >= 1",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4], dtype = \"int64\" }]\nclasses = 3\n",
            "data.inputs[0] is int64 without high",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [100000, 100000] }]\nclasses = 3\n",
            "data.inputs: must be a sample of at most 1000000000 elements",
        ),
        (
            "loss = \"mse\"\n",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4] }]\ntarget = [40000, 40000]\n",
            "data.target: must be a sample of at most 1000000000 elements",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4], high = 3 }]\nclasses = 3\n",
            "data.inputs.high is only read for dtype = \"int64\"",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4], dtype = \"half\" }]\nclasses = 3\n",
            "data.inputs.dtype: must be one of \"float\", \"int64\", \"bool\"",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4], size = 3 }]\nclasses = 3\n",
            "unknown key `size`",
        ),
        (
            "",
            "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4] }]\nfeatures = 4\nclasses = 3\n",
            "data.features is not read for kind = \"tensors\"",
        ),
        (
            "",
            "samples = 64\nfeatures = 4\nclasses = 3\ntarget = [2]\n",
            "data.target is only read for kind = \"tensors\"",
        ),
    ];
    for (loss, data, expected) in cases {
        let e = err(&script_with(loss, data));
        assert!(e.contains(expected), "{data}: {e}");
    }
    // The built-in kinds neither read tensors data nor take a loss.
    let e = err(&MINIMAL.replace("samples = 128\nfeatures = 4\nclasses = 3\n", mse));
    assert!(e.contains("data.kind") && e.contains("\"tensors\""), "{e}");
    let e = err(&edit("depth = 2\n", "depth = 2\nloss = \"mse\"\n"));
    assert!(e.contains("model.loss is only read for kind = \"torchscript\""), "{e}");
    // A module of several inputs is one unit of several: not checkpointed.
    let two = "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4] }, { shape = [4] }]\nclasses = 3\n";
    let e = err(&format!("{}checkpoint = 1\n", script_with("", two)));
    assert!(e.contains("training.checkpoint does not apply to a module of several inputs"), "{e}");
}

#[test]
fn a_module_may_be_cut_into_its_children_with_one_input() {
    use crate::spec::ScriptUnits;
    let data = "samples = 128\nfeatures = 4\nclasses = 3\n";
    let spec = parse_at(&script_with("units = \"children\"\n", data)).unwrap();
    let ModelSpec::Torchscript(s) = &spec.base.model else { panic!() };
    assert_eq!(s.units, ScriptUnits::Children);
    // Its children are counted in the file: a segment past them is the run's to refuse.
    assert!(parse_at(&format!("{}checkpoint = 40\n", script_with("units = \"children\"\n", data))).is_ok());
    let e = err(&format!("{}checkpoint = 40\n", script_with("", data)));
    assert!(e.contains("training.checkpoint") && e.contains("must be at most the 1 units"), "{e}");
    let e = err(&script_with("units = \"layers\"\n", data));
    assert!(e.contains("model.units: must be one of \"whole\", \"children\""), "{e}");
    let e = err(&edit("depth = 2\n", "depth = 2\nunits = \"children\"\n"));
    assert!(e.contains("model.units is only read for kind = \"torchscript\""), "{e}");
    let two = "kind = \"tensors\"\nsamples = 64\ninputs = [{ shape = [4] }, { shape = [4] }]\nclasses = 3\n";
    let e = err(&script_with("units = \"children\"\n", two));
    assert!(e.contains("model.units = \"children\" runs the batch through the first child"), "{e}");
}

#[test]
fn every_misspelt_key_and_table_is_said_at_once_in_file_order_then_the_first_other_error() {
    let text = edit("depth = 2\n", "depht = 2\n").replace("batch_size = 32\n", "batchsize = 32\n")
        + "\n[runn]\nbudget = \"1GiB\"\nsteps = 3\n";
    let e = err(&text);
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 4, "{e}");
    assert!(
        lines[0].starts_with("experiments/x.toml:6:1: unknown key `depht` in [model]; did you mean `depth`?"),
        "{e}"
    );
    assert!(
        lines[1].starts_with(
            "experiments/x.toml:15:1: unknown key `batchsize` in [training]; did you mean `batch_size`?"
        ),
        "{e}"
    );
    assert!(
        lines[2].starts_with("experiments/x.toml:17:2: unknown table [runn]; did you mean [run]?"),
        "{e}"
    );
    // What is wrong once the unknown are put aside: depth was not given.
    assert!(lines[3].contains("model.depth is missing"), "{e}");
}

#[test]
fn a_misspelt_key_that_cannot_be_put_aside_alone_ends_the_list_with_no_error_of_its_own_making() {
    // `fctor` shares its line with the search's other keys: blanking the line would make `search`
    // missing, an error the user did not write, so the first error is the only one.
    let text = format!(
        "{MINIMAL}\n[sweep]\nfield = \"model.depth\"\nsearch = {{ start = 1, fctor = 2, max = 8 }}\nvalus = [1]\n"
    );
    let e = err(&text);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("unknown key `fctor`"), "{e}");
}

#[test]
fn a_misspelt_choice_is_offered_the_nearest_one() {
    let e = err(&edit("optimizer = \"adam\"", "optimizer = \"Adamw\""));
    assert!(e.contains(r#"got "Adamw"; did you mean "adamw"? e.g. optimizer = "adam""#), "{e}");
    let e = err(&edit("optimizer = \"adam\"", "optimizer = \"lion\""));
    assert!(!e.contains("did you mean"), "{e}");
}
