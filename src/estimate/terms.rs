//! The sizes the model is built from: tensor shapes of the MLP, its data and its batch, and the
//! per-optimizer state, each as the bytes libtorch allocates for it.
//!
//! Nothing here knows about time; [`super::phases`] says when each of these is allocated and
//! freed.
use crate::spec::{Dtype, OptimizerSpec};

/// The shape of the data set: how many rows, how wide, how many classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DataShape {
    pub samples: usize,
    pub features: usize,
    pub classes: usize,
}

/// Where the tensors live, which changes what the allocator counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// oomlab's counting CPU allocator: every tensor's exact `nbytes`, including the 0-dim CPU
    /// tensors libtorch wraps Python-style scalars in. The model is exact here.
    #[default]
    Cpu,
    /// The CUDA caching allocator: `allocated_bytes` counts blocks, rounded up to 512 bytes; CPU
    /// scalars and a CSV's CPU staging copy are not on the device. cuBLAS workspaces and blocks
    /// handed out whole from the cache are not modelled.
    Cuda,
}

impl Target {
    /// Bytes the allocator counts for a request of `bytes`.
    pub fn counted(self, bytes: u64) -> u64 {
        match self {
            Target::Cpu => bytes,
            // c10::cuda::CUDACachingAllocator::round_size: at least kMinBlockSize (512), in
            // multiples of it.
            Target::Cuda if bytes == 0 => 0,
            Target::Cuda => bytes.div_ceil(512).saturating_mul(512),
        }
    }

    /// Bytes a tensor on the host (a wrapped scalar, a CPU step counter) costs the allocator
    /// replayed: all of them on the CPU, none on CUDA, whose allocator does not see the host.
    pub fn host(self, bytes: u64) -> u64 {
        match self {
            Target::Cpu => bytes,
            Target::Cuda => 0,
        }
    }
}

/// Bytes of one element of the training dtype.
pub fn elt_size(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::Float32 => 4,
        Dtype::Float64 => 8,
        Dtype::Bfloat16 | Dtype::Float16 => 2,
    }
}

/// Class indices (`y`) and gather indices are int64.
pub const INDEX_BYTES: u64 = 8;

/// One Linear layer, `inputs -> outputs`: weight `[outputs, inputs]`, bias `[outputs]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layer {
    pub inputs: u64,
    pub outputs: u64,
}

impl Layer {
    pub fn weight_numel(self) -> u64 {
        self.inputs.saturating_mul(self.outputs)
    }
    pub fn bias_numel(self) -> u64 {
        self.outputs
    }
}

/// Every size the phases need, for one configuration.
#[derive(Debug, Clone)]
pub struct Terms {
    /// Element size of the training dtype.
    pub elt: u64,
    pub dtype: Dtype,
    /// An MLP's hidden layers, then the head (as `Mlp::new` makes them); empty for other kinds.
    pub layers: Vec<Layer>,
    /// The parameters' element counts in the optimizer's order.
    pub params: Vec<u64>,
    pub shape: DataShape,
    /// The micro-batch: `training.batch_size` rows per forward/backward.
    pub batch: u64,
    pub target: Target,
}

impl Terms {
    /// The MLP of hidden layers `hidden` (widths, first to last) over `shape`.
    pub fn new(shape: DataShape, hidden: &[usize], batch: usize, dtype: Dtype, target: Target) -> Self {
        let mut widths = vec![shape.features as u64];
        widths.extend(hidden.iter().map(|&w| w as u64));
        widths.push(shape.classes as u64);
        let layers: Vec<Layer> = widths.windows(2).map(|w| Layer { inputs: w[0], outputs: w[1] }).collect();
        let params = layers.iter().flat_map(|l| [l.weight_numel(), l.bias_numel()]).collect();
        Terms { elt: elt_size(dtype), dtype, layers, params, shape, batch: batch as u64, target }
    }

    /// A model of another kind, with these parameters (`nn::Model::parameters`' order).
    pub fn other(shape: DataShape, params: Vec<u64>, batch: usize, dtype: Dtype, target: Target) -> Self {
        Terms { elt: elt_size(dtype), dtype, layers: Vec::new(), params, shape, batch: batch as u64, target }
    }

