//! The words a spec writes for each choice, written once. [`Named::as_str`] names a choice in
//! `summary.csv` and in messages; [`Named::ALL`] is what the validator accepts and lists in
//! "must be one of". The manifest's JSON (serde's `snake_case`) spells them the same, which a
//! test holds.
use super::{
    Amp, AmpKind, Checkpoint, DataLocation, Dtype, History, Loss, Mode, ModelKind, OnOom, OptimizerImpl,
    OptimizerKind, ScriptUnits,
};

/// A choice among fixed words.
pub trait Named: Copy + 'static {
    /// Every choice, in the order messages list them.
    const ALL: &'static [Self];
    /// The word a spec writes for it.
    fn as_str(self) -> &'static str;

    /// The choice `word` names, as `as_str` writes it (summary.csv's columns); `None` for
    /// any other word.
    fn from_name(word: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == word)
    }
}

/// Implements [`Named`] from one table of (variant, word).
macro_rules! named {
    ($t:ty { $($v:ident => $w:literal),+ $(,)? }) => {
        impl Named for $t {
            const ALL: &'static [Self] = &[$(<$t>::$v),+];
            fn as_str(self) -> &'static str {
                match self {
                    $(<$t>::$v => $w),+
                }
            }
        }
        /// The spec's word, as messages and files write it.
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

named!(DataLocation { Host => "host", Device => "device" });
named!(Dtype { Float32 => "float32", Float64 => "float64", Bfloat16 => "bfloat16", Float16 => "float16" });
named!(Mode { Train => "train", Forward => "forward", ForwardNoGrad => "forward_no_grad" });
named!(History { None => "none", LossTensor => "loss_tensor", LossValue => "loss_value" });
named!(OptimizerImpl { ForLoop => "for_loop", Foreach => "foreach", Fused => "fused" });
named!(OnOom { Continue => "continue", Stop => "stop" });
named!(Loss { CrossEntropy => "cross_entropy", Mse => "mse" });
named!(ScriptUnits { Whole => "whole", Children => "children" });
named!(ModelKind { Mlp => "mlp", Cnn => "cnn", Transformer => "transformer", Torchscript => "torchscript" });
named!(AmpKind { Off => "off", Fp16 => "fp16", Bf16 => "bf16" });
named!(OptimizerKind { Sgd => "sgd", SgdMomentum => "sgd_momentum", Adam => "adam", AdamW => "adamw" });

impl Amp {
    /// "off", "fp16" or "bf16", as `training.amp` says it.
    pub fn as_str(&self) -> &'static str {
        self.kind().as_str()
    }
}

impl Checkpoint {
    /// "none", "sqrt", the units per segment, or "sequential:S" for `{ sequential = S }`
    /// (summary.csv's `checkpoint` column).
    pub fn name(self) -> String {
        match self {
            Checkpoint::None => "none".into(),
            Checkpoint::Sqrt => "sqrt".into(),
            Checkpoint::Every(k) => k.to_string(),
            Checkpoint::Sequential(s) => format!("sequential:{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest's JSON spells each word as the spec and summary.csv do.
    fn same_as_serde<T: Named + serde::Serialize>() {
        for v in T::ALL {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{}", std::any::type_name::<T>());
        }
    }

    #[test]
    fn every_word_is_the_one_serde_writes() {
        same_as_serde::<DataLocation>();
        same_as_serde::<Dtype>();
        same_as_serde::<Mode>();
        same_as_serde::<History>();
        same_as_serde::<OptimizerImpl>();
        same_as_serde::<OnOom>();
        same_as_serde::<AmpKind>();
        same_as_serde::<ModelKind>();
        same_as_serde::<OptimizerKind>();
        assert_eq!(Checkpoint::Every(4).name(), "4");
        assert_eq!(Checkpoint::Sequential(4).name(), "sequential:4");
        // The manifest's JSON keeps the spec's own forms.
        assert_eq!(serde_json::to_value(Checkpoint::Every(4)).unwrap(), serde_json::json!({ "every": 4 }));
        assert_eq!(serde_json::to_value(Checkpoint::Sqrt).unwrap(), "sqrt");
        assert_eq!(
            serde_json::to_value(Checkpoint::Sequential(4)).unwrap(),
            serde_json::json!({ "sequential": 4 })
        );
        assert_eq!(serde_json::to_value(Amp::Bf16).unwrap()["dtype"], Amp::Bf16.as_str());
    }
}
