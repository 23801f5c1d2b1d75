//! libtorch 2.11's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`), replayed at
//! the block level with its default settings, so that the estimate predicts what
//! `memory_allocated` and `memory_reserved` report on a GPU and where a budget stops a trial.
//!
//! The rules it keeps, each as the allocator has it:
//! - every request is rounded up to 512 bytes; up to 1 MiB it is served from the small pool,
//!   above from the large pool (`round_size`, `get_pool`);
//! - a request takes the best-fitting free block of its pool: the smallest that is large enough,
//!   the lowest address among equals (`get_free_block`);
//! - a block is split when what remains is worth keeping: 512 bytes in the small pool, more than
//!   1 MiB in the large (`should_split`). Otherwise the whole block is the allocation, and
//!   `allocated_bytes` counts all of it: a 100,000,000-byte weight in a fresh 96 MiB segment is
//!   counted as 100,663,296 bytes;
//! - without a fitting block a segment is made: 2 MiB for small requests, 20 MiB for requests
//!   under 10 MiB, else the request rounded up to 2 MiB (`get_allocation_size`);
//! - a per-process memory fraction refuses a segment that would take reserved memory over the
//!   limit; the allocator then frees every cached segment that is wholly free and tries again
//!   before it gives up (`release_cached_blocks`): that refusal is an out-of-memory;
//! - a freed block merges with free neighbours in its segment (`try_merge_blocks`);
//!   `empty_cache` returns wholly free segments.
//!
//! Addresses are not known ahead of time: segments are ordered by when they were made, blocks by
//! their offset inside their segment.

/// A block handed out, to give back with [`CachingAllocator::free`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId(u64);

pub const MIN_BLOCK: u64 = 512;
pub const SMALL_SIZE: u64 = 1 << 20;
pub const SMALL_BUFFER: u64 = 2 << 20;
pub const LARGE_SEGMENT: u64 = 20 << 20;
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;

/// A request the limit refused even with the cache emptied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The segment it needed: what PyTorch's message says it "Tried to allocate".
    pub requested: u64,
    /// Reserved memory when it was refused.
    pub reserved: u64,
}

#[derive(Debug, Clone)]
struct Block {
    size: u64,
    /// `None` while free.
    owner: Option<BlockId>,
}

#[derive(Debug, Clone)]
struct Segment {
    small: bool,
    /// Blocks in address order; their sizes add up to the segment's.
    blocks: Vec<Block>,
}

impl Segment {
    fn size(&self) -> u64 {
        self.blocks.iter().map(|b| b.size).sum()
    }
}

/// The allocator's state: its segments, and its counters as `torch.cuda.memory_stats` has them.
#[derive(Debug, Clone, Default)]
pub struct CachingAllocator {
    /// The per-process limit (memory fraction times the device's memory), if any.
    limit: Option<u64>,
    /// In the order made; a released segment leaves `None`, so later ones keep their order.
    segments: Vec<Option<Segment>>,
    next: u64,
    allocated: u64,
    reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
}

impl CachingAllocator {
    pub fn new(limit: Option<u64>) -> Self {
        CachingAllocator { limit, ..Default::default() }
    }

    /// `round_size`: a multiple of 512 bytes, at least 512.
    pub fn round(bytes: u64) -> u64 {
        bytes.max(1).div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
    }

    /// `get_allocation_size`: the segment made for a rounded request that no cached block fits.
    pub fn segment_size(size: u64) -> u64 {
        if size <= SMALL_SIZE {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            LARGE_SEGMENT
        } else {
            size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
        }
    }

    /// Allocates `bytes`: the block's id and the bytes `allocated_bytes` counts for it. When the
    /// limit refuses, the block is made all the same (so a replay can go on) and the refusal is
    /// returned beside it.
    pub fn malloc(&mut self, bytes: u64) -> (BlockId, u64, Option<OutOfMemory>) {
        let (id, counted, refused, _) = self.malloc_made(bytes);
        (id, counted, refused)
    }