    /// The parameter tensors in the order the optimizer holds them (for an MLP `Mlp::parameters`:
    /// weight then bias, layer by layer), in elements.
    pub fn param_numels(&self) -> Vec<u64> {
        self.params.clone()
    }

    pub fn param_count(&self) -> u64 {
        self.param_numels().iter().fold(0u64, |sum, &n| sum.saturating_add(n))
    }

    /// Parameter bytes as the allocator counts them (one allocation per tensor).
    pub fn param_bytes(&self) -> u64 {
        self.param_numels().iter().fold(0u64, |sum, &n| sum.saturating_add(self.bytes(n)))
    }

    /// Counted bytes of a tensor of `numel` elements of the training dtype.
    pub fn bytes(&self, numel: u64) -> u64 {
        self.target.counted(numel.saturating_mul(self.elt))
    }

    /// Counted bytes of an int64 tensor of `numel` elements.
    pub fn index_bytes(&self, numel: u64) -> u64 {
        self.target.counted(numel.saturating_mul(INDEX_BYTES))
    }

    /// The hidden layers' count.
    pub fn depth(&self) -> usize {
        self.layers.len() - 1
    }

    /// One hidden activation `[batch, outputs of layer i]`: a Linear's output, a ReLU's output,
    /// or a gradient of either.
    pub fn activation(&self, layer: usize) -> u64 {
        self.bytes(self.batch.saturating_mul(self.layers[layer].outputs))
    }

    /// `[batch, inputs of layer i]`: the gradient w.r.t. a layer's input.
    pub fn layer_input(&self, layer: usize) -> u64 {
        self.bytes(self.batch.saturating_mul(self.layers[layer].inputs))
    }

    /// `[batch, classes]`: logits, log-probabilities, and their gradients.
    pub fn logits(&self) -> u64 {
        self.bytes(self.batch.saturating_mul(self.shape.classes as u64))
    }

    /// A 0-dim tensor of the training dtype: the loss, NLL's `total_weight`, the seed gradient.
    pub fn scalar(&self) -> u64 {
        self.bytes(1)
    }

    /// The batch's features `[batch, features]` in the training dtype.
    pub fn batch_x(&self) -> u64 {
        self.bytes(self.batch.saturating_mul(self.shape.features as u64))
    }

    /// The batch's labels `[batch]`, int64.
    pub fn batch_y(&self) -> u64 {
        self.index_bytes(self.batch)
    }

    /// The data set's features `[samples, features]`.
    pub fn data_x(&self) -> u64 {
        self.bytes((self.shape.samples as u64).saturating_mul(self.shape.features as u64))
    }

    /// The data set's labels `[samples]`, int64.
    pub fn data_y(&self) -> u64 {
        self.index_bytes(self.shape.samples as u64)
    }

    /// The bytes one `tensor.op_(scalar)` or `tensor / scalar` allocates for a while: ATen wraps
    /// the C++ `double` in a 0-dim CPU double tensor (`wrapped_scalar_tensor`, 8 bytes), and on
    /// the CPU TensorIterator then casts it to the op's dtype (another 0-dim tensor) unless the
    /// dtype is already double. On CUDA both live on the CPU, which the CUDA allocator does not
    /// see.
    pub fn wrapped_scalar(&self) -> u64 {
        let cast = if self.dtype == Dtype::Float64 { 0 } else { self.elt };
        self.target.host(8 + cast)
    }

    /// An integer scalar wrapped for an int64 op (`remainder(n)` in the gather): 8 bytes, no cast.
    pub fn wrapped_index_scalar(&self) -> u64 {
        self.target.host(8)
    }
}

