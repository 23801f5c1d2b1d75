//! cuDNN's convolution workspaces on CUDA, where a GPU has measured them.
//!
//! With `cudnn.benchmark` off (PyTorch's default) a convolution's plan is the first that cuDNN's
//! heuristics rank and that runs (`try_configs`, aten/src/ATen/native/cudnn/Conv_v8.cpp). Its
//! workspace is taken from the caching allocator just before the kernel and freed just after
//! (`run_conv_plan`): in the forward after the output, in the backward after grad_input (the
//! data pass) and again after grad_weight (the filter pass). Its size is the plan's, and the
//! heuristics are closed: no rule gives it. So it is read from a table measured on a GPU
//! (`cudnn_workspaces.csv`, made by `scripts/reference/cudnn_workspaces.py` from a
//! `scripts/validate-gpu` run's allocation history), per pass, shape and dtype. A convolution
//! the table does not hold takes none, as before: the `cudnn` rule's bound covers it
//! ([`super::evidence::CONVOLUTIONS`]).
//!
//! Either way the replay writes a `cudnn` mark into `estimate --blocks` where the workspace
//! would be, naming the call, so that the script can read the size off the next history.
//!
//! The plan is the same call after call (PyTorch caches it per shape), so one measurement holds
//! for every step. It is the plan without a budget: under memory pressure cuDNN falls back to
//! plans that need less, and the table's size is then the most it takes.
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

use tch::Kind;

use super::GpuArch;

/// The table: what `scripts/reference/cudnn_workspaces.py` read off real runs' histories.
const TABLE: &str = include_str!("cudnn_workspaces.csv");

/// Which of a convolution's cuDNN calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// `cudnn_convolution`: the output.
    Forward,
    /// `cudnn_convolution_backward_input`: grad_input.
    Data,
    /// `cudnn_convolution_backward_weight`: grad_weight.
    Filter,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Data => "data",
            Pass::Filter => "filter",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Pass::Forward, Pass::Data, Pass::Filter].into_iter().find(|p| p.name() == s)
    }
}

/// One cuDNN call: the pass and the convolution's shapes (NCHW input, KCRS weight).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Call {
    pub pass: Pass,
    pub input: [i64; 4],
    pub weight: [i64; 4],
    pub stride: i64,
    pub padding: i64,
    pub groups: i64,
    pub dtype: &'static str,
}

/// A dtype's name in the table.
pub fn dtype_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Half => "float16",
        Kind::BFloat16 => "bfloat16",
        Kind::Double => "float64",
        _ => "float32",
    }
}

fn dims(s: &str) -> Option<[i64; 4]> {
    let v: Vec<i64> = s.split('x').map(|d| d.parse().ok()).collect::<Option<_>>()?;
    v.try_into().ok()
}

impl fmt::Display for Call {
    /// The table's columns, `pass,input,weight,stride,padding,groups,dtype`: also the mark's
    /// site in `estimate --blocks`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |a: &[i64; 4]| a.map(|x| x.to_string()).join("x");
        write!(
            f,
            "{},{},{},{},{},{},{}",
            self.pass.name(),
            d(&self.input),
            d(&self.weight),
            self.stride,
            self.padding,
            self.groups,
            self.dtype
        )
    }
}

impl Call {
    /// From the table's columns (as `Display` writes them).
    fn parse(cols: &[&str]) -> Option<Self> {
        let [pass, input, weight, stride, padding, groups, dtype] = cols else { return None };
        let dtype = ["float16", "bfloat16", "float32", "float64"].into_iter().find(|d| d == dtype)?;
        Some(Call {
            pass: Pass::parse(pass)?,
            input: dims(input)?,
            weight: dims(weight)?,
            stride: stride.parse().ok()?,
            padding: padding.parse().ok()?,
            groups: groups.parse().ok()?,
            dtype,
        })
    }
}

/// The table's rows by GPU generation and call. A row names the GPU that measured it (`h200`,
/// `nvidia-h200`); its generation is what the estimate's `--gpu` selects (an H100 is the H200's
/// chip, GH100 with the same 132 SMs, so it reads the H200's sizes: unconfirmed there, as the
/// `cudnn` rule says).
fn table() -> &'static HashMap<(GpuArch, Call), u64> {
    static PARSED: OnceLock<HashMap<(GpuArch, Call), u64>> = OnceLock::new();
    PARSED.get_or_init(|| {
        parse(TABLE).expect("src/estimate/cudnn_workspaces.csv is well-formed (a unit test reads it)")
    })
}

