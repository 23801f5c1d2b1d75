//! The staging buffer of CUDA's reduction kernel: what a Linear's bias gradient costs on a GPU
//! and not on the CPU.
//!
//! The autograd engine makes a bias's gradient by summing the incoming `[rows, cols]` gradient
//! over its rows (`validate_outputs` -> `sum_to`, after `AddmmBackward0` returns). On CUDA that
//! sum is `gpu_reduce_kernel` (`aten/src/ATen/native/cuda/Reduce.cuh`, 2.11), which, when it
//! splits each output's rows over several blocks (`should_global_reduce`), takes a staging
//! buffer and semaphores from the caching allocator for the kernel's life:
//! `global_memory_size() = sizeof(acc) * outputs * ctas_per_output * block.x * output_vec_size`
//! (the `block.x * output_vec_size` factor although the kernel writes a 128th of it) and
//! `semaphore_size() = 4 * grid.x`. `setReduceConfig` decides `ctas_per_output` from the shape
//! and the GPU's SM count, replayed here line for line.
//!
//! For a 2048-wide layer at batch 4096 it is 64 MiB (`8 * rows * cols` bytes once rows pass
//! about a thousand: twice an fp32 activation, four times an fp16 one); nothing at batch 32,
//! which is why the lesson's batch-32 sweep was right without it and activation-heavy MLPs were
//! 5-12% (fp32) and about a fifth (autocast) under on an H100.
use super::workspace::GpuArch;

/// `mnt_wrapper<T>::MAX_NUM_THREADS` for every real dtype.
const MAX_NUM_THREADS: u64 = 512;
const WARP: u64 = 32;
/// `min_values_per_thread` and `max_values_per_thread` of `setReduceConfig` (CUDA, not ROCm).
const MIN_VALUES_PER_THREAD: u64 = 16;
const MAX_VALUES_PER_THREAD: u64 = 256;

impl GpuArch {
    /// `multiProcessorCount`: 132 on an H100 SXM and an H200 (an H100 PCIe has 114, which
    /// changes the buffer only past batch 7296 at width 2048); 108 (an A100) for the others.
    pub fn sm_count(self) -> u64 {
        match self {
            GpuArch::Hopper => 132,
            GpuArch::Other => 108,
        }
    }

    /// `maxThreadsPerMultiProcessor`: 2048 on Hopper and Ampere's A100.
    pub fn max_threads_per_sm(self) -> u64 {
        2048
    }
}

/// The staging buffer and semaphores (bytes asked for) of summing a contiguous `[rows, cols]`
/// tensor over its rows on a GPU of `arch`, accumulating in `acc_bytes` (4 for float, half and
/// bfloat16; 8 for double). `None` when the kernel reduces without them.
pub fn sum_rows_staging(rows: u64, cols: u64, acc_bytes: u64, arch: GpuArch) -> Option<(u64, u64)> {
    if rows <= 1 || cols <= 1 {
        return None; // a copy or a reduction along the fastest dimension: no global reduce
    }
    // get_output_vec_size: 4, halved until it divides the data's address in elements (a block
    // of the caching allocator is 512-byte aligned) and the outputs' count and stride.
    let mut vec = 4;
    while !cols.is_multiple_of(vec) {
        vec /= 2;
    }
    let (dim0, dim1) = (cols / vec, rows);
    // set_block_dimension
    let mnt = MAX_NUM_THREADS / vec;
    let pow2 = |d: u64| if d < mnt { last_pow2(d) } else { mnt };
    let (p0, p1) = (pow2(dim0), pow2(dim1));
    let bw = p0.min(WARP);
    let bh = p1.min(mnt / bw);
    let bw = p0.min(mnt / bh);
    let threads = bw * bh;
    // output_mult[0] = split_output(block_width); then across warps if each thread would
    // otherwise read enough values.
    let mut step_output = bw;
    let mut step_input = 1;
    let split_across_warps = rows.div_ceil(step_input) >= (bh * 16).min(MAX_VALUES_PER_THREAD);
    if split_across_warps {
        step_input *= bh;
    } else {
        step_output *= bh;
    }
    let target_grid = arch.sm_count() * (arch.max_threads_per_sm() / threads);
    let grid_x = (cols / vec).div_ceil(step_output);
    let values_per_thread = rows.div_ceil(step_input);
    if !split_across_warps || values_per_thread < MAX_VALUES_PER_THREAD || grid_x > target_grid {
        return None;
    }
    let ctas = target_grid
        .div_ceil(grid_x)
        .min(values_per_thread.div_ceil(MIN_VALUES_PER_THREAD))
        .max(values_per_thread.div_ceil(MAX_VALUES_PER_THREAD));
    if ctas <= 1 {
        return None;
    }
    Some((acc_bytes * cols * ctas * bw * vec, 4 * grid_x))
}