/// How many parameter-sized state tensors an optimizer keeps per parameter, from its first step
/// on: SGD none; SGD with momentum its `momentum_buffer` (a clone of the first gradient); Adam
/// and AdamW `exp_avg` and `exp_avg_sq` (`zeros_like` the parameter). (amsgrad, which would add
/// `max_exp_avg_sq`, is never turned on by oomlab.)
pub fn state_tensors_per_param(opt: &OptimizerSpec) -> u64 {
    match *opt {
        OptimizerSpec::Sgd { momentum, .. } if momentum != 0.0 => 1,
        OptimizerSpec::Sgd { .. } => 0,
        OptimizerSpec::Adam { .. } | OptimizerSpec::AdamW { .. } => 2,
    }
}

/// Optimizer state bytes once every parameter has some.
pub fn optimizer_state_bytes(opt: &OptimizerSpec, terms: &Terms) -> u64 {
    state_tensors_per_param(opt).saturating_mul(terms.param_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(depth: usize, target: Target) -> Terms {
        Terms::new(
            DataShape { samples: 32, features: 20, classes: 4 },
            &vec![50; depth],
            8,
            Dtype::Float32,
            target,
        )
    }

    #[test]
    fn parameters_follow_the_mlp_widths() {
        let t = terms(3, Target::Cpu);
        assert_eq!(t.layers.len(), 4);
        // The count `train::model`'s own test checks for the same widths.
        let expected = (20 * 50 + 50) + 2 * (50 * 50 + 50) + (50 * 4 + 4);
        assert_eq!(t.param_count(), expected);
        assert_eq!(t.param_bytes(), 4 * expected);
        assert_eq!(t.param_numels(), vec![1000, 50, 2500, 50, 2500, 50, 200, 4]);
        let linear = terms(0, Target::Cpu);
        assert_eq!(linear.param_count(), 20 * 4 + 4);
    }

    #[test]
    fn optimizer_state_is_a_multiple_of_the_parameters() {
        let t = terms(2, Target::Cpu);
        let p = t.param_bytes();
        let sgd = OptimizerSpec::Sgd { lr: 0.1, momentum: 0.0, weight_decay: 0.0 };
        let momentum = OptimizerSpec::Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 };
        let adam = OptimizerSpec::Adam { lr: 0.1, weight_decay: 0.0 };
        let adamw = OptimizerSpec::AdamW { lr: 0.1, weight_decay: 0.01 };
        assert_eq!(optimizer_state_bytes(&sgd, &t), 0);
        assert_eq!(optimizer_state_bytes(&momentum, &t), p);
        assert_eq!(optimizer_state_bytes(&adam, &t), 2 * p);
        assert_eq!(optimizer_state_bytes(&adamw, &t), 2 * p);
    }

    #[test]
    fn data_batch_and_activation_sizes() {
        let t = terms(1, Target::Cpu);
        assert_eq!(t.data_x() + t.data_y(), 32 * 20 * 4 + 32 * 8);
        assert_eq!(t.batch_x() + t.batch_y(), 8 * 20 * 4 + 8 * 8);
        assert_eq!(t.activation(0), 8 * 50 * 4);
        assert_eq!(t.layer_input(1), 8 * 50 * 4);
        assert_eq!(t.logits(), 8 * 4 * 4);
        assert_eq!(t.scalar(), 4);
        assert_eq!(t.wrapped_scalar(), 12, "a double, then its float cast");
        let f64_terms = Terms::new(t.shape, &[50], 8, Dtype::Float64, Target::Cpu);
        assert_eq!(f64_terms.wrapped_scalar(), 8, "no cast for a double op");
        assert_eq!(f64_terms.param_bytes(), 2 * t.param_bytes());
    }

    #[test]
    fn cuda_counts_whole_512_byte_blocks() {
        assert_eq!(Target::Cuda.counted(1), 512);
        assert_eq!(Target::Cuda.counted(512), 512);
        assert_eq!(Target::Cuda.counted(513), 1024);
        assert_eq!(Target::Cpu.counted(513), 513);
        let t = terms(1, Target::Cuda);
        assert_eq!(t.scalar(), 512);
        assert_eq!(t.wrapped_scalar(), 0, "CPU scalars are not on the device");
        // Each tensor is rounded on its own: 4 tensors of a 1-hidden-layer MLP.
        assert_eq!(t.param_bytes(), 4096 + 512 + 1024 + 512);
    }
}
