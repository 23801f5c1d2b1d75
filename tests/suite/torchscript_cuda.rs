//! The CUDA estimate of a TorchScript module, without a GPU: its step recorded on the CPU, the
//! host's tensors told from the device's by the code that makes them, and the device's replayed
//! through the caching allocator's model with CUDA's own rules (workspaces, a bias sum's
//! staging buffer).
//!
//! The oracle is oomlab's own CUDA replay of the built-in MLP, which replays the model's code
//! with CUDA's rules and which an H200 confirmed to the byte for MLPs at batches of 512 to 8192:
//! a scripted copy of that MLP must get the same bytes, phase by phase (end, peak, reserved end
//! and peak), for every optimizer and implementation, with accumulation, with the data set on
//! the device, at batch 32 (no staging) and 2048 (12 MiB of staging in each backward). Then
//! what a module the recording cannot stand for gets: the op, and why.
//!
//! Without python3 and a torch it can import, this test fails and says so.
use oomlab::estimate::{self, BlockAction, GpuArch, Options, Prediction};
use oomlab::spec::{Config, DataLocation, ModelSpec, OptimizerImpl, OptimizerSpec};

use crate::common::{self, Sandbox};

/// `mlp.pt`: oomlab's MLP over 256 features, widths 1024 and 1024, 10 classes, as
/// `nn.Sequential`; `dropout.pt`: one with dropout, whose mask CUDA keeps as bool; `elu.pt`:
/// one with ELU, a structured kernel (its output alone allocated, on either device);
/// `sorted.pt`: one that sorts, whose CUDA kernel takes temporaries the CPU's does not; `bag.pt`:
/// a bag of token embeddings.
const EXPORT: &str = r#"
import sys, torch, torch.nn as nn
out = sys.argv[1]
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
torch.jit.save(torch.jit.script(mlp), f"{out}/mlp.pt")
drop = nn.Sequential(nn.Linear(256, 64), nn.Dropout(0.1), nn.ReLU(), nn.Linear(64, 10))
torch.jit.save(torch.jit.script(drop), f"{out}/dropout.pt")
torch.jit.save(torch.jit.script(nn.Sequential(nn.Linear(256, 64), nn.ELU(), nn.Linear(64, 10))), f"{out}/elu.pt")

class Sorted(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(256, 64)
        self.b = nn.Linear(64, 10)

    def forward(self, x):
        return self.b(torch.sort(self.a(x), dim=1).values)

torch.jit.save(torch.jit.script(Sorted()), f"{out}/sorted.pt")

class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x).mean(1))

torch.jit.save(torch.jit.script(Bag()), f"{out}/bag.pt")
"#;

/// `resnet18.pt`: torchvision's ResNet-18, 10 classes.
const EXPORT_RESNET: &str = r#"
import sys, torch, torchvision
torch.manual_seed(0)
torch.jit.save(torch.jit.script(torchvision.models.resnet18(num_classes=10)), f"{sys.argv[1]}/resnet18.pt")
"#;

/// `biased.pt`: self-attention over 20 tokens of 2 heads of 40, its mask a learned bias
/// `[1, 2, 20, 20]` (as T5's relative position bias), so that the mask needs a gradient.
const EXPORT_BIASED: &str = r#"
import sys, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

