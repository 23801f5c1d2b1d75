//! The technique keys of `[training]`: accumulation, amp and its scaler, checkpointing, mode,
//! history.
use super::*;

/// The techniques of MINIMAL with `lines` added to [training].
fn techniques(lines: &str) -> Techniques {
    parse_at(&format!("{MINIMAL}{lines}")).unwrap().base.training.techniques
}

#[test]
fn techniques_parse_to_typed_values() {
    let t = techniques(
        r#"accumulation = 4
amp = "fp16"
scaler = { init_scale = 1024.0, growth_factor = 4.0, backoff_factor = 0.25, growth_interval = 10 }
checkpoint = "sqrt"
mode = "train"
history = "loss_tensor"
"#,
    );
    let scaler =
        ScalerSpec { init_scale: 1024.0, growth_factor: 4.0, backoff_factor: 0.25, growth_interval: 10 };
    let want = Techniques {
        accumulation: 4,
        amp: Amp::Fp16 { scaler },
        checkpoint: Checkpoint::Sqrt,
        mode: Mode::Train,
        history: History::LossTensor,
        optimizer_impl: None,
    };
    assert_eq!(t, want);
    // fp16 without a scaler: PyTorch's GradScaler defaults.
    let defaults =
        ScalerSpec { init_scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000 };
    assert_eq!(techniques("amp = \"fp16\"\n").amp, Amp::Fp16 { scaler: defaults });
    // Each scaler key is optional, the table may be written as [training.scaler], and a whole
    // number is a number.
    let t = techniques("amp = \"fp16\"\n[training.scaler]\ninit_scale = 256\ngrowth_interval = 5\n");
    let scaler =
        ScalerSpec { init_scale: 256.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 5 };
    assert_eq!(t.amp, Amp::Fp16 { scaler });
    let t = techniques("amp = \"bf16\"\ncheckpoint = 2\nhistory = \"loss_value\"\n");
    let want = Techniques {
        accumulation: 1,
        amp: Amp::Bf16,
        checkpoint: Checkpoint::Every(2),
        mode: Mode::Train,
        history: History::LossValue,
        optimizer_impl: None,
    };
    assert_eq!(t, want);
    let t = techniques("amp = \"off\"\ncheckpoint = \"none\"\nmode = \"forward\"\nhistory = \"none\"\n");
    let want = Techniques {
        accumulation: 1,
        amp: Amp::Off,
        checkpoint: Checkpoint::None,
        mode: Mode::Forward,
        history: History::None,
        optimizer_impl: None,
    };
    assert_eq!(t, want);
    let t = techniques("mode = \"forward_no_grad\"\nhistory = \"loss_tensor\"\naccumulation = 1\n");
    let want = Techniques {
        accumulation: 1,
        amp: Amp::Off,
        checkpoint: Checkpoint::None,
        mode: Mode::ForwardNoGrad,
        history: History::LossTensor,
        optimizer_impl: None,
    };
    assert_eq!(t, want);
}

#[test]
fn techniques_default_to_plain_training() {
    let spec = parse_at(MINIMAL).unwrap();
    assert_eq!(spec.base, minimal_config());
    assert_eq!(spec.variants, []);
    assert_eq!(spec.configs(), [(None, &minimal_config())]);
}