/// `gpu,pass,input,weight,stride,padding,groups,dtype,workspace,source` rows after a header and
/// `#` comments; an error names the line.
fn parse(text: &str) -> Result<HashMap<(GpuArch, Call), u64>, String> {
    let mut out = HashMap::new();
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty());
    match lines.next() {
        Some((_, h)) if h.starts_with("gpu,pass,") => {}
        _ => return Err("no `gpu,pass,...` header".into()),
    }
    for (i, line) in lines {
        let cols: Vec<&str> = line.split(',').collect();
        let bad = || format!("line {}: `{line}`", i + 1);
        if cols.len() != 10 {
            return Err(bad());
        }
        // `--gpu` tells Hopper apart from the rest, not one older GPU from another: a row
        // measured on one of those would stand for them all.
        let arch = GpuArch::from_device_name(cols[0]);
        if arch != GpuArch::Hopper {
            return Err(format!("{}: only Hopper GPUs (H100, H200) can be told apart by --gpu", bad()));
        }
        let call = Call::parse(&cols[1..8]).ok_or_else(bad)?;
        let bytes: u64 = cols[8].parse().map_err(|_| bad())?;
        // One size a call: `--gpu h100` and `--gpu h200` read the same rows.
        if out.insert((arch, call), bytes).is_some_and(|b| b != bytes) {
            return Err(format!(
                "{}: a second size for the same call (H100 and H200 rows are read alike)",
                bad()
            ));
        }
    }
    Ok(out)
}

/// The workspace cuDNN takes for `call` on `gpu`, where a GPU measured it.
pub fn workspace(gpu: GpuArch, call: &Call) -> Option<u64> {
    table().get(&(gpu, call.clone())).copied()
}

/// The distinct calls a replay made, and whether a GPU measured each: what the estimate's note
/// says of its convolutions.
#[derive(Debug, Default)]
pub struct Coverage(HashMap<Call, bool>);

impl Coverage {
    pub fn add(&mut self, call: Call, measured: bool) {
        *self.0.entry(call).or_insert(false) |= measured;
    }

    /// How many a GPU measured, and how many in all.
    pub fn counts(&self) -> (usize, usize) {
        (self.0.values().filter(|&&measured| measured).count(), self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(pass: Pass) -> Call {
        Call {
            pass,
            input: [32, 3, 224, 224],
            weight: [64, 3, 7, 7],
            stride: 2,
            padding: 3,
            groups: 1,
            dtype: "float32",
        }
    }

    #[test]
    fn the_shipped_table_parses_and_names_each_call_once() {
        let t = parse(TABLE).unwrap();
        assert!(!t.is_empty());
        // Every key reads back from what it writes (the mark's site is the table's columns).
        for (_, c) in t.keys() {
            let text = c.to_string();
            let cols: Vec<&str> = text.split(',').collect();
            assert_eq!(Call::parse(&cols).as_ref(), Some(c));
        }
    }

    #[test]
    fn a_row_is_found_by_its_generation_and_call_only() {
        let text = "# comment\ngpu,pass,input,weight,stride,padding,groups,dtype,workspace,source\n\
                    h200,forward,32x3x224x224,64x3x7x7,2,3,1,float32,122065680,run\n";
        let t = parse(text).unwrap();
        assert_eq!(t.get(&(GpuArch::Hopper, call(Pass::Forward))), Some(&122_065_680));
        assert_eq!(t.get(&(GpuArch::Hopper, call(Pass::Filter))), None);
        assert_eq!(t.get(&(GpuArch::Other, call(Pass::Forward))), None);
        let bf16 = Call { dtype: "bfloat16", ..call(Pass::Forward) };
        assert_eq!(t.get(&(GpuArch::Hopper, bf16)), None);
    }

    #[test]
    fn a_bad_or_conflicting_row_is_an_error_naming_its_line() {
        let head = "gpu,pass,input,weight,stride,padding,groups,dtype,workspace,source\n";
        let e = parse(&format!("{head}h200,sideways,1x1x1x1,1x1x1x1,1,0,1,float32,0,x\n")).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let row = "h200,forward,1x1x1x1,1x1x1x1,1,0,1,float32";
        let e = parse(&format!("{head}{row},0,x\n{row},512,y\n")).unwrap_err();
        assert!(e.contains("line 3") && e.contains("second size"), "{e}");
        assert!(parse("h200,forward\n").is_err());
        let e = parse(&format!("{head}a100,forward,1x1x1x1,1x1x1x1,1,0,1,float32,0,x\n")).unwrap_err();
        assert!(e.contains("only Hopper"), "{e}");
        let t = parse(&format!("{head}nvidia-h200,forward,1x1x1x1,1x1x1x1,1,0,1,float32,512,x\n")).unwrap();
        assert_eq!(t.len(), 1);
    }
}
