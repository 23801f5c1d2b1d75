//! The key catalogue: every key a spec may set, what it means and how it is written, so that a
//! message about a bad or missing value can end in a fix the user can copy.

/// What a key means and how it is written, for the "how to fix it" half of messages.
pub(super) struct KeyInfo {
    key: &'static str,
    /// Reads after "set it to".
    pub about: &'static str,
    pub example: &'static str,
}

#[rustfmt::skip]
const KEYS: &[KeyInfo] = &[
    KeyInfo { key: "experiment.name", about: "a folder name of lowercase letters, digits, _ and -", example: r#"name = "depth_sweep""# },
    KeyInfo { key: "experiment.description", about: "a sentence about the experiment", example: r#"description = "activation memory against depth""# },
    KeyInfo { key: "model.kind", about: r#""mlp", "cnn", "transformer" or "torchscript""#, example: r#"kind = "cnn""# },
    KeyInfo { key: "model.hidden", about: "the width of each hidden layer", example: "hidden = 512" },
    KeyInfo { key: "model.depth", about: "the number of hidden layers (an MLP) or conv blocks (a plain CNN)", example: "depth = 4" },
    KeyInfo { key: "model.widths", about: "the hidden layers' widths, first to last", example: "widths = [2000, 1000]" },
    KeyInfo { key: "model.arch", about: r#""resnet18", "resnet34", "resnet50", "resnet101", "resnet152" or "plain""#, example: r#"arch = "resnet50""# },
    KeyInfo { key: "model.channels", about: "the channels of a plain CNN's convolutions", example: "channels = 256" },
    KeyInfo { key: "model.conv", about: r#""standard" or "depthwise_separable""#, example: r#"conv = "depthwise_separable""# },
    KeyInfo { key: "model.kernel", about: "an odd kernel size", example: "kernel = 3" },
    KeyInfo { key: "model.d_model", about: "the Transformer's width", example: "d_model = 512" },
    KeyInfo { key: "model.nhead", about: "the attention heads, dividing d_model", example: "nhead = 8" },
    KeyInfo { key: "model.num_layers", about: "the encoder layers", example: "num_layers = 6" },
    KeyInfo { key: "model.dim_feedforward", about: "the feed-forward width (PyTorch's default is 2048)", example: "dim_feedforward = 2048" },
    KeyInfo { key: "model.dropout", about: "the dropout probability (PyTorch's default is 0.1)", example: "dropout = 0.1" },
    KeyInfo { key: "model.path", about: "a TorchScript module (torch.jit.save), relative to the spec's folder", example: r#"path = "models/mobilenet_v3_small.pt""# },
    KeyInfo { key: "model.loss", about: r#""cross_entropy" (class logits in the output's last dimension; the default) or "mse" (values shaped as data.target; with data.kind = "tensors")"#, example: r#"loss = "mse""# },
    KeyInfo { key: "model.units", about: r#""whole" (one unit: checkpointing recomputes the whole forward; the default) or "children" (its top-level children, when its forward runs them in turn: checkpointing cuts between them)"#, example: r#"units = "children""# },
    KeyInfo { key: "model.norm_first", about: "true for pre-norm layers (LayerNorm before attention and feed-forward)", example: "norm_first = false" },
    KeyInfo { key: "data.kind", about: r#""synthetic" or "csv" (an MLP), "images" (a CNN), "tokens" (a Transformer), or "tensors" (a TorchScript module's inputs, shape by shape)"#, example: r#"kind = "synthetic""# },
    KeyInfo { key: "data.inputs", about: "the module's inputs in its forward's order, each one sample's shape without the batch dimension (float in the training dtype unless dtype says int64 or bool)", example: r#"inputs = [{ name = "ids", shape = [128], dtype = "int64", high = 30522 }, { name = "mask", shape = [128], dtype = "bool" }]"# },
    KeyInfo { key: "data.inputs.dtype", about: r#""float" (the training dtype; the default), "int64" (ids in 0..high) or "bool""#, example: r#"inputs = [{ shape = [128], dtype = "int64", high = 30522 }]"# },
    KeyInfo { key: "data.inputs.high", about: "an int64 input's ids are drawn from 0..high", example: r#"inputs = [{ shape = [128], dtype = "int64", high = 30522 }]"# },
    KeyInfo { key: "data.target", about: "one sample's target shape without the batch dimension: class indices with data.classes (cross_entropy; default [], one per sample), float values without (mse)", example: "target = [1]" },
    KeyInfo { key: "data.channels", about: "the images' channels", example: "channels = 3" },
    KeyInfo { key: "data.size", about: "the images' side in pixels", example: "size = 32" },
    KeyInfo { key: "data.seq_len", about: "the tokens per sample", example: "seq_len = 128" },
    KeyInfo { key: "data.vocab", about: "the number of token ids", example: "vocab = 10000" },
    KeyInfo { key: "data.samples", about: "the number of rows of synthetic data", example: "samples = 1024" },
    KeyInfo { key: "data.features", about: "the number of input features", example: "features = 20" },
    KeyInfo { key: "data.classes", about: "the number of classes, at least 2", example: "classes = 10" },
    KeyInfo { key: "data.seed", about: "the seed of the synthetic data", example: "seed = 0" },
    KeyInfo { key: "data.path", about: "a CSV file, relative to the spec's folder", example: r#"path = "data/iris.csv""# },
    KeyInfo { key: "data.label", about: "the name of the integer label column", example: r#"label = "species""# },
    KeyInfo { key: "data.location", about: r#""host" (the data set in host memory, each batch moved to the device, as a DataLoader does) or "device" (the whole data set on the device)"#, example: r#"location = "host""# },
    KeyInfo { key: "training.optimizer", about: r#""sgd", "adam" or "adamw""#, example: r#"optimizer = "adam""# },
    KeyInfo { key: "training.lr", about: "the learning rate", example: "lr = 0.001" },
    KeyInfo { key: "training.optimizer_impl", about: r#""for_loop", "foreach" or "fused": how torch.optim runs the update (default: PyTorch's own pick, foreach on CUDA and for_loop on the CPU)"#, example: r#"optimizer_impl = "fused""# },
    KeyInfo { key: "training.momentum", about: "the SGD momentum, 0 <= m < 1", example: "momentum = 0.9" },
    KeyInfo { key: "training.weight_decay", about: "the weight decay", example: "weight_decay = 0.01" },
    KeyInfo { key: "training.batch_size", about: "the rows per step", example: "batch_size = 32" },
    KeyInfo { key: "training.steps", about: "the optimizer steps per trial", example: "steps = 2" },
    KeyInfo { key: "training.dtype", about: "float32, float64, bfloat16 or float16", example: r#"dtype = "float32""# },
    KeyInfo { key: "training.seed", about: "the seed of initialisation and batch order", example: "seed = 0" },
    KeyInfo { key: "training.accumulation", about: "the micro-batches per optimizer step", example: "accumulation = 4" },
    KeyInfo { key: "training.amp", about: r#""off", "fp16" or "bf16""#, example: r#"amp = "fp16""# },
    KeyInfo { key: "training.scaler", about: r#"the grad scaler of amp = "fp16""#, example: "scaler = { init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000 }" },
    KeyInfo { key: "training.scaler.init_scale", about: "the first loss scale", example: "scaler = { init_scale = 65536.0 }" },
    KeyInfo { key: "training.scaler.growth_factor", about: "what the scale is multiplied by after growth_interval steps without overflow", example: "scaler = { growth_factor = 2.0 }" },
    KeyInfo { key: "training.scaler.backoff_factor", about: "what the scale is multiplied by after an overflow", example: "scaler = { backoff_factor = 0.5 }" },
    KeyInfo { key: "training.scaler.growth_interval", about: "the steps without overflow before the scale grows", example: "scaler = { growth_interval = 2000 }" },
    KeyInfo { key: "training.checkpoint", about: r#""none", "sqrt" (about sqrt(n) segments of n units), the units per segment (an MLP's hidden layers; a CNN's stem and blocks; a Transformer's embedding and layers) or { sequential = S } (PyTorch's checkpoint_sequential: S segments, the last one plain)"#, example: r#"checkpoint = "sqrt""# },
    KeyInfo { key: "training.checkpoint.sequential", about: "checkpoint_sequential's segments, 1 to the model's units (the last segment is not checkpointed)", example: "checkpoint = { sequential = 4 }" },
    KeyInfo { key: "training.mode", about: r#""train", "forward" or "forward_no_grad""#, example: r#"mode = "train""# },
    KeyInfo { key: "training.history", about: r#""none", "loss_tensor" or "loss_value""#, example: r#"history = "loss_value""# },
    KeyInfo { key: "parallel.strategy", about: r#""none", "ddp" (DistributedDataParallel: every rank holds the model and all-reduces the gradients) or "zero" (ZeroRedundancyOptimizer over DDP: each rank's optimizer state is its shard's)"#, example: r#"strategy = "ddp""# },
    KeyInfo { key: "parallel.world_size", about: "the ranks, one process each (sweepable)", example: "world_size = 2" },
    KeyInfo { key: "parallel.batch", about: r#""per_rank" (training.batch_size is each rank's, the default) or "global" (split evenly over the ranks)"#, example: r#"batch = "per_rank""# },
    KeyInfo { key: "parallel.bucket_cap_mb", about: "DDP's gradient bucket size in MiB (default 25, the first bucket 1)", example: "bucket_cap_mb = 25" },
    KeyInfo { key: "parallel.gradient_as_bucket_view", about: "gradients as views into DDP's buckets (no second copy)", example: "gradient_as_bucket_view = true" },
    KeyInfo { key: "parallel.find_unused_parameters", about: "DDP searches each forward's graph for parameters it skips", example: "find_unused_parameters = false" },
    KeyInfo { key: "parallel.static_graph", about: "DDP told the graph is the same every step", example: "static_graph = false" },
    KeyInfo { key: "run.device", about: "auto, cpu, cuda or cuda:N", example: r#"device = "auto""# },
    KeyInfo { key: "run.budget", about: "a size or a whole number of bytes", example: r#"budget = "15.90GiB""# },
    KeyInfo { key: "run.on_oom", about: r#""continue" or "stop""#, example: r#"on_oom = "continue""# },
    KeyInfo { key: "run.skip_predicted_oom", about: "a margin >= 0 over the budget", example: "skip_predicted_oom = 0.05" },
    KeyInfo { key: "run.rounds", about: "how many times the trials run, round after round (1 to 20), so that step times compare across the same stretch of time", example: "rounds = 3" },
    KeyInfo { key: "sweep.field", about: "the field to vary", example: r#"field = "model.depth""# },
    KeyInfo { key: "sweep.values", about: "the values to try, in order", example: "values = [1, 2, 4]" },
    KeyInfo { key: "sweep.search", about: "a search for the largest value that fits", example: "search = { start = 1, factor = 2, max = 4096 }" },
    KeyInfo { key: "sweep.search.start", about: "the first value, at least 1", example: "search = { start = 1, factor = 2, max = 4096 }" },
    KeyInfo { key: "sweep.search.factor", about: "how fast a guided search widens away from a wrong guess, at least 2", example: "search = { start = 1, factor = 2, max = 4096 }" },
    KeyInfo { key: "sweep.search.max", about: "the largest value to try, at least start", example: "search = { start = 1, factor = 2, max = 4096 }" },
    KeyInfo { key: "sweep.search.guided", about: "true (probe the estimate's predicted largest value first, where it covers the configuration) or false (bisect without it)", example: "search = { start = 1, max = 4096, guided = false }" },
    KeyInfo { key: "sweep.halve", about: "a first value, halved until a trial fits", example: "halve = { start = 4096 }" },
    KeyInfo { key: "sweep.halve.start", about: "the first value, at least 1", example: "halve = { start = 4096 }" },
    KeyInfo { key: "variant.skip_on_cpu_without", about: r#""bf16" or "fp16": on a CPU without that precision's matrix instructions, this variant is not run (and the run says so)"#, example: r#"skip_on_cpu_without = "bf16""# },
    KeyInfo { key: "sweep.search.anchor", about: "a value every variant tries first, between 1 and max", example: "search = { start = 1, max = 16384, anchor = 4096 }" },
    KeyInfo { key: "variant.name", about: "a name of lowercase letters, digits, _ and -", example: r#"name = "fp16""# },
];

const TABLES: [&str; 6] = ["experiment", "model", "data", "training", "run", "sweep"];

/// The entry for a dotted key; `sweep.values[2]` finds `sweep.values`, `variant[1].name` finds
/// `variant.name` and `variant[1].training.amp` finds `training.amp`.
pub(super) fn info(key: &str) -> Option<&'static KeyInfo> {
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in key.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let find = |k: &str| KEYS.iter().find(|i| i.key == k);
    find(&plain).or_else(|| plain.strip_prefix("variant.").and_then(find))
}

/// How to fix a bad value of `key`, e.g. "set it to the number of hidden layers, e.g. depth = 4".
pub(super) fn fix(key: &str) -> String {
    match info(key) {
        Some(i) => format!("set it to {}, e.g. {}", i.about, i.example),
        None if TABLES.contains(&key) => format!("write it as a [{key}] table"),
        None if key == "variant" => "write each variant as a [[variant]] table".into(),
        None => "check it against the spec format".into(),
    }
}