#[test]
fn technique_values_are_checked() {
    let e = err(&format!("{MINIMAL}accumulation = 0\n"));
    assert_eq!(e, "experiments/x.toml:16:16: training.accumulation: must be a whole number >= 1, got 0; set it to the micro-batches per optimizer step, e.g. accumulation = 4");
    let e = err(&format!("{MINIMAL}amp = \"fp8\"\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:7: training.amp: must be one of "off", "fp16", "bf16", got "fp8"; e.g. amp = "fp16""#
    );
    let e = err(&format!("{MINIMAL}checkpoint = 0\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:14: training.checkpoint: must be "none", "sqrt", a whole number >= 1 or { sequential = S }, got 0; set it to "none", "sqrt" (about sqrt(n) segments of n units), the units per segment (an MLP's hidden layers; a CNN's stem and blocks; a Transformer's embedding and layers) or { sequential = S } (PyTorch's checkpoint_sequential: S segments, the last one plain), e.g. checkpoint = "sqrt""#
    );
    for bad in ["\"all\"", "-2", "1.5", "true", "{ every = 2 }", "{ sequential = 2, every = 2 }"] {
        let e = err(&format!("{MINIMAL}checkpoint = {bad}\n"));
        let want = format!(
            r#"experiments/x.toml:16:14: training.checkpoint: must be "none", "sqrt", a whole number >= 1 or {{ sequential = S }}, got {bad};"#
        );
        assert!(e.starts_with(&want), "{e}");
    }
    let e = err(&format!("{MINIMAL}mode = \"eval\"\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:8: training.mode: must be one of "train", "forward", "forward_no_grad", got "eval"; e.g. mode = "train""#
    );
    let e = err(&format!("{MINIMAL}history = \"all\"\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:11: training.history: must be one of "none", "loss_tensor", "loss_value", got "all"; e.g. history = "loss_value""#
    );
}

#[test]
fn scaler_is_only_for_fp16() {
    let e = err(&format!("{MINIMAL}scaler = {{ init_scale = 2.0 }}\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:10: training.scaler: only amp = "fp16" uses a grad scaler, and amp is "off"; remove scaler, or set amp = "fp16""#
    );
    let e = err(&format!("{MINIMAL}amp = \"bf16\"\n[training.scaler]\ngrowth_interval = 5\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:17:1: training.scaler: only amp = "fp16" uses a grad scaler, and amp is "bf16"; remove scaler, or set amp = "fp16""#
    );
}

#[test]
fn scaler_values_are_checked() {
    let fp16 = |scaler: &str| err(&format!("{MINIMAL}amp = \"fp16\"\nscaler = {{ {scaler} }}\n"));
    assert_eq!(
        fp16("init_scale = 0.0"),
        "experiments/x.toml:17:25: training.scaler.init_scale: must be a number > 0, got 0; set it to the first loss scale, e.g. scaler = { init_scale = 65536.0 }"
    );
    let e = fp16("growth_factor = 1.0");
    assert!(
        e.starts_with(
            "experiments/x.toml:17:28: training.scaler.growth_factor: must be a number > 1, got 1;"
        ),
        "{e}"
    );
    let e = fp16("backoff_factor = 1.0");
    assert_eq!(e, "experiments/x.toml:17:29: training.scaler.backoff_factor: must be a number in 0 < b < 1, got 1; set it to what the scale is multiplied by after an overflow, e.g. scaler = { backoff_factor = 0.5 }");
    let e = fp16("backoff_factor = 0");
    assert!(
        e.starts_with(
            "experiments/x.toml:17:29: training.scaler.backoff_factor: must be a number in 0 < b < 1, got 0;"
        ),
        "{e}"
    );
    let e = fp16("growth_interval = 0");
    assert!(
        e.starts_with(
            "experiments/x.toml:17:30: training.scaler.growth_interval: must be a whole number >= 1, got 0;"
        ),
        "{e}"
    );
    let e = fp16("growth_interval = 1.5");
    assert!(
        e.starts_with(
            "experiments/x.toml:17:30: training.scaler.growth_interval: must be a whole number, got 1.5;"
        ),
        "{e}"
    );
    assert_eq!(
        fp16("growth = 3"),
        "experiments/x.toml:17:12: unknown key `growth` in training.scaler; did you mean `growth_factor`? expected one of: init_scale, growth_factor, backoff_factor, growth_interval"
    );
}

#[test]
fn modes_without_backward_refuse_accumulation_and_checkpoint() {
    let e = err(&format!("{MINIMAL}mode = \"forward\"\naccumulation = 4\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:8: training.mode "forward" has no backward pass: accumulation and checkpoint apply to mode = "train" only"#
    );
    let e = err(&format!("{MINIMAL}checkpoint = 2\nmode = \"forward_no_grad\"\n"));
    assert!(e.starts_with("experiments/x.toml:17:8: training.mode \"forward_no_grad\""), "{e}");
    assert!(
        e.ends_with(r#"has no backward pass: accumulation and checkpoint apply to mode = "train" only"#),
        "{e}"
    );
}

/// PyTorch's `checkpoint_sequential(units, S, x)` as `checkpoint = { sequential = S }`, inline or
/// as a table; S from 1 to the model's units (MINIMAL's MLP has 2).
#[test]
fn checkpoint_sequential_takes_its_segments() {
    assert_eq!(techniques("checkpoint = { sequential = 2 }\n").checkpoint, Checkpoint::Sequential(2));
    assert_eq!(techniques("checkpoint = { sequential = 1 }\n").checkpoint, Checkpoint::Sequential(1));
    let t = techniques("[training.checkpoint]\nsequential = 2\n");
    assert_eq!(t.checkpoint, Checkpoint::Sequential(2));
    for bad in ["0", "-1", "1.5", "\"two\""] {
        let e = err(&format!("{MINIMAL}checkpoint = {{ sequential = {bad} }}\n"));
        let want = format!(
            "experiments/x.toml:16:14: training.checkpoint.sequential: must be a whole number >= 1, got {bad}; \
             set it to checkpoint_sequential's segments, 1 to the model's units (the last segment is not \
             checkpointed), e.g. checkpoint = {{ sequential = 4 }}"
        );
        assert_eq!(e, want);
    }
    // More segments than units: segment_size = units / segments would be 0, on which PyTorch fails.
    let e = err(&format!("{MINIMAL}checkpoint = {{ sequential = 3 }}\n"));
    assert_eq!(
        e,
        r#"experiments/x.toml:16:14: training.checkpoint { sequential = 3 } must be 1 to the 2 units of mlp 2x64: checkpoint_sequential's segments are units / S units long, and PyTorch fails when that is 0; give at most the model's units as segments, e.g. checkpoint = { sequential = 2 }, or checkpoint = "sqrt""#
    );
    // And so is a swept depth that leaves fewer units than segments.
    let e = err(&format!(
        "{MINIMAL}checkpoint = {{ sequential = 2 }}\n[sweep]\nfield = \"model.depth\"\nvalues = [4, 1]\n"
    ));
    assert!(
        e.contains("sweep.values[1]: training.checkpoint { sequential = 2 } must be 1 to the 1 units"),
        "{e}"
    );
}
