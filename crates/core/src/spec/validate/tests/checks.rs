//! `Config::check` and `Config::with` say which key is at fault as data, apart from the words.
use super::*;
use crate::spec::Invalid;

#[test]
fn a_check_names_its_key_apart_from_its_words() {
    let mut c = minimal_config();
    c.training.batch_size = 256;
    let e = c.check().unwrap_err();
    let want = Invalid {
        key: "training.batch_size",
        message: "256 is larger than data.samples 128: a batch is drawn from the data set without repeats"
            .into(),
        fix: Some("raise data.samples"),
    };
    assert_eq!(e, want);
    assert_eq!(
        e.to_string(),
        "training.batch_size 256 is larger than data.samples 128: a batch is drawn from the data set without repeats; raise data.samples"
    );
    let mut c = minimal_config();
    c.training.techniques.mode = Mode::Forward;
    c.training.techniques.accumulation = 2;
    let e = c.check().unwrap_err();
    assert_eq!((e.key, e.fix), ("training.mode", None));
    assert_eq!(
        e.to_string(),
        r#"training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only"#
    );
}

#[test]
fn a_swept_value_names_the_swept_key() {
    let e = minimal_config().with(Field::Depth, 2.5).unwrap_err();
    assert_eq!((e.key, e.message.as_str()), ("model.depth", "takes whole numbers, not 2.5"));
    let e = minimal_config().with(Field::Hidden, 0.0).unwrap_err();
    assert_eq!(e.to_string(), "model.hidden must be at least 1");
    let mut csv = minimal_config();
    csv.data = DataSpec::Csv { path: PathBuf::from("a.csv"), label: "y".into() };
    let e = csv.with(Field::Samples, 64.0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "data.samples does not apply here: it is the size of a data set oomlab makes (not a CSV)"
    );
}
