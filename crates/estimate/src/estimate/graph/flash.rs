//! The sizes of the CPU flash-attention kernel (`_scaled_dot_product_flash_attention_for_cpu`
//! and its backward): its accumulate type, its query block, and the chunks its threads run.
use tch::Kind;

use super::tensor::Dt;

/// The CPU flash kernel's accumulate type for inputs of `dt` (`at::toOpMathType`).
pub(crate) fn flash_acc(dt: Dt) -> Dt {
    if dt.0 == Kind::Double {
        dt
    } else {
        Dt(Kind::Float)
    }
}

/// How many chunks `at::parallel_for(0, n, 1, ..)` runs `n` work items in on `threads` threads
/// (OpenMP's backend, `ParallelOpenMP.h`): as many threads as items at most, each a contiguous
/// chunk of `ceil(n / threads)` items, those left empty not run.
pub(crate) fn flash_chunks(n: i64, threads: usize) -> usize {
    let threads = (threads.max(1) as i64).min(n.max(1));
    let chunk = (n + threads - 1) / threads;
    ((n + chunk - 1) / chunk).max(1) as usize
}

/// The bytes by which a backward peak through the CPU flash kernel may fall short of the
/// estimate on a busy machine: the chunks' `dsum` buffers are modelled live at once, and all but
/// one of them may come and go before another is made. For a query of `[batch, heads, len, _]`
/// whose accumulate type takes `acc_bytes` (8 for float64, else 4).
pub fn flash_backward_racy(batch: i64, heads: i64, len: i64, threads: usize, acc_bytes: u64) -> u64 {
    let chunks = flash_chunks(batch * heads, threads) as u64;
    (chunks - 1) * acc_bytes * flash_split(len) as u64
}

/// The CPU flash kernel's query block: 32 rows under 192, 64 under 768, else 256 (at most the
/// sequence).
pub(crate) fn flash_split(l: i64) -> i64 {
    let split = if l < 192 {
        32
    } else if l < 768 {
        64
    } else {
        256
    };
    split.min(l)
}
