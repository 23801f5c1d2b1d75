//! A command resolved once into a plan: the spec with the command line's overrides applied by
//! the spec's own rules, the device asked for, whose allocator the estimate models, and the
//! budget in force there.
//!
//! Every command that trains or predicts (`run`, `estimate`, `advise`) starts from a [`Plan`], so
//! `--device` and `--budget` are merged with the spec in one place and mean the same to each of
//! them. (`plot` plans nothing: it draws the predictions a run recorded.)
use crate::device::DeviceChoice;
use crate::estimate::{GpuArch, Options, Target};
use crate::spec::Spec;

/// What the command line may override in a spec (already validated as the spec validates the
/// same keys: a device name, a budget of more than 0 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    pub device: Option<DeviceChoice>,
    pub budget: Option<u64>,
}

/// A spec ready to run or predict.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The spec, its `run.device` and budgets replaced by the overrides.
    pub spec: Spec,
    /// The device asked for (`--device`, else the spec's `run.device`).
    pub device: DeviceChoice,
    /// Whose allocator the estimate models: `auto` is CUDA where libtorch sees a GPU.
    pub target: Target,
    /// The budget for that device (`--budget`, else the spec's budget for the device).
    pub budget: Option<u64>,
    /// The spec's own budget for that device, before `--budget`: the charts name it beside an
    /// overriding one.
    pub spec_budget: Option<u64>,
}

impl Plan {
    /// Applies `overrides` to `spec`; `cuda_available` says what `auto` means here.
    pub fn new(mut spec: Spec, overrides: Overrides, cuda_available: bool) -> Plan {
        let device = overrides.device.unwrap_or(spec.run.device);
        let target = match device {
            DeviceChoice::Cpu => Target::Cpu,
            DeviceChoice::Cuda(_) => Target::Cuda,
            DeviceChoice::Auto if cuda_available => Target::Cuda,
            DeviceChoice::Auto => Target::Cpu,
        };
        spec.run.device = device;
        let spec_budget = spec.run.budget_on(target == Target::Cuda);
        if let Some(b) = overrides.budget {
            spec.run.set_budget(Some(b));
        }
        let budget = spec.run.budget_on(target == Target::Cuda);
        Plan { spec, device, target, budget, spec_budget }
    }

    /// The variants this machine does not run, and why: on the CPU, those that ask for matrix
    /// instructions of a low precision it lacks (`skip_on_cpu_without`); none on CUDA.
    pub fn not_run(&self, caps: crate::device::CpuCaps) -> Vec<crate::results::manifest::NotRun> {
        if self.target != Target::Cpu {
            return Vec::new();
        }
        self.spec
            .variants
            .iter()
            .filter_map(|v| {
                let why = v.skipped_on(caps)?;
                Some(crate::results::manifest::NotRun { variant: v.name.clone(), why })
            })
            .collect()
    }

    /// The configurations that will run here in a 16-bit precision this CPU has no matrix
    /// instructions for (variant, precision): libtorch converts around every kernel, tens of
    /// times fp32's time. Those a spec skips here (`skip_on_cpu_without`) are not among them.
    pub fn slow_here(
        &self,
        caps: crate::device::CpuCaps,
    ) -> Vec<(Option<String>, crate::device::HalfPrecision)> {
        if self.target != Target::Cpu {
            return Vec::new();
        }
        let skipped: Vec<String> = self.not_run(caps).into_iter().map(|n| n.variant).collect();
        self.spec
            .configs()
            .into_iter()
            .filter(|(v, _)| !v.is_some_and(|v| skipped.iter().any(|s| s == v)))
            .filter_map(|(v, c)| Some((v.map(str::to_string), c.half_precision().filter(|&p| !caps.has(p))?)))
            .collect()
    }

    /// The spec as written, on this machine (`auto` asks libtorch whether it sees a GPU). Where
    /// the spec may run on a GPU, libtorch's CUDA is loaded here, before the command runs any step
    /// (libtorch sizes what it keeps per device at the first; see `libtorch::cuda`).
    /// Why this plan cannot go on, for a search without `max` and without a budget where nothing
    /// else bounds it (`bounded`: a GPU's capacity does for a run; the CPU's host memory must not,
    /// and an estimate has no device to run out of): it would grow without end.
    pub fn unbounded_search(&self, bounded: bool) -> Option<String> {
        let implied = matches!(
            self.spec.sweep.as_ref().map(|s| &s.mode),
            Some(crate::spec::SweepMode::Search { implied_max: true, .. })
        );
        (implied && !bounded && self.budget.is_none()).then(|| {
            format!(
                "{}: sweep.search has no max, so it grows until out of memory, and without a budget nothing \
                 bounds it here (on the CPU it would be the host's own memory); give a budget (--budget 4GiB, \
                 or run.budget in the spec) or a max (search = {{ start = …, max = … }})",
                self.spec.path.display()
            )
        })
    }

    pub fn here(spec: Spec, overrides: Overrides) -> Plan {
        let cuda = match overrides.device.unwrap_or(spec.run.device) {
            DeviceChoice::Auto => crate::libtorch::cuda::available(),
            DeviceChoice::Cuda(_) => {
                crate::libtorch::cuda::devices();
                false
            }
            DeviceChoice::Cpu => false,
        };
        Plan::new(spec, overrides, cuda)
    }

