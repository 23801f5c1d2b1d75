//! The sizes the replay needs beside the model's own tensors: the data set's shape, the
//! parameters (for the optimizer's step), the element size, and what the allocator counts on each
//! target; and the optimizer's state per parameter.
//!
//! Nothing here knows about time; [`super::phases`] says when each of these is allocated and
//! freed. The model's activations and gradients are not here: the replay runs the model's own
//! code over symbolic tensors ([`super::graph`]), which know their shapes.
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

/// Every size the phases need, for one configuration.
#[derive(Debug, Clone)]
pub struct Terms {
    /// Element size of the training dtype.
    pub elt: u64,
    pub dtype: Dtype,
    /// The parameters' element counts in the model's order.
    pub params: Vec<u64>,
    /// Those the optimizer holds, in its order: all of them, or a ZeRO rank's shard.
    pub optimized: Vec<u64>,
    pub shape: DataShape,
    /// The micro-batch: `training.batch_size` rows per forward/backward.
    pub batch: u64,
    pub target: Target,
}

impl Terms {
    /// A model with these parameters (`nn::Model::parameters`' element counts, in its order).
    pub fn new(shape: DataShape, params: Vec<u64>, batch: usize, dtype: Dtype, target: Target) -> Self {
        Terms {
            elt: dtype.bytes(),
            dtype,
            optimized: params.clone(),
            params,
            shape,
            batch: batch as u64,
            target,
        }
    }

    /// With the optimizer over `part` only (indices into the parameters, in its order): a ZeRO
    /// rank's shard.
    pub fn optimizing(self, part: &[usize]) -> Self {
        let optimized = part.iter().map(|&i| self.params[i]).collect();
        Terms { optimized, ..self }
    }

    /// The parameters the optimizer holds, in its order, in elements.
    pub fn optimizer_numels(&self) -> &[u64] {
        &self.optimized
    }

    /// Bytes of the parameters the optimizer holds.
    pub fn optimized_bytes(&self) -> u64 {
        self.optimized.iter().fold(0u64, |sum, &n| sum.saturating_add(self.bytes(n)))
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

    /// The bytes one `tensor.op_(scalar)` or `tensor / scalar` allocates for a while: ATen wraps
    /// the C++ `double` in a 0-dim CPU double tensor (`wrapped_scalar_tensor`, 8 bytes), and on
    /// the CPU TensorIterator then casts it to the op's dtype (another 0-dim tensor) unless the
    /// dtype is already double. On CUDA both live on the CPU, which the CUDA allocator does not
    /// see.
    pub fn wrapped_scalar(&self) -> u64 {
        let cast = if self.dtype == Dtype::Float64 { 0 } else { self.elt };
        self.target.host(8 + cast)
    }
}

/// Optimizer state bytes once every parameter the optimizer holds has some.
pub fn optimizer_state_bytes(opt: &OptimizerSpec, terms: &Terms) -> u64 {
    opt.kind().state_tensors().saturating_mul(terms.optimized_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MLP 20 -> 50 (x depth) -> 4's parameters, weight then bias, layer by layer.
    fn terms(depth: usize, target: Target) -> Terms {
        let mut widths = vec![20u64];
        widths.extend(std::iter::repeat_n(50, depth));
        widths.push(4);
        let params = widths.windows(2).flat_map(|w| [w[0] * w[1], w[1]]).collect();
        Terms::new(DataShape { samples: 32, features: 20, classes: 4 }, params, 8, Dtype::Float32, target)
    }

    #[test]
    fn parameters_count_and_bytes() {
        let t = terms(3, Target::Cpu);
        let expected = (20 * 50 + 50) + 2 * (50 * 50 + 50) + (50 * 4 + 4);
        assert_eq!(t.param_count(), expected);
        assert_eq!(t.param_bytes(), 4 * expected);
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
    fn a_wrapped_scalar_is_a_double_and_its_cast() {
        let t = terms(1, Target::Cpu);
        assert_eq!(t.wrapped_scalar(), 12, "a double, then its float cast");
        let f64_terms = Terms { dtype: Dtype::Float64, elt: 8, ..t.clone() };
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
        assert_eq!(t.bytes(1), 512);
        assert_eq!(t.wrapped_scalar(), 0, "CPU scalars are not on the device");
        // Each tensor is rounded on its own: 4 tensors of a 1-hidden-layer MLP.
        assert_eq!(t.param_bytes(), 4096 + 512 + 1024 + 512);
    }
}