    /// [`Self::malloc`], and the segment it made for the request, if it made one (what a GPU's
    /// allocation history records as `segment_alloc`).
    pub fn malloc_made(&mut self, bytes: u64) -> (BlockId, u64, Option<OutOfMemory>, Option<u64>) {
        let size = Self::round(bytes);
        let mut made = None;
        let small = size <= SMALL_SIZE;
        let mut refused = None;
        let (seg, idx) = match self.best_fit(size, small) {
            Some(found) => found,
            None => {
                let seg_size = Self::segment_size(size);
                if self.over_limit(seg_size) {
                    self.empty_cache();
                    if self.over_limit(seg_size) {
                        refused = Some(OutOfMemory { requested: seg_size, reserved: self.reserved });
                    }
                }
                self.segments
                    .push(Some(Segment { small, blocks: vec![Block { size: seg_size, owner: None }] }));
                self.reserved = self.reserved.saturating_add(seg_size);
                self.peak_reserved = self.peak_reserved.max(self.reserved);
                made = Some(seg_size);
                (self.segments.len() - 1, 0)
            }
        };
        let id = BlockId(self.next);
        self.next += 1;
        let segment = self.segments[seg].as_mut().expect("best_fit returns live segments");
        let remaining = segment.blocks[idx].size - size;
        let split = if small { remaining >= MIN_BLOCK } else { remaining > SMALL_SIZE };
        if split {
            segment.blocks[idx].size = size;
            segment.blocks.insert(idx + 1, Block { size: remaining, owner: None });
        }
        let block = &mut segment.blocks[idx];
        block.owner = Some(id);
        let counted = block.size;
        self.allocated = self.allocated.saturating_add(counted);
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        (id, counted, refused, made)
    }

    /// Frees a block; it merges with free neighbours. Returns the bytes it counted.
    pub fn free(&mut self, id: BlockId) -> u64 {
        for segment in self.segments.iter_mut().flatten() {
            let Some(i) = segment.blocks.iter().position(|b| b.owner == Some(id)) else { continue };
            segment.blocks[i].owner = None;
            let size = segment.blocks[i].size;
            self.allocated -= size;
            if i + 1 < segment.blocks.len() && segment.blocks[i + 1].owner.is_none() {
                segment.blocks[i].size += segment.blocks.remove(i + 1).size;
            }
            if i > 0 && segment.blocks[i - 1].owner.is_none() {
                let merged = segment.blocks.remove(i).size;
                segment.blocks[i - 1].size += merged;
            }
            return size;
        }
        debug_assert!(false, "freeing a block that is not allocated: {id:?}");
        0
    }