/// The rows of the partial sums that layer norm's backward takes on CUDA for its weight's and
/// bias's gradients, when `rows` (M, the normalized rows) far outnumber `cols` (N, the
/// normalized width): `LaunchGammaBetaBackwardCUDAKernel` (`layer_norm_kernel.cu`, 2.11) then
/// launches blocks along M, each writing a partial row into `dgamma_blocks` and `dbeta_blocks`
/// (`[blocks.y, N]` in the weight's dtype, made after the three gradients), and ends with
/// `*dgamma = dgamma_blocks.sum(0)`: a reduction (with its own staging buffer) into a new
/// tensor, which replaces the gradient made before, freed then. `None` on the other path, which
/// writes the gradients in place.
pub fn layer_norm_partial_rows(rows: u64, cols: u64, arch: GpuArch) -> Option<u64> {
    // `M > 64 * 1024 && N / block_dim_x < sm_count / 2`, block_dim_x 32 on CUDA.
    if rows <= 64 * 1024 || cols / WARP >= arch.sm_count() / 2 {
        return None;
    }
    let blocks_x = cols.div_ceil(WARP);
    // rows_per_block_y 32; the grid capped at `64 * 1024 / 2` blocks; threads.y 1.
    Some((32 * 1024 / blocks_x).min(rows.div_ceil(32)))
}