    /// What the estimate assumes for this plan: libtorch's intra-op `threads` (a CPU reduction
    /// takes a buffer per thread) and, on CUDA, the workspaces a GPU of `arch` keeps for this
    /// spec's configurations and the budget as the allocator's limit.
    pub fn estimate_options(&self, arch: GpuArch, threads: usize) -> Options {
        let options = match self.target {
            Target::Cpu => Options::default(),
            Target::Cuda => {
                Options::cuda(arch, self.spec.configs().into_iter().map(|(_, c)| c)).under(self.budget)
            }
        };
        Options { threads: threads.max(1), ..options }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
[experiment]
name = "x"
[model]
hidden = 4
depth = 1
[data]
kind = "synthetic"
samples = 8
features = 2
classes = 2
[training]
optimizer = "sgd"
lr = 0.1
batch_size = 4
steps = 1
[run]
device = "auto"
budget = { cpu = "128MiB", cuda = "192MiB" }
"#;

    fn spec() -> Spec {
        crate::spec::parse(SPEC, std::path::Path::new("x.toml")).unwrap()
    }

    #[test]
    fn auto_means_cuda_only_where_there_is_a_gpu_and_picks_that_devices_budget() {
        let none = Overrides::default();
        let p = Plan::new(spec(), none, true);
        assert_eq!((p.device, p.target, p.budget), (DeviceChoice::Auto, Target::Cuda, Some(192 << 20)));
        let p = Plan::new(spec(), none, false);
        assert_eq!((p.target, p.budget), (Target::Cpu, Some(128 << 20)));
    }

    #[test]
    fn overrides_win_and_reach_the_spec() {
        let o = Overrides { device: Some(DeviceChoice::Cuda(1)), budget: Some(1 << 30) };
        let p = Plan::new(spec(), o, false);
        assert_eq!((p.device, p.target, p.budget), (DeviceChoice::Cuda(1), Target::Cuda, Some(1 << 30)));
        assert_eq!(p.spec.run.device, DeviceChoice::Cuda(1));
        assert_eq!((p.spec.run.budget, p.spec.run.cuda_budget), (Some(1 << 30), Some(1 << 30)));
        assert_eq!(p.spec_budget, Some(192 << 20), "the spec's own CUDA budget, kept for the charts");
        let cpu = Plan::new(spec(), Overrides { device: Some(DeviceChoice::Cpu), budget: None }, true);
        assert_eq!(
            (cpu.target, cpu.budget, cpu.spec_budget),
            (Target::Cpu, Some(128 << 20), Some(128 << 20))
        );
    }

    #[test]
    fn estimate_options_follow_the_target() {
        let cpu = Plan::new(spec(), Overrides::default(), false).estimate_options(GpuArch::Hopper, 3);
        assert_eq!((cpu.target, cpu.threads, cpu.limit), (Target::Cpu, 3, None));
        let cuda = Plan::new(spec(), Overrides::default(), true).estimate_options(GpuArch::Hopper, 0);
        assert_eq!((cuda.target, cuda.threads, cuda.limit), (Target::Cuda, 1, Some(192 << 20)));
    }

    #[test]
    fn only_a_cpu_without_the_instructions_leaves_a_variant_out() {
        let text = format!("{SPEC}[[variant]]\nname = \"full\"\n[[variant]]\nname = \"half\"\nskip_on_cpu_without = \"fp16\"\n");
        let spec = crate::spec::parse(&text, std::path::Path::new("x.toml")).unwrap();
        let (none, fp16) = (
            crate::device::CpuCaps { bf16: true, fp16: false },
            crate::device::CpuCaps { bf16: false, fp16: true },
        );
        let cpu = Plan::new(spec.clone(), Overrides::default(), false);
        let out = cpu.not_run(none);
        assert_eq!(out.iter().map(|n| n.variant.as_str()).collect::<Vec<_>>(), ["half"]);
        assert!(out[0].why.contains("no fp16 matrix instructions"), "{}", out[0].why);
        assert!(cpu.not_run(fp16).is_empty());
        assert!(
            Plan::new(spec, Overrides::default(), true).not_run(none).is_empty(),
            "CUDA runs every variant"
        );
    }

    /// A variant that runs here in a 16-bit precision the CPU lacks instructions for is named
    /// (to warn of its time); one the spec skips here, one in fp32 and any on CUDA are not.
    #[test]
    fn half_precision_without_its_instructions_is_named_unless_skipped() {
        use crate::device::{CpuCaps, HalfPrecision};
        let text = format!(
            "{SPEC}[[variant]]\nname = \"full\"\n[[variant]]\nname = \"bf\"\ntraining = {{ amp = \"bf16\" }}\n\
             [[variant]]\nname = \"fp\"\nskip_on_cpu_without = \"fp16\"\ntraining = {{ amp = \"fp16\" }}\n\
             [[variant]]\nname = \"half\"\ntraining = {{ dtype = \"float16\" }}\n"
        );
        let spec = crate::spec::parse(&text, std::path::Path::new("x.toml")).unwrap();
        let cpu = Plan::new(spec.clone(), Overrides::default(), false);
        let named = |caps| cpu.slow_here(caps);
        let neither = CpuCaps { bf16: false, fp16: false };
        assert_eq!(
            named(neither),
            [(Some("bf".into()), HalfPrecision::Bf16), (Some("half".into()), HalfPrecision::Fp16)]
        );
        assert!(named(CpuCaps { bf16: true, fp16: true }).is_empty());
        assert!(Plan::new(spec, Overrides::default(), true).slow_here(neither).is_empty(), "CUDA");
    }
}