class Biased(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(256, 20 * 80)
        self.qkv = nn.Linear(80, 240)
        self.bias = nn.Parameter(torch.zeros(1, 2, 20, 20))
        self.head = nn.Linear(80, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        h = self.embed(x).view(b, 20, 80)
        q, k, v = self.qkv(h).view(b, 20, 3, 2, 40).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
        return self.head(a.transpose(1, 2).reshape(b, 20, 80).mean(1))

torch.jit.save(torch.jit.script(Biased()), f"{sys.argv[1]}/biased.pt")
"#;

/// A sandbox holding `EXPORT`'s modules (exported once per process).
fn with_mlps() -> Sandbox {
    let sb = Sandbox::new();
    sb.copy_from(
        common::exported("torchscript_cuda EXPORT", EXPORT),
        &["mlp.pt", "dropout.pt", "elu.pt", "sorted.pt", "bag.pt"],
    );
    sb
}

/// A sandbox holding `EXPORT_RESNET`'s module (exported once per process).
fn with_resnet() -> Sandbox {
    let sb = Sandbox::new();
    sb.copy_from(common::exported("torchscript_cuda EXPORT_RESNET", EXPORT_RESNET), &["resnet18.pt"]);
    sb
}

const SPEC: &str = "[experiment]\nname = \"cuda\"\n[model]\nwidths = [1024, 1024]\n[data]\nsamples = 4096\n\
                    features = 256\nclasses = 10\n[training]\noptimizer = \"adam\"\nbatch_size = 32\nsteps = 2\n";

fn cuda(config: &Config) -> Options {
    Options::cuda(GpuArch::Hopper, [config])
}

fn predict(config: &Config) -> Prediction {
    let shape = estimate::data_shape(&config.data).unwrap();
    estimate::predict_with(config, shape, &cuda(config)).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Each phase's (end, peak, reserved end, reserved peak).
fn bytes(p: &Prediction) -> Vec<(String, u64, u64, u64, u64)> {
    p.phases
        .iter()
        .map(|p| {
            (format!("{:?} {}", p.phase, p.step), p.allocated_end, p.peak, p.reserved_end, p.reserved_peak)
        })
        .collect()
}

#[test]
fn a_scripted_mlp_gets_the_built_in_mlps_cuda_bytes_phase_by_phase() {
    let sb = with_mlps();
    let _in_process = common::in_process();
    let built_in = oomlab::spec::load(&sb.spec("mlp.toml", SPEC)).unwrap().base;
    let mut scripted = oomlab::spec::load(&sb.spec(
        "scripted.toml",
        &SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"mlp.pt\""),
    ))
    .unwrap()
    .base;
    assert!(matches!(scripted.model, ModelSpec::Torchscript(_)));
    let adam = built_in.training.optimizer;
    let sgd = OptimizerSpec::Sgd { lr: 0.1, momentum: 0.0, weight_decay: 0.0 };
    let momentum = OptimizerSpec::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 };
    let adamw = OptimizerSpec::AdamW { lr: 1e-3, weight_decay: 0.01 };
    // (optimizer, implementation (None: CUDA's default, foreach), accumulation, data on the device)
    let cases = [
        (adam, None, 1, false),
        (adam, Some(OptimizerImpl::ForLoop), 1, false),
        (sgd, None, 1, false),
        (momentum, Some(OptimizerImpl::Fused), 1, false),
        (adamw, None, 2, false),
        (adamw, Some(OptimizerImpl::Fused), 1, true),
        // Past the four micro-batches a step is recorded with: extended.
        (adam, None, 6, false),
        (momentum, Some(OptimizerImpl::ForLoop), 9, true),
    ];
    let mut failures = Vec::new();
    // What the process holds before: the recordings' modules, kept on meta for the next, must not
    // keep counted bytes after them (a later run in the process would have less of its budget).
    let before = oomlab::ffi::cpu_stats().allocated;
    for (optimizer, implementation, accumulation, on_device) in cases {
        for batch in [32, 2048] {
            let mut pair = [built_in.clone(), scripted.clone()];
            for c in &mut pair {
                c.training.optimizer = optimizer;
                c.training.techniques.optimizer_impl = implementation;
                c.training.techniques.accumulation = accumulation;
                c.training.batch_size = batch;
                c.location = if on_device { DataLocation::Device } else { DataLocation::Host };
            }
            let (want, got) = (predict(&pair[0]), predict(&pair[1]));
            assert_eq!(
                got.notes.iter().any(|n| n.contains("micro-batches from a recording of 4")),
                accumulation > 4,
                "{:?}",
                got.notes
            );
            let case = format!("{optimizer:?} {implementation:?} accumulation {accumulation} on device {on_device} batch {batch}");
            // Every implementation runs on meta (the fused ones through oomlab's meta kernels).
            if !got.notes.iter().any(|n| n.contains("recorded on the meta device")) {
                failures.push(format!("{case}: not recorded on the meta device: {:?}", got.notes));
            }
            if bytes(&want) != bytes(&got)
                || (want.baseline_allocated, want.baseline_reserved)
                    != (got.baseline_allocated, got.baseline_reserved)
            {
                failures.push(format!(
                    "{case}:\n  built-in {:?}\n  scripted {:?}",
                    bytes(&want),
                    bytes(&got)
                ));
            }
            // What CUDA's rules add is in both: at 2048 each backward holds the staging buffer
            // of two 1024-wide bias sums, which the CPU's estimate of the same module has not.
            if batch == 2048 && !on_device && accumulation == 1 {
                let backward = |p: &Prediction| {
                    p.phases
                        .iter()
                        .find(|p| p.phase == oomlab::schema::Phase::Backward)
                        .map(|p| p.peak - p.allocated_end)
                };
                let cpu = estimate::predict(&pair[1]).unwrap();
                assert!(
                    backward(&got).unwrap() > backward(&cpu).unwrap() + (8 << 20),
                    "{case}: staging in the CUDA backward"
                );
                assert_eq!(got.phases[0].peak, 0, "{case}: the data set is the host's");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(oomlab::ffi::cpu_stats().allocated, before, "bytes left allocated by the recordings");
    // The estimate says what it did, and that no GPU has confirmed it yet.
    scripted.training.batch_size = 64;
    let p = predict(&scripted);
    assert!(p.notes.iter().any(|n| n.contains("host's left out")), "{:?}", p.notes);
    assert!(p.bound.unconfirmed_names().contains("torchscript"), "{:?}", p.bound);
}

/// A convolutional network: oneDNN's scratch inside each convolution and batch norm is left
/// out, what they return kept, so that a scripted ResNet-18 gets the built-in ResNet-18's CUDA
/// bytes at every phase's end, and its peaks within 0.5%: the CPU's kernels make their outputs
/// in another order than the replay's CUDA ones (batch norm's backward: the weight's and bias's
/// gradients before the input's), which moves a block or two in the allocator. Neither order is
/// confirmed on a GPU: the bound carries cuDNN's rule, as the built-in's does. The same under fp16
/// and bf16 autocast (CUDA's op lists on the meta device), against the built-in's replay of them
/// for convolutions and batch norm, which is not confirmed (an H200 ran bf16 ResNet-18 1.4% over
/// it: the `autocast` rule's margin).
#[test]
fn a_scripted_resnet_gets_the_built_in_resnets_cuda_bytes() {
    let sb = with_resnet();
    let _in_process = common::in_process();
    let [built_in, scripted] = resnets(&sb, 256, 32, 32);
    let fp16 = oomlab::spec::Amp::Fp16 { scaler: Default::default() };
    for (batch, amp) in
        [(8, oomlab::spec::Amp::Off), (32, oomlab::spec::Amp::Off), (32, fp16), (8, oomlab::spec::Amp::Bf16)]
    {
        let mut pair = [built_in.clone(), scripted.clone()];
        pair.iter_mut().for_each(|c| {
            c.training.batch_size = batch;
            c.training.techniques.amp = amp;
        });
        let (want, got) = (predict(&pair[0]), predict(&pair[1]));
        for (w, g) in bytes(&want).into_iter().zip(bytes(&got)) {
            assert_eq!(w.1, g.1, "batch {batch} {amp:?}, {}: the end", w.0);
            let off = (g.2 as f64 - w.2 as f64).abs() / w.2.max(1) as f64;
            assert!(
                off < 0.005,
                "batch {batch} {amp:?}, {}: peak {} against {} ({:.3}%)",
                w.0,
                g.2,
                w.2,
                off * 100.0
            );
        }
        assert!(got.bound.unconfirmed_names().contains("cudnn"), "{:?}", got.bound);
        // Each cuDNN call the replay makes, where it makes it: the recording read each
        // convolution's shapes, stride, padding and groups off the op's arguments, forward and
        // backward, and placed the backward's data and filter passes after the gradient each makes.
        let (want_calls, got_calls) = (cudnn_calls(&pair[0]), cudnn_calls(&pair[1]));
        assert!(want_calls.len() > 40, "{want_calls:?}");
        assert_eq!(want_calls, got_calls, "batch {batch} {amp:?}: the cuDNN calls");
        let note = |p: &Prediction| p.notes.iter().find(|n| n.contains("cuDNN calls")).cloned();
        assert!(note(&got).is_some_and(|n| n.contains("none of its 32 cuDNN calls")), "{:?}", got.notes);
    }
}

/// Where a GPU measured a scripted module's cuDNN calls (ResNet-18 on 64 x 64 images at batch
/// 1024, fp32, in `src/estimate/cudnn_workspaces.csv`), its replay holds the same workspaces
/// as the built-in ResNet-18's, at the same calls: the same peaks, reserved memory included.
#[test]
fn a_scripted_resnet_takes_the_cudnn_workspaces_a_gpu_measured() {
    let sb = with_resnet();
    let _in_process = common::in_process();
    let [built_in, scripted] = resnets(&sb, 1024, 64, 1024);
    let (want, got) = (predict(&built_in), predict(&scripted));
    assert!(
        got.notes.iter().any(|n| n.contains("each of its 32 cuDNN calls")),
        "every call measured: {:?}",
        got.notes
    );
    let peak = |p: &Prediction| (p.peak_allocated(), p.peak_reserved());
    let (w, g) = (peak(&want), peak(&got));
    let off = |a: u64, b: u64| (a as f64 - b as f64).abs() / b.max(1) as f64;
    assert!(off(g.0, w.0) < 0.005 && off(g.1, w.1) < 0.005, "scripted {g:?} against built-in {w:?}");
    assert_eq!(cudnn_calls(&scripted), cudnn_calls(&built_in), "the same calls, the same workspaces");
}

/// The built-in ResNet-18 and the scripted torchvision one (`EXPORT_RESNET`), on `samples`
/// images of `size` x `size`, Adam, two steps of `batch`.
fn resnets(sb: &Sandbox, samples: usize, size: usize, batch: usize) -> [Config; 2] {
    let spec = format!(
        "[experiment]\nname = \"r\"\n[model]\nkind = \"cnn\"\narch = \"resnet18\"\n[data]\nkind = \"images\"\n\
         samples = {samples}\nchannels = 3\nsize = {size}\nclasses = 10\nseed = 0\n[training]\noptimizer = \"adam\"\n\
         batch_size = {batch}\nsteps = 2\n"
    );
    let scripted =
        spec.replace("kind = \"cnn\"\narch = \"resnet18\"", "kind = \"torchscript\"\npath = \"resnet18.pt\"");
    [sb.spec("r.toml", &spec), sb.spec("s.toml", &scripted)]
        .map(|path| oomlab::spec::load(&path).unwrap().base)
}

/// Each cuDNN call a CUDA replay makes: its step, phase, call and workspace.
fn cudnn_calls(c: &Config) -> Vec<(usize, oomlab::schema::Phase, String, u64)> {
    let shape = estimate::data_shape(&c.data).unwrap();
    let (_, blocks) = estimate::predict_blocks(c, shape, &cuda(c)).unwrap();
    blocks
        .into_iter()
        .filter(|b| b.action == BlockAction::Cudnn)
        .map(|b| (b.step, b.phase, b.site, b.requested))
        .collect()
}

#[test]
fn dropout_is_cudas_and_a_module_the_cpu_recording_cannot_stand_for_is_refused_naming_its_op() {
    let sb = with_mlps();
    let _in_process = common::in_process();
    let refused = |model: &str, training: &str| {
        let text = SPEC
            .replace("widths = [1024, 1024]", &format!("kind = \"torchscript\"\npath = \"{model}\""))
            .replace("[training]\n", &format!("[training]\n{training}"));
        let config = oomlab::spec::load(&sb.spec("refused.toml", &text)).unwrap().base;
        let shape = estimate::data_shape(&config.data).unwrap();
        // The CPU's estimate of the same module stands.
        estimate::predict(&config).unwrap_or_else(|e| panic!("{model} on the CPU: {e:#}"));
        format!("{:#}", estimate::predict_with(&config, shape, &cuda(&config)).unwrap_err())
    };
    // Dropout is estimated: its float mask on the CPU is a bool one on CUDA, a quarter of it.
    let dropout = oomlab::spec::load(&sb.spec(
        "dropout.toml",
        &SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"dropout.pt\""),
    ))
    .unwrap()
    .base;
    // Each forward asks for the mask as 32 x 64 bytes on CUDA, where the CPU asks for floats.
    let forward_requests = |options: &Options| {
        let shape = estimate::data_shape(&dropout.data).unwrap();
        let (_, blocks) = estimate::predict_blocks(&dropout, shape, options).unwrap();
        blocks
            .iter()
            .filter(|b| {
                b.phase == oomlab::schema::Phase::Forward && b.step == 1 && b.action == BlockAction::Alloc
            })
            .map(|b| b.requested)
            .collect::<Vec<_>>()
    };
    let (on_cpu, on_cuda) = (forward_requests(&Options::default()), forward_requests(&cuda(&dropout)));
    // `estimate --blocks` names the op of each block (what compare.py quotes where a GPU parts).
    let (_, blocks) =
        estimate::predict_blocks(&dropout, estimate::data_shape(&dropout.data).unwrap(), &cuda(&dropout))
            .unwrap();
    assert!(blocks.iter().any(|b| b.site == "aten::linear > aten::addmm"), "{:?}", &blocks[..8]);
    // The first Linear's output [32, 64]; dropout's mask, as floats on the CPU with the scalar
    // of `noise.div_(1 - p)` wrapped and cast there (the host's on CUDA), as bools on CUDA; its
    // output; the ReLU's; the last Linear's [32, 10]; log_softmax's; the loss and its weight.
    let (row, logits) = (32 * 64 * 4, 32 * 10 * 4);
    assert_eq!(on_cpu, [row, row, 8, 4, row, row, logits, logits, 4, 4]);
    assert_eq!(on_cuda, [row, 32 * 64, row, row, logits, logits, 4, 4]);
    // A structured kernel is estimated (scripts/reference/aten_ops.py's table); a sort is refused
    // by name, with why.
    let elu = oomlab::spec::load(&sb.spec(
        "elu.toml",
        &SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"elu.pt\""),
    ))
    .unwrap()
    .base;
    estimate::predict_with(&elu, estimate::data_shape(&elu.data).unwrap(), &cuda(&elu))
        .unwrap_or_else(|e| panic!("ELU on CUDA: {e:#}"));
    let e = refused("sorted.pt", "");
    assert!(e.contains("aten::sort") && e.contains("temporaries the CPU's does not"), "{e}");
    // One variant refused does not sink the others: they are answered, the refusal is named,
    // and the command fails.
    let both = SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"elu.pt\"")
        + "[[variant]]\nname = \"elu\"\n[[variant]]\nname = \"sorts\"\n\
           model = { kind = \"torchscript\", path = \"sorted.pt\" }\n";
    let out = common::oomlab()
        .arg("estimate")
        .arg(sb.spec("both.toml", &both))
        .args(["--device", "cuda", "--gpu", "h100"])
        .output()
        .unwrap();
    let (said, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("[elu]\ntrial          peak ") && !said.contains("[sorts]"), "{said}");
    assert!(
        err.contains("1 of 2 variants not estimated")
            && err.contains("variant sorts: ")
            && err.contains("aten::sort"),
        "{err}"
    );
}

/// Under `training.amp` the step recorded on the meta device runs CUDA's autocast (PyTorch
/// 2.11's op lists, its cast cache; libtorch's own casts no meta tensor): a scripted MLP gets
/// the built-in MLP's CUDA bytes under fp16 with its grad scaler and under bf16, phase by phase,
/// where the built-in's replay of autocast and the scaler was confirmed on an H200 (the
/// `autocast-mlp` rule). Without CUDA's
/// lists every op would run in float32: the forward's activations twice the size, no weight
/// copies.
#[test]
fn a_scripted_mlp_under_autocast_gets_the_built_in_mlps_cuda_bytes() {
    let sb = with_mlps();
    let _in_process = common::in_process();
    let built_in = oomlab::spec::load(&sb.spec("mlp.toml", SPEC)).unwrap().base;
    let scripted = oomlab::spec::load(&sb.spec(
        "scripted.toml",
        &SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"mlp.pt\""),
    ))
    .unwrap()
    .base;
    let fp16 = oomlab::spec::Amp::Fp16 { scaler: Default::default() };
    let mut failures = Vec::new();
    for (amp, implementation, accumulation) in [
        (fp16, None, 1),
        (fp16, Some(OptimizerImpl::Fused), 1),
        (oomlab::spec::Amp::Bf16, None, 1),
        (oomlab::spec::Amp::Bf16, Some(OptimizerImpl::ForLoop), 2),
    ] {
        for batch in [32, 2048] {
            let mut pair = [built_in.clone(), scripted.clone()];
            for c in &mut pair {
                c.training.techniques.amp = amp;
                c.training.techniques.optimizer_impl = implementation;
                c.training.techniques.accumulation = accumulation;
                c.training.batch_size = batch;
            }
            let case = format!("{amp:?} {implementation:?} accumulation {accumulation} batch {batch}");
            let (want, got) = (predict(&pair[0]), predict(&pair[1]));
            if !got.notes.iter().any(|n| n.contains("its step recorded on the meta device (")) {
                failures.push(format!("{case}: not recorded on the meta device: {:?}", got.notes));
            }
            if bytes(&want) != bytes(&got) {
                failures.push(format!(
                    "{case}:\n  built-in {:?}\n  scripted {:?}",
                    bytes(&want),
                    bytes(&got)
                ));
            }
            // Autocast made a difference: the same module in float32 holds more after its forward.
            let mut plain = pair[1].clone();
            plain.training.techniques.amp = oomlab::spec::Amp::Off;
            let forward_end = |p: &Prediction| {
                p.phases.iter().find(|p| p.phase == oomlab::schema::Phase::Forward).map(|p| p.allocated_end)
            };
            if batch == 2048 && forward_end(&predict(&plain)) <= forward_end(&got) {
                failures.push(format!("{case}: the forward under autocast holds no less than in float32"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Recorded on this CPU (`--record-on cpu`), the step would run the CPU's autocast: refused.
    let amp_spec = SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"mlp.pt\"")
        + "amp = \"bf16\"\n";
    let out = common::oomlab()
        .arg("estimate")
        .arg(sb.spec("amp.toml", &amp_spec))
        .args(["--device", "cuda", "--gpu", "h100", "--record-on", "cpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("training.amp") && err.contains("CPU autocast"), "{err}");
}

/// An attention whose mask needs a gradient runs on CUDA as its memory-efficient kernel (the
/// CPU's math path keeps `[L, L]` scores that CUDA does not): recorded on the meta device as
/// PyTorch 2.11's CUDA sources allocate it. At batch 32, 2 heads of 40 over 20 tokens: the
/// mask, its rows of 20 not a multiple of 8, padded to 24 columns (`preprocess_mask`); the
/// logsumexp padded to 32 rows; no scores; in the backward the mask's gradient, expanded to the
/// batch and padded to 32 columns, and the kernel's workspace (one 64 x 64 tile of the query
/// gradient a batch and head).
#[test]
fn an_attention_mask_that_needs_a_gradient_is_cudas_memory_efficient_kernel() {
    let sb = Sandbox::new();
    sb.copy_from(common::exported("torchscript_cuda EXPORT_BIASED", EXPORT_BIASED), &["biased.pt"]);
    let _in_process = common::in_process();
    let text = SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"biased.pt\"");
    let config = oomlab::spec::load(&sb.spec("biased.toml", &text)).unwrap().base;
    let shape = estimate::data_shape(&config.data).unwrap();
    // On the CPU it is the CPU's math path, estimated as ever.
    estimate::predict(&config).unwrap_or_else(|e| panic!("on the CPU: {e:#}"));
    let (p, blocks) =
        estimate::predict_blocks(&config, shape, &cuda(&config)).unwrap_or_else(|e| panic!("{e:#}"));
    let requests = |phase, site: &str| -> Vec<u64> {
        blocks
            .iter()
            .filter(|b| {
                b.phase == phase && b.step == 1 && b.action == BlockAction::Alloc && b.site.contains(site)
            })
            .map(|b| b.requested)
            .collect()
    };
    use oomlab::schema::Phase::{Backward, Forward};
    let forward = requests(Forward, "");
    let (pad, lse, scores) = (2 * 20 * 24 * 4, 32 * 2 * 32 * 4, 32 * 2 * 20 * 20 * 4);
    assert!(requests(Forward, "pad").contains(&pad), "{forward:?}");
    assert!(requests(Forward, "efficient_attention").contains(&lse), "{forward:?}");
    assert!(!forward.contains(&scores), "the math path's scores: {forward:?}");
    let backward = requests(Backward, "EfficientAttentionBackward");
    let (grad_bias, workspace) = (32 * 2 * 20 * 32 * 4, 32 * 2 * 4100 * 4);
    assert!(backward.contains(&grad_bias) && backward.contains(&workspace), "{backward:?}");
    assert!(p.notes.iter().any(|n| n.contains("mask that needs a gradient recorded on the meta device")));
    assert!(
        p.bound.unconfirmed_names().contains("attention-efficient-bias"),
        "{}",
        p.bound.unconfirmed_names()
    );
}

/// An embedding's backward keeps its gradient alone on CUDA, as the built-in replay does (the
/// scratch the CPU's kernel may take is left out; here it takes none): one request of the table's size.
#[test]
fn an_embeddings_backward_keeps_its_gradient_alone() {
    let sb = with_mlps();
    let _in_process = common::in_process();
    let text = "[experiment]\nname = \"bag\"\n[model]\nkind = \"torchscript\"\npath = \"bag.pt\"\n[data]\n\
                kind = \"tokens\"\nsamples = 512\nseq_len = 32\nvocab = 1000\nclasses = 10\nseed = 0\n[training]\n\
                optimizer = \"sgd\"\nbatch_size = 64\nsteps = 1\n";
    let config = oomlab::spec::load(&sb.spec("bag.toml", text)).unwrap().base;
    let (_, blocks) =
        estimate::predict_blocks(&config, estimate::data_shape(&config.data).unwrap(), &cuda(&config))
            .unwrap();
    let in_backward: Vec<u64> = blocks
        .iter()
        .filter(|b| b.action == BlockAction::Alloc && b.site.contains("EmbeddingBackward0"))
        .map(|b| b.requested)
        .collect();
    assert_eq!(in_backward, [1000 * 64 * 4], "{blocks:?}");
}

/// `advise` weighs dozens of a scripted module's options: past its recorded batches, each is
/// checked by a recording of a step like it at the micro-batch (one micro-batch, the foreach
/// optimizer), shared, where a single estimate records its own. Both must give the same bytes.
#[test]
fn advises_shared_check_gives_what_each_options_own_recording_gives() {
    let sb = with_mlps();
    let _in_process = common::in_process();
    let text = SPEC.replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"mlp.pt\"");
    let base = oomlab::spec::load(&sb.spec("scripted.toml", &text)).unwrap().base;
    let shape = estimate::data_shape(&base.data).unwrap();
    for (accumulation, implementation) in
        [(1, Some(OptimizerImpl::Fused)), (2, None), (4, Some(OptimizerImpl::ForLoop)), (8, None)]
    {
        let mut c = base.clone();
        c.training.batch_size = 2048 / accumulation;
        c.training.techniques.accumulation = accumulation;
        c.training.techniques.optimizer_impl = implementation;
        let own = estimate::predict_with(&c, shape, &cuda(&c)).unwrap();
        let shared = estimate::predict_with(&c, shape, &Options { shared_checks: true, ..cuda(&c) }).unwrap();
        let case = format!("accumulation {accumulation} x {}, {implementation:?}", c.training.batch_size);
        assert_eq!(bytes(&own), bytes(&shared), "{case}");
        let said = |p: &Prediction, what: &str| p.notes.iter().any(|n| n.contains(what));
        assert!(said(&own, "a recording of its own"), "{case}: {:?}", own.notes);
        assert!(said(&shared, "a step like it"), "{case}: {:?}", shared.notes);
    }
}

/// `oomlab advise` on a scripted module on CUDA, through the binary: every option is estimated,
/// the autocast ones too (CUDA's op lists on the meta device), and accumulation is among those
/// that fit where the spec as written does not.
#[test]
fn advise_weighs_a_scripted_modules_options_on_cuda() {
    let sb = with_mlps();
    let text = SPEC
        .replace("widths = [1024, 1024]", "kind = \"torchscript\"\npath = \"mlp.pt\"")
        .replace("batch_size = 32", "batch_size = 2048");
    let spec = sb.spec("scripted.toml", &text).display().to_string();
    let json = common::advise::advise_json(
        &sb,
        &[&spec, "--device", "cuda", "--gpu", "h100", "--budget", "120MiB", "--no-calibrate"],
    );
    let options = json["options"].as_array().expect("options");
    let verdict = |o: &serde_json::Value| o["verdict"].as_str().unwrap_or("").to_string();
    assert_eq!(json["written"]["verdict"], "oom", "{}", json["written"]);
    let outside: Vec<_> = options.iter().filter(|o| verdict(o) == "unknown").collect();
    assert!(outside.is_empty(), "every option is estimated: {outside:?}");
    assert!(
        options.iter().any(|o| o["describe"].as_str().is_some_and(|d| d.contains("amp"))),
        "autocast is among the options: {options:?}"
    );
    let fits: Vec<String> =
        options.iter().filter(|o| verdict(o) == "fits").map(|o| o["describe"].to_string()).collect();
    assert!(fits.iter().any(|d| d.contains("micro-batch")), "{fits:?}");
}