/// The largest power of two not above `n` (`last_pow2`), 1 for 0.
fn last_pow2(n: u64) -> u64 {
    if n == 0 {
        1
    } else {
        1 << (63 - n.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Replayed by hand from `setReduceConfig` (2.11) for an H100: the batch-32 sweep and a
    /// 10-class head take nothing; a 2048-wide layer takes 8 bytes per gradient element from
    /// batch 1024 on, until the SMs run out of blocks.
    #[test]
    fn staging_buffer_by_shape() {
        let h = GpuArch::Hopper;
        assert_eq!(sum_rows_staging(32, 5000, 4, h), None);
        assert_eq!(sum_rows_staging(32, 2048, 4, h), None);
        assert_eq!(sum_rows_staging(1020, 2048, 4, h), None);
        assert_eq!(sum_rows_staging(4096, 10, 4, h), None);
        assert_eq!(sum_rows_staging(1024, 2048, 4, h), Some((16 * MIB, 64)));
        assert_eq!(sum_rows_staging(2048, 2048, 4, h), Some((32 * MIB, 64)));
        assert_eq!(sum_rows_staging(4096, 2048, 4, h), Some((64 * MIB, 64)));
        assert_eq!(sum_rows_staging(8192, 2048, 4, h), Some((128 * MIB, 64)));
        assert_eq!(sum_rows_staging(4096, 256, 4, h), Some((8 * MIB, 8)));
        // SM-limited: 53 blocks per output column.
        assert_eq!(sum_rows_staging(4096, 5000, 4, h), Some((4 * 5000 * 53 * 32 * 4, 4 * 40)));
        // Double accumulates in 8 bytes.
        assert_eq!(sum_rows_staging(4096, 2048, 8, h), Some((128 * MIB, 64)));
    }

    /// As an H200 measured them (`own_model`, a tiny ViT of width 64 at batch 1024, 65 tokens:
    /// M 66,560): two `[2080, 64]` fp32 partials of 532,480 B, and each one's `sum(0)` a
    /// 278,528 B staging buffer and 4 B of semaphores, then the gradient, 256 B.
    #[test]
    fn layer_norm_partials_by_shape() {
        let h = GpuArch::Hopper;
        assert_eq!(layer_norm_partial_rows(66_560, 64, h), Some(2080));
        assert_eq!(sum_rows_staging(2080, 64, 4, h), Some((278_528, 4)));
        // M at 64 Ki rows or below, or a width of 66 warps or more, writes in place.
        assert_eq!(layer_norm_partial_rows(65_536, 64, h), None);
        assert_eq!(layer_norm_partial_rows(1 << 20, 66 * 32, h), None);
        assert_eq!(layer_norm_partial_rows(1 << 20, 66 * 32 - 1, h), Some(32 * 1024 / 66));
        // The grid's cap: 32 Ki blocks over the width's warps.
        assert_eq!(layer_norm_partial_rows(1 << 22, 512, h), Some(2048));
        assert_eq!(layer_norm_partial_rows(1 << 22, 512, GpuArch::Other), Some(2048));
        assert_eq!(layer_norm_partial_rows(1 << 20, 54 * 32, GpuArch::Other), None);
    }

    #[test]
    fn fewer_sms_cap_it_sooner() {
        let (hopper, other) = (GpuArch::Hopper, GpuArch::Other);
        let at = |rows, arch| sum_rows_staging(rows, 2048, 4, arch).unwrap().0;
        assert_eq!(at(4096, hopper), at(4096, other), "below both caps: the shape decides");
        assert!(at(65536, other) < at(65536, hopper));
    }

    /// The staging allocations of a replay (its events from the sites that make them).
    fn staging(c: &crate::spec::Config, target: crate::estimate::Target) -> Vec<u64> {
        let shape = crate::estimate::data_shape(&c.data).unwrap();
        let options = match target {
            crate::estimate::Target::Cuda => crate::estimate::Options::cuda(GpuArch::Hopper, [c]),
            crate::estimate::Target::Cpu => crate::estimate::Options::default(),
        };
        let (_, events) = crate::estimate::predict_blocks(c, shape, &options).unwrap();
        events
            .iter()
            .filter(|e| {
                e.action == crate::estimate::ledger::BlockAction::Alloc
                    && e.step == 1
                    && e.phase == crate::schema::Phase::Backward
            })
            .filter(|e| e.site.contains("kernels.rs"))
            .map(|e| e.requested)
            .collect()
    }

    /// The replay takes the buffer in every qualifying Linear's backward on CUDA, and only
    /// there: the MLP's four hidden layers (not its 10-class head), a Transformer's Linears
    /// over batch x sequence rows; none on the CPU.
    #[test]
    fn each_linears_backward_takes_it_on_cuda_only() {
        use crate::estimate::Target;
        use crate::spec::examples::mlp as config;
        use crate::spec::{DataSpec, OptimizerSpec};
        let sgd = OptimizerSpec::Sgd { lr: 0.01, momentum: 0.0, weight_decay: 0.0 };
        let mut mlp = config(4, 2048, 4096, sgd);
        mlp.data = DataSpec::Synthetic { samples: 4096, features: 2048, classes: 10, seed: 0 };
        let buffers = staging(&mlp, Target::Cuda);
        assert_eq!(buffers.iter().filter(|&&b| b == 64 * MIB).count(), 4, "{buffers:?}");
        assert!(staging(&mlp, Target::Cpu).iter().all(|&b| b != 64 * MIB));

        let mut encoder = crate::estimate::tests::transformer_config();
        encoder.training.optimizer = mlp.training.optimizer;
        encoder.data = DataSpec::Tokens { samples: 16, seq_len: 256, vocab: 100, classes: 4, seed: 0 };
        // 4096 rows: the attention's in-projection (384 wide), out-projection (128) and the
        // feed-forward's two Linears (256, 128), each `sum_rows_staging(4096, width)`.
        let mut want: Vec<u64> = [384, 128, 256, 128]
            .iter()
            .map(|&w| sum_rows_staging(4096, w, 4, GpuArch::Hopper).unwrap().0)
            .collect();
        let mut got: Vec<u64> =
            staging(&encoder, Target::Cuda).into_iter().filter(|b| want.contains(b)).collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        assert!(staging(&encoder, Target::Cpu).iter().all(|b| !want.contains(b)));
    }

    #[test]
    fn last_pow2_is_the_largest_power_not_above() {
        assert_eq!([0, 1, 2, 3, 4, 127, 128, 129].map(last_pow2), [1, 1, 2, 2, 4, 64, 128, 128]);
    }
}