    /// `empty_cache`: returns every wholly free segment.
    pub fn empty_cache(&mut self) {
        for slot in &mut self.segments {
            if let Some(s) = slot {
                if s.blocks.len() == 1 && s.blocks[0].owner.is_none() {
                    self.reserved -= s.size();
                    *slot = None;
                }
            }
        }
    }

    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }

    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }

    /// `reset_peak_memory_stats`: the peaks restart from the current values.
    pub fn reset_peak(&mut self) {
        self.peak_allocated = self.allocated;
        self.peak_reserved = self.reserved;
    }

    fn over_limit(&self, segment: u64) -> bool {
        self.limit.is_some_and(|l| self.reserved.saturating_add(segment) > l)
    }

    /// The smallest free block of the pool that holds `size`, the earliest among equals.
    fn best_fit(&self, size: u64, small: bool) -> Option<(usize, usize)> {
        let mut best: Option<(u64, usize, usize)> = None;
        for (si, seg) in self.segments.iter().enumerate() {
            let Some(seg) = seg.as_ref().filter(|s| s.small == small) else { continue };
            for (bi, b) in seg.blocks.iter().enumerate() {
                if b.owner.is_none() && b.size >= size && best.is_none_or(|(s, ..)| b.size < s) {
                    best = Some((b.size, si, bi));
                }
            }
        }
        best.map(|(_, s, b)| (s, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn rounds_and_sizes_segments_as_libtorch() {
        assert_eq!(CachingAllocator::round(1), 512);
        assert_eq!(CachingAllocator::round(100_000_000), 100_000_256);
        assert_eq!(CachingAllocator::segment_size(512), 2 * MIB);
        assert_eq!(CachingAllocator::segment_size(MIB), 2 * MIB);
        assert_eq!(CachingAllocator::segment_size(MIB + 512), 20 * MIB);
        assert_eq!(CachingAllocator::segment_size(10 * MIB), 10 * MIB);
        assert_eq!(CachingAllocator::segment_size(100_000_256), 96 * MIB);
    }

    /// A 5000x5000 fp32 weight leaves 663,040 bytes in its 96 MiB segment: under 1 MiB, so not
    /// split off, and counted as allocated (the H100's depth-8 peak is 30 such blocks above the
    /// exact tensor bytes).
    #[test]
    fn an_unsplit_remainder_counts_as_allocated() {
        let mut a = CachingAllocator::new(None);
        let (id, counted, oom) = a.malloc(100_000_000);
        assert_eq!((counted, oom), (96 * MIB, None));
        assert_eq!((a.allocated(), a.reserved()), (96 * MIB, 96 * MIB));
        assert_eq!(a.free(id), 96 * MIB);
        assert_eq!((a.allocated(), a.reserved()), (0, 96 * MIB), "cached, not returned");
        a.empty_cache();
        assert_eq!(a.reserved(), 0);
    }

    #[test]
    fn small_requests_share_a_two_mib_segment_and_merge_back() {
        let mut a = CachingAllocator::new(None);
        let (x, cx, _) = a.malloc(1000);
        let (y, cy, _) = a.malloc(MIB);
        assert_eq!((cx, cy), (1024, MIB));
        assert_eq!(a.reserved(), 2 * MIB, "one small segment holds both");
        a.free(x);
        a.free(y);
        let (_, whole, _) = a.malloc(2 * MIB - 512);
        assert_eq!(whole, 2 * MIB - 512, "large pool: the small segment is not used");
        assert_eq!(a.reserved(), 2 * MIB + 20 * MIB);
    }

    #[test]
    fn a_cached_block_is_reused_best_fit_and_split_when_worth_it() {
        let mut a = CachingAllocator::new(None);
        let (big, ..) = a.malloc(40 * MIB);
        let (mid, ..) = a.malloc(12 * MIB);
        a.free(big);
        a.free(mid);
        // 11 MiB fits both; the 12 MiB block is the better fit, and 1 MiB left is not split.
        let (_, counted, _) = a.malloc(11 * MIB);
        assert_eq!(counted, 12 * MIB);
        // 30 MiB from the 40 MiB block: 10 MiB left over, split off and free.
        let (_, counted, _) = a.malloc(30 * MIB);
        assert_eq!(counted, 30 * MIB);
        assert_eq!(a.reserved(), 52 * MIB);
        assert_eq!(a.allocated(), 42 * MIB);
    }

    #[test]
    fn the_limit_empties_the_cache_before_it_refuses() {
        let mut a = CachingAllocator::new(Some(100 * MIB));
        let (x, ..) = a.malloc(60 * MIB);
        a.free(x);
        // A cached block big enough is split, not replaced: 50 MiB comes out of the 60.
        let (x, _, oom) = a.malloc(50 * MIB);
        assert_eq!((oom, a.reserved()), (None, 60 * MIB));
        a.free(x);
        // 60 cached + 70 new would pass the limit: the cache goes, then it fits.
        let (y, _, oom) = a.malloc(70 * MIB);
        assert_eq!((oom, a.reserved()), (None, 70 * MIB));
        let (_, _, oom) = a.malloc(40 * MIB);
        assert_eq!(oom, Some(OutOfMemory { requested: 40 * MIB, reserved: 70 * MIB }));
        a.free(y);
        assert_eq!(a.peak_reserved(), 110 * MIB, "the replay goes on past a refusal");
    }
}
